"""The hostile suite's parts: real unprivileged accounts (wsmallory, wsvictim, and the group
wsproject, each name ending in the parallel worker's, made with useradd and removed after), a
user's commands run as that account, a cluster in a folder every user can reach, and the fixtures
that hand them to the tests (see the hostile test modules; without root or useradd those modules
are skipped, saying why).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wattsched.harness.testing import BIN, Cluster, host_lock, reachable_by_all, restore_modes

# Each parallel worker of the suite (pytest-xdist's gw0, gw1, ...) has accounts of its own: one
# worker's module removing its accounts must not take them from under another's.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
USERS = (f"wsmallory{WORKER}", f"wsvictim{WORKER}")
GROUP = f"wsproject{WORKER}"

needs_accounts = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                    reason="needs root and useradd to create the unprivileged accounts")

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def final(cluster: Cluster, job_id: int) -> dict:
    return cluster.wait_state(job_id, ENDED, timeout=60)


class Account:
    """An unprivileged user of the machine, running commands from their own folder in the cluster's."""

    def __init__(self, name: str, cluster: Cluster):
        import pwd

        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid
        self.groups = os.getgrouplist(name, entry.pw_gid)
        self.cluster = cluster
        self.home = cluster.root / f"home-{name}"
        self.home.mkdir(exist_ok=True)
        os.chown(self.home, self.uid, self.gid)
        os.chmod(self.home, 0o755)

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": f"{BIN}:/usr/bin:/bin", "WATTSCHED_CONF": str(self.cluster.conf),
               "SLURM_CONF": str(self.cluster.conf), "HOME": str(self.home), "USER": self.name, "LANG": "C.UTF-8"}
        env.update(extra)
        return env

    def run(self, *args: str, umask: int = 0o022, input: bytes | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        """A command as this user, from their own folder, with their own groups and umask."""
        return subprocess.run([str(BIN / args[0]) if (BIN / args[0]).exists() else args[0], *args[1:]],
                              user=self.uid, group=self.gid, extra_groups=self.groups, umask=umask,
                              env=env or self.env(), cwd=self.home, capture_output=True, input=input,
                              timeout=timeout)

    def sbatch(self, *args: str, umask: int = 0o022) -> int:
        result = self.run("sbatch", "--parsable", *args, umask=umask)
        assert result.returncode == 0, result.stderr.decode()
        return int(result.stdout.strip())

    def token(self) -> str:
        return self.cluster.token(self.uid, self.name)


@contextlib.contextmanager
def own_cluster(extra: str, **settings: Any) -> Iterator[Cluster]:
    """A cluster of its own for a test that changes limits (in a folder every user can reach);
    ``settings``: Cluster's other arguments (partitions, node_extra, more nodes)."""
    root = Path(tempfile.mkdtemp(prefix="wattsched-hostile-limits-"))
    os.chmod(root, 0o755)
    cluster = Cluster(root, **{"nodes": 1, "cpus": 2, **settings}, extra=extra).start()
    os.chmod(cluster.conf, 0o644)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def accounts() -> Iterator[None]:
    restore = reachable_by_all([sys.executable, str(BIN / "sbatch")])
    with host_lock("accounts"):  # useradd gives up on a passwd file another worker holds
        subprocess.run(["groupadd", "-f", GROUP], check=True)
        for name in USERS:
            subprocess.run(["userdel", name], capture_output=True, check=False)
            subprocess.run(["useradd", "-M", "-N", "-g", "users", "-s", "/bin/sh", name], check=True)
        subprocess.run(["usermod", "-a", "-G", GROUP, USERS[0]], check=True)
    yield
    with host_lock("accounts"):
        for name in USERS:
            subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", GROUP], capture_output=True, check=False)
    restore_modes(restore)


@pytest.fixture(scope="module")
def shared(accounts) -> Iterator[Cluster]:
    """A cluster in a folder every user can reach (the controller makes its state folder private)."""
    root = Path(tempfile.mkdtemp(prefix="wattsched-hostile-"))
    os.chmod(root, 0o755)
    cluster = Cluster(root, nodes=2, cpus=4,
                      extra="AcctGatherProfileType=acct_gather_profile/hdf5\nLicenses=matlab:1").start()
    os.chmod(cluster.conf, 0o644)
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def mallory(shared) -> Account:
    return Account(USERS[0], shared)


@pytest.fixture(scope="module")
def victim(shared) -> Account:
    return Account(USERS[1], shared)



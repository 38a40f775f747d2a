"""Hosts on one machine, for the multi-host tests and benches: each a network namespace (its own address on a
bridge) and UTS namespace (its own hostname), with its own spool (a private mount over the same
path), finding the others by name (each namespace's /etc/hosts, as ``ip netns exec`` provides it).
The rest of the file system is shared, as a site's shared home and configuration would be.

Also a PostgreSQL server of its own on one of them (``start_postgres``), for the state and
accounting that several controllers share.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from wattsched import auth
from wattsched.harness.testing import BIN, reachable_by_all, restore_modes, wait_for

H = TypeVar("H", bound="Hosts")


def netns_usable() -> str:
    """"" where network namespaces can be made here; else why not."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs iproute2 (ip) and util-linux (unshare)"
    probe = f"wsprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def postgres_bin() -> str:
    """The folder of PostgreSQL's server programs (Debian's layout), or ""."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else ""


def running(make: Callable[[Path], H], prefix: str) -> Iterator[H]:
    """Hosts made by ``make`` in a fresh folder, started, then stopped with all they ran, the
    folder removed (a pytest fixture's body)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)  # a job's user passes through to its scratch folder
    restore = reachable_by_all([sys.executable, str(BIN / "srun")])  # nobody runs srun in jobs
    hosts = make(root)
    try:
        hosts.start()
        yield hosts
    finally:
        hosts.stop()
        restore_modes(restore)
        shutil.rmtree(root, ignore_errors=True)


def _free_subnet(base: int) -> str:
    """A /24 of 10.x.0 that no interface here has yet (hosts of another test beside these, say)."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for step in range(100):
        subnet = f"10.{base + (os.getpid() + step) % 100}.0"
        if f" {subnet}." not in used:
            return subnet
    raise RuntimeError(f"every subnet from 10.{base}.0.0/24 to 10.{base + 99}.0.0/24 is in use")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


class Hosts:
    """The bridge, the namespaces and the processes started on them; ``stop`` undoes all of it.
    ``names``: the hosts, given addresses .10, .11, ... of a /24 of their own."""

    def __init__(self, root: Path, names: list[str], subnet_base: int = 77):
        tag = f"{os.getpid() % 10000}"
        self.root, self.bridge = root, f"wsbr{tag}"
        self.subnet = _free_subnet(subnet_base)
        self.hosts = {name: f"{self.subnet}.{10 + i}" for i, name in enumerate(names)}
        self.ns = {name: f"ws{tag}h{i}" for i, name in enumerate(names)}
        self.procs: dict[str, list[subprocess.Popen]] = {name: [] for name in names}
        self.conf = root / "wattsched.conf"
        self.spool = root / "spool"  # the same path on every host; each host mounts its own there
        self.spool.mkdir(mode=0o755)

    def start(self) -> None:
        """The network; a subclass starts its daemons after it."""
        self.network()

    def network(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in self.hosts.items())
        for host, ip in self.hosts.items():
            ns = self.ns[host]
            sh("ip", "netns", "add", ns)
            outside, inside = f"v{ns}", f"p{ns}"
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", inside, "netns", ns)
            sh("ip", "link", "set", outside, "master", self.bridge, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", inside)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns  # ip netns exec mounts these over /etc inside the namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            (etc / "hostname").write_text(host + "\n")

    def cut(self, host: str, cut: bool = True) -> None:
        """Unplug (or plug back) ``host``'s network cable."""
        sh("ip", "netns", "exec", self.ns[host], "ip", "link", "set", f"p{self.ns[host]}", "down" if cut else "up")

    def start_on(self, host: str, daemon_args: str, log: str, program: str = "") -> subprocess.Popen:
        """A wattsched daemon (or ``program``) on ``host``: in its network namespace, under its
        hostname, with its own spool."""
        program = program or f"{sys.executable} -m wattsched.cli.wattsched"
        private = self.root / f"spool-{host}"
        private.mkdir(exist_ok=True)
        script = (f"hostname {host} && mount --bind {private} {self.spool} && "
                  f"exec {program} {daemon_args}")
        with open(self.root / log, "ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "sh", "-c", script],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, WATTSCHED_CONF=str(self.conf), SLURM_CONF=str(self.conf),
                         PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"))
        self.procs[host].append(proc)
        return proc

    def start_postgres(self, host: str) -> str:
        """A PostgreSQL server of its own on ``host`` (trusting the hosts' subnet); its URL."""
        bin_dir = postgres_bin()
        data, sock = self.root / "pgdata", self.root / "pgsock"
        for folder in (data, sock):
            folder.mkdir(mode=0o700)
            shutil.chown(folder, "postgres", "postgres")
        subprocess.run(["runuser", "-u", "postgres", "--", f"{bin_dir}/initdb", "-D", str(data), "-U", "postgres",
                        "--auth=trust", "--no-sync"], check=True, capture_output=True)
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.subnet}.0/24 trust\n")
        with open(self.root / "postgres.log", "ab") as out:
            self.procs[host].append(subprocess.Popen(
                ["ip", "netns", "exec", self.ns[host], "runuser", "-u", "postgres", "--", f"{bin_dir}/postgres",
                 "-D", str(data), "-c", f"listen_addresses={self.hosts[host]}", "-c",
                 f"unix_socket_directories={sock}"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        url = f"postgresql://postgres@{self.hosts[host]}:5432"
        wait_for(lambda: subprocess.run(["pg_isready", "-q", "-h", self.hosts[host]]).returncode == 0, 60,
                 what="PostgreSQL up")
        return url

    def token(self, uid: int = 0, user: str = "root") -> str:
        """A token signed with the cluster key (StateSaveLocation is ROOT/ctld)."""
        return auth.user_token((self.root / "ctld" / "jwt_hs256.key").read_bytes().strip(), uid, user)

    def run(self, *argv: str, uid: int = 65534, user: str = "nobody", on: str | None = None, check: bool = True,
            timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
        """A command as ``user``, from this machine or, with ``on``, from one of the hosts (srun
        reaches the nodes by name, as from a login node)."""
        env = dict(os.environ, WATTSCHED_CONF=str(self.conf), SLURM_CONF=str(self.conf),
                   SLURM_JWT=self.token(uid, user), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        where = ["ip", "netns", "exec", self.ns[on]] if on else []
        return subprocess.run([*where, str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True,
                              timeout=timeout, check=check, input=input)

    def stop(self) -> None:
        procs = [proc for started in self.procs.values() for proc in started]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a frozen one must hear the SIGTERM
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

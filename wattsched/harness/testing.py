"""A real cluster on loopback for tests and benchmarks (tests/, bench/): controller and agents as
processes, started from this interpreter's environment, as a site may use it to try a configuration.

Commands are the installed console scripts (sbatch, squeue, ...) run as subprocesses with
WATTSCHED_CONF pointing at the test cluster's configuration.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

BIN = Path(sys.executable).parent
# the tests' ordinary user, known to no user database: a uid from the range Debian reserves (60000-64999),
# so that no account of the host holds it (a token's name and uid must not belong to another user)
ALICE = (64100, "alice")


# A program that opens as many connections to 127.0.0.1:PORT as it is asked (argv: PORT COUNT), sends
# nothing on any, prints how many it holds, and keeps them until killed: run as the attacker by the
# hostile suite and by bench/bench_abuse.py.
SILENT_CONNECTIONS = """import socket, sys, time
count = int(sys.argv[2])
held = []
for _ in range(count):
    sock = socket.socket()
    sock.setblocking(False)
    try:
        sock.connect(("127.0.0.1", int(sys.argv[1])))
    except BlockingIOError:
        pass
    except OSError:
        sock.close()
        continue
    held.append(sock)
print(len(held), flush=True)
time.sleep(600)
"""


def _private_folder() -> str:
    """The folder of the suite's host-wide locks and book: this user's alone, so that no other
    account (the hostile suite's among them) can plant or hold a file root then trusts."""
    folder = os.path.join(tempfile.gettempdir(), f"wattsched-tests-{os.geteuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    seen = os.lstat(folder)
    if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.geteuid() or seen.st_mode & 0o077:
        raise RuntimeError(f"{folder} is not a private folder of this user's")
    return folder


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """One test process at a time, over the whole host, in what ``name`` guards (the accounts,
    folder modes, munged): the suite's parallel workers share these."""
    fd = os.open(os.path.join(_private_folder(), f"{name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# Folders opened to every user by reachable_by_all, with their old modes and how many callers hold
# them open: the last to let go restores the mode, so that parallel workers do not close a folder
# under each other's feet.
def _book(update: Callable[[dict[str, list[int]]], None]) -> None:
    with host_lock("modes"):
        path = os.path.join(_private_folder(), "modes.json")
        try:
            with open(path) as handle:
                book = json.load(handle)
        except (OSError, ValueError):
            book = {}
        update(book)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(book, handle)


def reachable_by_all(paths: list[str]) -> list[tuple[str, int]]:
    """Let every user traverse the folders above ``paths`` (the interpreter may live under /root),
    for tests that run commands as other accounts: only the search bit is added, and the old modes
    are returned for :func:`restore_modes`."""
    changed: list[tuple[str, int]] = []

    def open_up(book: dict[str, list[int]]) -> None:
        for path in paths:
            folder = os.path.dirname(os.path.realpath(path))
            while folder != "/":
                mode = stat.S_IMODE(os.stat(folder).st_mode)
                if all(folder != held for held, _ in changed) and (folder in book or not mode & 0o001):
                    book.setdefault(folder, [mode, 0])[1] += 1
                    changed.append((folder, book[folder][0]))
                    if not mode & 0o001:
                        os.chmod(folder, mode | 0o001)
                folder = os.path.dirname(folder)

    _book(open_up)
    return changed


def restore_modes(changed: list[tuple[str, int]]) -> None:
    def close(book: dict[str, list[int]]) -> None:
        for folder, mode in reversed(changed):
            held = book.get(folder, [mode, 1])
            held[1] -= 1
            if held[1] <= 0:
                book.pop(folder, None)
                os.chmod(folder, held[0])

    _book(close)


def sweep_cgroups(cluster_name: str, mount: str = "/sys/fs/cgroup") -> None:
    """Remove the empty cgroups a stopped test cluster left (its agents were killed with their jobs),
    that cluster's alone: another running beside it keeps its own."""
    mine = f"/wattsched/{cluster_name}"
    for top, _dirs, _files in sorted(os.walk(mount), key=lambda entry: -len(entry[0])):
        if mine in top:
            with contextlib.suppress(OSError):
                os.rmdir(top)


def ensure_munge() -> str | None:
    """munged answering on its default socket (PMIx's psec/munge, Slurm's auth/munge), started as the
    munge user when it is installed and not running; None then, else why it is not there."""
    import shutil

    if not shutil.which("munge") or not os.path.exists("/usr/sbin/munged"):
        return "MUNGE is not installed (Debian's munge package)"
    with host_lock("munge"):
        if subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode == 0:
            return None
        if os.geteuid() != 0:
            return "munged is not running and only root may start it"
        run_dir = Path("/run/munge")
        run_dir.mkdir(exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
        wait_for(lambda: subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode == 0,
                 10, what="munged answering")
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_block(size: int = 32) -> int:
    """The first of ``size`` ports in a row free over both TCP and UDP (emulated BMCs take one of
    each per node), below the kernel's ephemeral range: a port from free_port() may be taken a
    moment later as the local end of some connection, which a block of BMC ports would collide
    with."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            ephemeral = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    # the suite's parallel workers (pytest-xdist) each draw from a slice of their own
    low, high = 10000, max(10001 + size, ephemeral)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        worker, span = int(os.environ["PYTEST_XDIST_WORKER"][2:]), (high - low) // workers
        low, high = low + worker * span, low + (worker + 1) * span
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, max(low + 1, high - size))
        try:
            for port in range(base, base + size):
                for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                    with socket.socket(socket.AF_INET, kind) as probe:
                        probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {size} free ports in a row below {ephemeral}")


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1, what: str = "") -> Any:
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


class Cluster:
    def __init__(self, root: Path, nodes: int = 4, cpus: int = 4, agents: int = 1, extra: str = "",
                 node_extra: str = "", partitions: str | None = None, accounting_url: str = "", bmc: bool = False,
                 controllers: int = 1, state_url: str = "", acct_gather: str = ""):
        """``controllers``: more than one are ctl1 (127.0.0.1), ctl2 (127.0.0.2), ... on the same port,
        with their state at ``state_url`` (a PostgreSQL database). ``acct_gather``: the lines of an
        acct_gather.conf beside the file (root's alone, as the daemons require)."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        # a name of its own (its port's): clusters running at once on this host keep out of each
        # other's control groups (wattsched/<cluster>/node_<node>), though their nodes are named alike
        self.name = f"testcluster{self.port}"
        self.conf = root / "wattsched.conf"
        self.node_names = [f"n{i:02d}" for i in range(1, nodes + 1)]
        lines = [
            f"ClusterName={self.name}",
            *(["SlurmctldHost=localhost(127.0.0.1)"] if controllers == 1 else
              [f"SlurmctldHost=ctl{i}(127.0.0.{i})" for i in range(1, controllers + 1)]),
            f"SlurmctldPort={self.port}",
            f"StateSaveLocation={root / 'ctld'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            "KillWait=1",
            "SlurmdTimeout=4",
            "SchedulerInterval=0.2",
            "MinJobAge=600",
        ]
        if accounting_url:
            lines.append(f"AccountingStorageLoc={accounting_url}")
        if state_url:
            lines.append(f"StateStorageLoc={state_url}")
        self.controllers = controllers
        self.api_host = "127.0.0.1"  # the controller the test talks to (active())
        lines += [extra,
                  f"NodeName=n[01-{nodes:02d}] CPUs={cpus} RealMemory=8000 {node_extra}",
                  partitions or f"PartitionName=debug Nodes=n[01-{nodes:02d}] Default=YES MaxTime=INFINITE"]
        self.conf.write_text("\n".join(line for line in lines if line) + "\n")
        if acct_gather:
            fd = os.open(root / "acct_gather.conf", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(acct_gather + "\n")
        # the commands (srun inside batch scripts too) come from this interpreter's environment
        self.env = dict(os.environ, WATTSCHED_CONF=str(self.conf), SLURM_CONF=str(self.conf),
                        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        for var in ("SLURM_JOB_ID", "SLURM_JWT", "WATTSCHED_CONTROLLER"):
            self.env.pop(var, None)
        self.agents = agents
        self.bmc = bmc  # run the nodes' emulated BMCs (wattsched bmc) before the agents
        self.bmc_proc: subprocess.Popen | None = None
        self.controller: subprocess.Popen | None = None
        self.agent_procs: list[subprocess.Popen] = []
        self.agent_ports: list[int] = []
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work = root / "work"
        self.work.mkdir(exist_ok=True)

    # --- processes ----------------------------------------------------------------------------

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "wattsched.cli.wattsched", *args], env=self.env,
                                stdout=open(self.logs / log, "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start_controller(self) -> None:
        self.controller = self._spawn(["controller", str(self.conf)], "controller.log")
        wait_for(lambda: self._ping(), 30, what="controller up")

    def spawn_controller(self, index: int) -> subprocess.Popen:
        """Controller ``index`` (0: ctl1, the primary) of several (it may start as a standby), or the
        only one."""
        name = ["--name", f"ctl{index + 1}"] if self.controllers > 1 else []
        return self._spawn(["controller", str(self.conf), *name], f"ctl{index + 1}.log")

    def active(self) -> str:
        """The address of the controller in charge (a standby answers its ping with active false),
        or "" when none is; the test's API calls go to it from then on."""
        if not (self.root / "ctld" / "jwt_hs256.key").exists():  # no controller has started yet
            return ""
        for index in range(self.controllers):
            host = f"127.0.0.{index + 1}"
            try:
                reply = httpx.get(f"http://{host}:{self.port}/v1/ping", timeout=5,
                                  headers={"Authorization": f"Bearer {self.token()}"})
            except httpx.HTTPError:
                continue
            if reply.status_code == 200 and reply.json().get("active", True):
                self.api_host = host
                return host
        return ""

    def start_agent(self, index: int) -> None:
        names = self.node_names
        size = -(-len(names) // self.agents)
        part = names[index * size:(index + 1) * size]
        expr = f"{part[0]}" if len(part) == 1 else f"n[{part[0][1:]}-{part[-1][1:]}]"
        if index >= len(self.agent_ports):
            self.agent_ports.append(free_port())
        proc = self._spawn(["noded", str(self.conf), "--nodes", expr, "--port", str(self.agent_ports[index])],
                           f"noded{index}.log")
        if index < len(self.agent_procs):
            self.agent_procs[index] = proc
        else:
            self.agent_procs.append(proc)

    def start(self) -> Cluster:
        if self.bmc:
            self.bmc_proc = self._spawn(["bmc", str(self.conf)], "bmc.log")
        self.start_controller()
        for index in range(self.agents):
            self.start_agent(index)
        self.wait_nodes_up()
        return self

    def wait_nodes_up(self, names: list[str] | None = None, timeout: float = 30) -> None:
        wanted = set(names or self.node_names)
        wait_for(lambda: wanted <= {n["name"] for n in self.nodes() if not n["not_responding"]}, timeout,
                 what="nodes registered")

    def kill_controller(self, sig: int = signal.SIGKILL) -> None:
        assert self.controller is not None
        os.killpg(self.controller.pid, sig)
        self.controller.wait(10)

    def kill_agent(self, index: int, sig: int = signal.SIGKILL) -> None:
        proc = self.agent_procs[index]
        os.kill(proc.pid, sig)  # only the agent: its jobs live on, as after a real agent crash
        proc.wait(10)

    def stop(self) -> None:
        for proc in [*self.agent_procs, self.controller, self.bmc_proc]:
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
        # batch scripts run in sessions of their own: make sure none outlives the test
        subprocess.run(["pkill", "-9", "-f", str(self.root / "spool")], check=False)

    # --- talking to it ------------------------------------------------------------------------

    def key(self) -> bytes:
        return (self.root / "ctld" / "jwt_hs256.key").read_bytes().strip()

    def token(self, uid: int = 0, user: str = "root", role: str = "user") -> str:
        from wattsched import auth

        return auth.user_token(self.key(), uid, user, role=role)

    def user_env(self, uid: int = ALICE[0], user: str = ALICE[1]) -> dict:
        """The environment of commands run as another (non-admin) user, by a token in SLURM_JWT."""
        return dict(self.env, SLURM_JWT=self.token(uid, user))

    def api(self, method: str, path: str, token: str | None = "root", **kwargs) -> httpx.Response:
        headers = kwargs.pop("headers", {})
        if token == "root":
            token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.request(method, f"http://{self.api_host}:{self.port}{path}", headers=headers, timeout=30,
                             **kwargs)

    def _ping(self) -> bool:
        try:
            return self.api("GET", "/v1/ping").status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    def nodes(self) -> list[dict]:
        return self.api("GET", "/v1/nodes").json()["nodes"]

    def jobs(self, *refs: str) -> list[dict]:
        params = {"job": list(refs), "detail": "true"} if refs else {"detail": "true"}
        return self.api("GET", "/v1/jobs", params=params).json()["jobs"]

    def job(self, job_id: int) -> dict:
        jobs = self.jobs(str(job_id))
        assert jobs, f"job {job_id} not found"
        return jobs[0]

    def run(self, *args: str, check: bool = True, env: dict | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = [str(BIN / args[0]), *args[1:]]
        result = subprocess.run(cmd, env=env or self.env, cwd=self.work, capture_output=True, text=True,
                                input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}\nstdout: {result.stdout}\n"
                                 f"stderr: {result.stderr}")
        return result

    def sbatch(self, *args: str, env: dict | None = None) -> int:
        return int(self.run("sbatch", "--parsable", *args, env=env).stdout.strip())

    def wait_state(self, job_id: int, states: set[str] | str, timeout: float = 30) -> dict:
        wanted = {states} if isinstance(states, str) else states
        try:
            return wait_for(lambda: (j := self.job(job_id))["state"] in wanted and j, timeout,
                            what=f"job {job_id} in {wanted}")
        except AssertionError as exc:
            job = self.job(job_id)
            raise AssertionError(f"{exc}; it is {job['state']} ({job['reason']})") from None

    def accounted(self, *job_ids: int, timeout: float = 30) -> list[dict]:
        """Accounting rows of these jobs once all of them are there in a final state."""
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE",
                 "REQUEUED"}  # (a requeued job's earlier runs: records of their own)

        def fetch():
            rows = self.api("GET", "/v1/accounting/jobs", params={"job": list(job_ids)}).json()["jobs"]
            return rows if len(rows) >= len(job_ids) and all(r["state"] in final for r in rows) else None

        return wait_for(fetch, timeout, 0.2, what=f"accounting of {job_ids}")

    def sacct_json(self, job_id: int) -> dict:
        return json.loads(self.run("sacct", "-j", str(job_id), "--json").stdout)

"""A real multi-host cluster on one machine: a controller and three agents, each in its own network
namespace (its own address on a bridge) and UTS namespace (its own hostname), with its own spool
(a private mount), started as docs/admin/deployment.md says: one configuration file for
all hosts, the key at the same path, ``wattsched controller`` on the controller host and
``wattsched noded CONFIG --host 0.0.0.0 --advertise $(hostname)`` on each node, which serves the
node named like its host. Hosts find each other by name (each namespace's /etc/hosts, as
``ip netns exec`` provides it). An unprivileged user runs multi-node jobs and steps across them.

Skipped, saying why, without root or iproute2's network namespaces.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from wattsched import auth
from wattsched.testing import BIN, reachable_by_all, restore_modes, wait_for


def _netns_usable() -> str:
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


REASON = _netns_usable()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "-")
NODES = ("wsnode1", "wsnode2", "wsnode3")
PORT = 6817


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


class MultiHost:
    """The bridge, the namespaces and the daemons; ``stop`` undoes all of it."""

    def __init__(self, root: Path):
        tag = f"{os.getpid() % 10000}"
        self.root, self.bridge = root, f"wsbr{tag}"
        self.subnet = f"10.{77 + os.getpid() % 100}.0"
        self.hosts = {"wsctl": f"{self.subnet}.10", **{n: f"{self.subnet}.{11 + i}" for i, n in enumerate(NODES)}}
        self.ns = {host: f"ws{tag}{host[-1] if host != 'wsctl' else 'c'}" for host in self.hosts}
        self.procs: list[subprocess.Popen] = []
        self.conf = root / "wattsched.conf"
        self.spool = root / "spool"  # the same path on every host; each host mounts its own there

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

    def configure(self) -> None:
        self.conf.write_text(f"""ClusterName=multihost
SlurmctldHost=wsctl({self.hosts['wsctl']})
SlurmctldPort={PORT}
StateSaveLocation={self.root / 'ctld'}
SlurmdSpoolDir={self.spool}
SlurmdTimeout=10
KillWait=2
SchedulerInterval=0.2
NodeName=wsnode[1-3] CPUs=2 RealMemory=2000
PartitionName=all Nodes=wsnode[1-3] Default=YES MaxTime=INFINITE
""")
        self.conf.chmod(0o644)
        self.spool.mkdir(mode=0o755)

    def start_on(self, host: str, daemon_args: str, log: str) -> None:
        """A daemon on ``host``: in its network namespace, under its hostname, with its own spool."""
        wattsched = f"{sys.executable} -m wattsched.cli.wattsched"
        private = self.root / f"spool-{host}"
        private.mkdir(exist_ok=True)
        script = (f"hostname {host} && mount --bind {private} {self.spool} && "
                  f"exec {wattsched} {daemon_args}")
        with open(self.root / log, "ab") as out:
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "sh", "-c", script],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, WATTSCHED_CONF=str(self.conf), SLURM_CONF=str(self.conf),
                         PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")))

    def start(self) -> None:
        self.network()
        self.configure()
        self.start_on("wsctl", f"controller {self.conf}", "controller.log")
        key = self.root / "ctld" / "jwt_hs256.key"
        wait_for(key.exists, 30, what="the cluster key")
        wait_for(lambda: self.api("GET", "/v1/ping").status_code == 200, 30, what="controller up")
        for node in NODES:  # as on a real node: the agent picks the node named like its host
            self.start_on(node, f"noded {self.conf} --host 0.0.0.0 --advertise {node}", f"{node}.log")
        wait_for(lambda: sorted(n["name"] for n in self.api("GET", "/v1/nodes").json()["nodes"]
                                if not n["not_responding"]) == list(NODES), 60, what="the three hosts registered")

    def token(self, uid: int = 0, user: str = "root") -> str:
        return auth.user_token((self.root / "ctld" / "jwt_hs256.key").read_bytes().strip(), uid, user)

    def api(self, method: str, path: str) -> httpx.Response:
        try:
            return httpx.request(method, f"http://{self.hosts['wsctl']}:{PORT}{path}", timeout=10,
                                 headers={"Authorization": f"Bearer {self.token()}"})
        except httpx.HTTPError:
            return httpx.Response(599)

    def run(self, *argv: str, uid: int = 65534, user: str = "nobody", on: str | None = None) \
            -> subprocess.CompletedProcess:
        """A command as ``user``, from this machine or, with ``on``, from one of the hosts (srun
        reaches the nodes by name, as from a login node)."""
        env = dict(os.environ, WATTSCHED_CONF=str(self.conf), SLURM_CONF=str(self.conf),
                   SLURM_JWT=self.token(uid, user), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        where = ["ip", "netns", "exec", self.ns[on]] if on else []
        return subprocess.run([*where, str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True,
                              timeout=60, check=True)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


@pytest.fixture(scope="module")
def hosts() -> Iterator[MultiHost]:
    root = Path(tempfile.mkdtemp(prefix="wattsched-hosts-"))
    os.chmod(root, 0o755)  # the job's user passes through to its scratch folder
    restore = reachable_by_all([sys.executable, str(BIN / "srun")])  # nobody runs srun in the job
    cluster = MultiHost(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        restore_modes(restore)
        shutil.rmtree(root, ignore_errors=True)


def job_state(hosts: MultiHost, job_id: int) -> str:
    return hosts.api("GET", f"/v1/jobs?job={job_id}").json()["jobs"][0]["state"]


def test_a_multi_node_job_and_its_steps_run_across_the_hosts(hosts: MultiHost) -> None:
    out = Path(tempfile.mkdtemp(prefix="wattsched-hosts-out-"))
    os.chmod(out, 0o1777)
    try:
        script = ("echo batch on $(hostname) $SLURMD_NODENAME $SLURM_JOB_NODELIST\n"
                  "srun -l sh -c 'echo $(hostname) $SLURMD_NODENAME $(id -un)' | sort\n"
                  "srun -N 3 -n 6 sh -c 'echo $SLURM_PROCID' | sort -n | tr '\\n' ' '\n")
        submitted = hosts.run("sbatch", "-N", "3", "--ntasks-per-node=1", "-o", str(out / "%j.out"),
                              "--wrap", script).stdout
        job_id = int(submitted.split()[-1])
        wait_for(lambda: job_state(hosts, job_id) == "COMPLETED", 60,
                 what=f"job {job_id} completed ({job_state(hosts, job_id)})")
        lines = (out / f"{job_id}.out").read_text().splitlines()
        assert lines[0] == "batch on wsnode1 wsnode1 wsnode[1-3]"
        assert lines[1:4] == [f"{i}: wsnode{i + 1} wsnode{i + 1} nobody" for i in range(3)]
        assert lines[4].split() == [str(i) for i in range(6)]
        accounted = hosts.run("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,NodeList").stdout
        rows = [r.split("|") for r in accounted.splitlines()]
        assert rows[0] == [str(job_id), "COMPLETED", "wsnode[1-3]"]
        assert [r[0] for r in rows] == [str(job_id), f"{job_id}.batch", f"{job_id}.0", f"{job_id}.1"]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_host_that_goes_away_is_noticed_and_comes_back(hosts: MultiHost) -> None:
    agent = hosts.procs[3]  # wsnode3's agent
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait(timeout=15)
    wait_for(lambda: any(n["name"] == "wsnode3" and n["not_responding"]
                         for n in hosts.api("GET", "/v1/nodes").json()["nodes"]), 60, what="wsnode3 not responding")
    hosts.start_on("wsnode3", f"noded {hosts.conf} --host 0.0.0.0 --advertise wsnode3", "wsnode3.log")
    wait_for(lambda: all(not n["not_responding"] for n in hosts.api("GET", "/v1/nodes").json()["nodes"]), 60,
             what="wsnode3 back")
    out = hosts.run("srun", "-N", "3", "hostname", on="wsctl").stdout.split()
    assert sorted(out) == list(NODES)

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

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from wattsched.harness.netns import Hosts, netns_usable, running
from wattsched.harness.testing import wait_for

REASON = netns_usable()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "-")
NODES = ("wsnode1", "wsnode2", "wsnode3")
PORT = 6817


class MultiHost(Hosts):
    """A controller host and three node hosts."""

    def __init__(self, root: Path):
        super().__init__(root, ["wsctl", *NODES])

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

    def start(self) -> None:
        super().start()
        self.configure()
        self.start_on("wsctl", f"controller {self.conf}", "controller.log")
        key = self.root / "ctld" / "jwt_hs256.key"
        wait_for(key.exists, 30, what="the cluster key")
        wait_for(lambda: self.api("GET", "/v1/ping").status_code == 200, 30, what="controller up")
        for node in NODES:  # as on a real node: the agent picks the node named like its host
            self.start_on(node, f"noded {self.conf} --host 0.0.0.0 --advertise {node}", f"{node}.log")
        wait_for(lambda: sorted(n["name"] for n in self.api("GET", "/v1/nodes").json()["nodes"]
                                if not n["not_responding"]) == list(NODES), 60, what="the three hosts registered")

    def api(self, method: str, path: str) -> httpx.Response:
        try:
            return httpx.request(method, f"http://{self.hosts['wsctl']}:{PORT}{path}", timeout=10,
                                 headers={"Authorization": f"Bearer {self.token()}"})
        except httpx.HTTPError:
            return httpx.Response(599)


@pytest.fixture(scope="module")
def hosts() -> Iterator[MultiHost]:
    yield from running(MultiHost, "wattsched-hosts-")


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
    agent = hosts.procs["wsnode3"][0]
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait(timeout=15)
    wait_for(lambda: any(n["name"] == "wsnode3" and n["not_responding"]
                         for n in hosts.api("GET", "/v1/nodes").json()["nodes"]), 60, what="wsnode3 not responding")
    hosts.start_on("wsnode3", f"noded {hosts.conf} --host 0.0.0.0 --advertise wsnode3", "wsnode3.log")
    wait_for(lambda: all(not n["not_responding"] for n in hosts.api("GET", "/v1/nodes").json()["nodes"]), 60,
             what="wsnode3 back")
    out = hosts.run("srun", "-N", "3", "hostname", on="wsctl").stdout.split()
    assert sorted(out) == list(NODES)


def test_mpi_ranks_on_different_hosts_pass_a_ring_over_tcp(hosts: MultiHost) -> None:
    """srun --mpi=pmi2 across the three hosts: MPICH's ranks, two a host, find each other through the
    PMI fences srun relays and talk over the hosts' own network."""
    from tests.e2e.test_mpi import _compile, expected

    folder = Path(tempfile.mkdtemp(prefix="wattsched-hosts-mpi-"))
    os.chmod(folder, 0o755)
    try:
        ring = _compile("mpicc.mpich", folder / "ring")
        os.chmod(ring, 0o755)
        done = hosts.run("srun", "-N", "3", "-n", "6", "--mpi=pmi2", str(ring), on="wsctl", timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.splitlines()) == [line.replace("on n0", "on wsnode") for line in expected(6, 2)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)

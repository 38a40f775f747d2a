"""Jobs confined by this machine's real cgroup hierarchy (proctrack/cgroup, task/cgroup): a job over
its --mem ends OUT_OF_MEMORY while its neighbour runs on, a double-forked daemon dies with its job,
a job's CPUs are its cpuset and two jobs never share one, --cpu-freq touches only the job's CPUs,
and on cgroup v2 a job's processes are tracked and killed too.

Skipped, saying why, where the hierarchy is not writable (not root, or no cgroup v1 memory
controller). Nodes here are "real" (not EmulatedNodes): the jobs' CPUs are this host's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import BIN, Cluster, sweep_cgroups, wait_for
from wattsched.noded.cpufreq import CpuFreqSysfs, layout_tree

V1 = "/sys/fs/cgroup"
V1_MEMORY = os.path.join(V1, "memory")
V2_CANDIDATES = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def _writable(path: str) -> bool:
    return os.geteuid() == 0 and os.path.isfile(os.path.join(path, "cgroup.procs")) and os.access(path, os.W_OK)


pytestmark = pytest.mark.skipif(not _writable(V1_MEMORY),
                                reason="needs root and a writable cgroup v1 hierarchy with the memory controller")
CONFINED = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity"


def confined(root: Path, cgroup_conf: str, nodes: int = 2, cpus: int | None = None, extra: str = "") -> Cluster:
    cluster = Cluster(root, nodes=nodes, cpus=cpus or 4, extra=f"{CONFINED}\n{extra}")
    (root / "cgroup.conf").write_text(cgroup_conf)
    return cluster


@pytest.fixture(scope="module")
def memory_cluster() -> Iterator[Cluster]:
    # in a folder other users may pass through (pytest's are root's alone): a test runs a job as nobody
    root = Path(tempfile.mkdtemp(prefix="wattsched-cgroup-"))
    os.chmod(root, 0o755)
    running = confined(root, "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\n").start()
    yield running
    running.stop()
    sweep_cgroups(running.name)
    shutil.rmtree(root, ignore_errors=True)


def job_cgroup(cluster: Cluster, node: str, job_id: int, controller: str = "memory") -> str:
    return os.path.join(V1, controller, "wattsched", cluster.name, f"node_{node}", f"job_{job_id}")


def processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_a_job_over_its_memory_ends_out_of_memory_and_its_neighbour_runs_on(memory_cluster: Cluster,
                                                                           tmp_path: Path) -> None:
    neighbour = memory_cluster.sbatch("-w", "n01", "--mem=50M", "-o", str(tmp_path / "neighbour.out"),
                                      "--wrap", "sleep 3; echo neighbour done")
    memory_cluster.wait_state(neighbour, "RUNNING")
    limit = Path(job_cgroup(memory_cluster, "n01", neighbour), "memory.limit_in_bytes")
    wait_for(limit.exists, 20, what="the job's cgroup")  # RUNNING comes before the agent has launched it
    assert int(limit.read_text()) == 50 * 1024 * 1024
    hog = memory_cluster.sbatch("-w", "n01", "--mem=100M", "-o", str(tmp_path / "hog.out"), "--wrap",
                                f"{sys.executable} -c \"b = b'x' * (500 << 20); print('survived')\"")
    job = memory_cluster.wait_state(hog, "OUT_OF_MEMORY")
    assert job["exit_code"] == 0 and job["term_signal"] == 125
    assert "survived" not in (tmp_path / "hog.out").read_text()
    assert memory_cluster.wait_state(neighbour, "COMPLETED")
    assert (tmp_path / "neighbour.out").read_text() == "neighbour done\n"
    record = memory_cluster.accounted(hog)[0]
    sacct = memory_cluster.run("sacct", "-j", str(hog), "-n", "-P", "-o", "JobID,State,ExitCode").stdout
    rows = [line.split("|") for line in sacct.splitlines()]
    assert rows[0][1:] == ["OUT_OF_MEMORY", "0:125"] and rows[1] == [f"{hog}.batch", "OUT_OF_MEMORY", "0:125"]
    rss_kb = max(s["max_rss_kb"] for s in record["steps"])
    assert 50 * 1024 <= rss_kb <= 110 * 1024  # the cgroup's peak: at its 100 MiB limit, not 500 MB
    wait_for(lambda: not os.path.exists(job_cgroup(memory_cluster, "n01", hog)), 20, what="the job's cgroup removed")


def test_a_double_forked_daemon_dies_with_its_job(memory_cluster: Cluster, tmp_path: Path) -> None:
    marker = f"{time.time() % 1000:.3f}1"  # sleep's argument: a unique tag on the escaped process
    job_id = memory_cluster.sbatch("-w", "n02", "-o", "/dev/null", "--wrap",
                                   f"setsid sh -c 'sleep {marker} &' </dev/null >/dev/null 2>&1; sleep 1")
    wait_for(lambda: processes_with(f"sleep\0{marker}"), 20, what="the daemon started")
    memory_cluster.wait_state(job_id, "COMPLETED")
    wait_for(lambda: not processes_with(f"sleep\0{marker}"), 20, what="the daemon killed with its job")
    wait_for(lambda: not os.path.exists(job_cgroup(memory_cluster, "n02", job_id, "pids")), 20, what="cgroup removed")


def test_an_unprivileged_job_cannot_leave_its_cgroup(memory_cluster: Cluster) -> None:
    """As nobody: writing its pid into another cgroup is refused, and it stays where the agent put it."""
    out = Path(tempfile.mkdtemp(prefix="wattsched-cgroup-out-"))
    os.chmod(out, 0o1777)
    try:
        job_id = memory_cluster.sbatch("-w", "n02", "-o", str(out / "%j.out"), "--wrap",
                                       f"echo $$ > {V1}/pids/cgroup.procs; echo moved=$?; grep pids /proc/self/cgroup",
                                       env=memory_cluster.user_env(65534, "nobody"))
        memory_cluster.wait_state(job_id, "COMPLETED")
        text = (out / f"{job_id}.out").read_text()
        assert "moved=1" in text or "moved=2" in text, text
        assert f"/wattsched/{memory_cluster.name}/node_n02/job_{job_id}/step_batch" in text
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_cores_are_the_jobs_cpuset_and_cpu_freq_touches_only_them(tmp_path: Path) -> None:
    host_cpus = sorted(os.sched_getaffinity(0))
    if len(host_cpus) < 2 or host_cpus[:2] != [0, 1]:
        pytest.skip("needs CPUs 0 and 1 on this host")
    sysroot = tmp_path / "sysroot"
    layout_tree(str(sysroot), 2, [2400000, 1600000, 1200000])
    cluster = confined(tmp_path / "c", "ConstrainCores=yes\n", nodes=1, cpus=2,
                       extra=f"CpuFreqSysfsRoot={sysroot}\nCpuFreqGovernors=Performance,UserSpace")
    sysfs = CpuFreqSysfs(str(sysroot))
    try:
        cluster.start()
        out = tmp_path / "out"
        out.mkdir()
        jobs = [cluster.sbatch("-c", "1", "--cpu-freq=1200000", "-o", str(out / "%j"), "--wrap",
                               "grep Cpus_allowed_list /proc/self/status; sleep 3") for _ in range(2)]
        for job_id in jobs:
            cluster.wait_state(job_id, "RUNNING")
        # while both run: each froze its own CPU's frequency; the CPU sets are disjoint
        wait_for(lambda: all((out / str(j)).exists() and (out / str(j)).read_text() for j in jobs), 20)
        allowed = [(out / str(j)).read_text().split()[-1] for j in jobs]
        assert sorted(allowed) == ["0", "1"], allowed
        assert [speed(sysfs, c) for c in (0, 1)] == ["1200000", "1200000"]
        for job_id in jobs:
            cluster.wait_state(job_id, "COMPLETED")
        wait_for(lambda: [speed(sysfs, c) for c in (0, 1)] == ["", ""], 20, what="settings restored")
        # one job of one CPU: only its CPU changes
        single = cluster.sbatch("-c", "1", "--cpu-freq=1600000", "-o", str(out / "%j"), "--wrap",
                                "grep Cpus_allowed_list /proc/self/status; sleep 2")
        cluster.wait_state(single, "RUNNING")
        wait_for(lambda: (out / str(single)).exists() and (out / str(single)).read_text(), 20)
        mine = int((out / str(single)).read_text().split()[-1])
        assert speed(sysfs, mine) == "1600000" and speed(sysfs, 1 - mine) == ""
        cluster.wait_state(single, "COMPLETED")
        whole = cluster.sbatch("-c", "2", "-o", str(out / "%j"), "--wrap", "grep Cpus_allowed_list /proc/self/status")
        cluster.wait_state(whole, "COMPLETED")
        assert (out / str(whole)).read_text().split()[-1] == "0-1"
    finally:
        cluster.stop()
        sweep_cgroups(cluster.name)


def speed(sysfs: CpuFreqSysfs, cpu: int) -> str:
    """The speed a CPU is held at (userspace governor), or "" when it runs as it was."""
    settings = sysfs.settings(cpu)
    return settings.get("scaling_setspeed", "") if settings.get("scaling_governor") == "userspace" else ""


def _v2_mount() -> str | None:
    for path in V2_CANDIDATES:
        if os.path.exists(os.path.join(path, "cgroup.controllers")) and _writable(path):
            return path
    return None


@pytest.mark.skipif(_v2_mount() is None, reason="no writable cgroup v2 hierarchy")
def test_cgroup_v2_tracks_and_kills_a_jobs_processes(tmp_path: Path) -> None:
    mount = _v2_mount()
    cluster = confined(tmp_path, f"CgroupPlugin=cgroup/v2\nCgroupMountpoint={mount}\n", nodes=1)
    cluster.conf.write_text(cluster.conf.read_text().replace("TaskPlugin=task/cgroup,task/affinity",
                                                             "TaskPlugin=task/affinity"))
    try:
        cluster.start()
        marker = f"{time.time() % 1000:.3f}2"
        job_id = cluster.sbatch("-o", "/dev/null", "--wrap", f"setsid sh -c 'sleep {marker} &' </dev/null "
                                ">/dev/null 2>&1; sleep 1")
        wait_for(lambda: processes_with(f"sleep\0{marker}"), 20, what="the daemon started")
        pid = processes_with(f"sleep\0{marker}")[0]
        assert f"wattsched/{cluster.name}/node_n01/job_{job_id}/step_batch" in Path(f"/proc/{pid}/cgroup").read_text()
        cluster.wait_state(job_id, "COMPLETED")
        wait_for(lambda: not processes_with(f"sleep\0{marker}"), 20, what="the daemon killed with its job")
        assert not os.path.exists(os.path.join(mount, "wattsched", cluster.name, "node_n01", f"job_{job_id}"))
    finally:
        cluster.stop()
        sweep_cgroups(cluster.name, mount)


@pytest.mark.skipif(_v2_mount() is None, reason="no writable cgroup v2 hierarchy")
def test_an_agent_refuses_constraints_its_hierarchy_cannot_enforce(tmp_path: Path) -> None:
    mount = _v2_mount()
    available = Path(mount, "cgroup.controllers").read_text().split()
    if "memory" in available:
        pytest.skip("this cgroup v2 hierarchy has the memory controller")
    cluster = confined(tmp_path, f"CgroupPlugin=cgroup/v2\nCgroupMountpoint={mount}\nConstrainRAMSpace=yes\n",
                       nodes=1)
    try:
        cluster.start_controller()  # the agent needs the cluster key before it looks at cgroups
        result = subprocess.run([str(BIN / "wattsched"), "noded", str(cluster.conf), "--nodes", "n01", "--port",
                                 "1"], capture_output=True, text=True, timeout=60, env=cluster.env)
    finally:
        cluster.stop()
    assert result.returncode != 0 and "lacks the controllers memory" in result.stderr, result.stderr


def test_a_shared_nodes_energy_follows_each_jobs_cgroup_cpu_time(tmp_path: Path) -> None:
    """Two jobs on one node: the one whose (double-forked, so outside its process tree) busy loop
    burns a CPU gets the node's dynamic energy; its cgroup counts that CPU time."""
    cluster = confined(tmp_path, "CgroupPlugin=cgroup/v1\n", nodes=1, cpus=2,
                       extra="AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1")
    cluster.conf.write_text(cluster.conf.read_text().replace("RealMemory=8000", "RealMemory=8000 IdleWatts=100 "
                                                                                 "MaxWatts=300"))
    try:
        cluster.start()
        busy = cluster.sbatch("-o", "/dev/null", "--wrap",
                              "(setsid sh -c 'end=$(($(date +%s)+4)); while [ $(date +%s) -lt $end ]; do :; done' &); "
                              "sleep 5")
        idle = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 5")
        for job_id in (busy, idle):
            cluster.wait_state(job_id, "COMPLETED")
        busy_j, idle_j = (cluster.accounted(j)[0]["consumed_energy_j"] for j in (busy, idle))
        # without the cgroup's count both would get half: the busy loop is outside both process trees
        assert busy_j > 1.4 * idle_j > 0, (busy_j, idle_j)
    finally:
        cluster.stop()
        sweep_cgroups(cluster.name)


STORM = """import os, time
kids, refused = [], 0
for _ in range(640):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print("started", len(kids), "refused", refused, flush=True)
for pid in kids:
    os.kill(pid, 9)
"""


def test_a_fork_storm_is_refused_inside_its_job(tmp_path: Path) -> None:
    """MaxPidsPerJob=64: a job that tries to start ten times that many processes gets EAGAIN past its
    limit and ends by itself; its neighbour on the same node and the node's agent carry on."""
    cluster = confined(tmp_path, "CgroupPlugin=cgroup/v1\nMaxPidsPerJob=64\n", nodes=1).start()
    try:
        (tmp_path / "storm.py").write_text(STORM)
        storm = cluster.sbatch("-o", str(tmp_path / "storm.out"), "--wrap", f"{sys.executable} {tmp_path}/storm.py")
        neighbour = cluster.sbatch("-o", str(tmp_path / "neighbour.out"), "--wrap",
                                   "for i in $(seq 50); do sh -c true; done; echo neighbour done")
        cluster.wait_state(storm, "COMPLETED", timeout=120)
        words = (tmp_path / "storm.out").read_text().split()
        started, refused = int(words[1]), int(words[3])
        assert started < 64 and refused >= 576, words
        cluster.wait_state(neighbour, "COMPLETED", timeout=60)
        assert (tmp_path / "neighbour.out").read_text() == "neighbour done\n"
        assert cluster.nodes()[0]["state"] in ("IDLE", "MIXED", "ALLOCATED"), cluster.nodes()[0]
        after = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
        cluster.wait_state(after, "COMPLETED", timeout=60)
    finally:
        cluster.stop()
        sweep_cgroups(cluster.name)

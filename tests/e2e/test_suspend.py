"""scontrol suspend / resume: the job is SUSPENDED, its processes stopped (frozen in its cgroup where
jobs have cgroups, else its process groups stopped), its run time stands still; resumed, it runs
on and completes; a suspended job can be cancelled; users may not suspend."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rindex(b")") + 2:][:1].decode()


def script_pid(cluster: Cluster, job_id: int, tmp_path: Path) -> int:
    pid_file = tmp_path / f"{job_id}.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, what="the script's pid")
    return int(pid_file.read_text())


def counting_job(cluster: Cluster, tmp_path: Path) -> int:
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap",
                            f"echo $$ > {tmp_path}/$SLURM_JOB_ID.pid; "
                            f"i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo $i >> {tmp_path}/$SLURM_JOB_ID.count; "
                            "sleep 0.1; done")
    cluster.wait_state(job_id, "RUNNING")
    return job_id


def test_suspend_stops_the_job_and_its_clock_and_resume_lets_it_finish(cluster: Cluster, tmp_path: Path) -> None:
    job_id = counting_job(cluster, tmp_path)
    pid = script_pid(cluster, job_id, tmp_path)
    cluster.run("scontrol", "suspend", str(job_id))
    assert cluster.job(job_id)["state"] == "SUSPENDED"
    assert cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%t").stdout.strip() == "S"
    wait_for(lambda: proc_state(pid) == "T", 20, what="the script stopped")
    counted = (tmp_path / f"{job_id}.count").read_text()
    ran = cluster.job(job_id)["run_time_s"]
    started = time.time()
    wait_for(lambda: time.time() - started > 1.5, 5)  # time passes while it is suspended
    assert (tmp_path / f"{job_id}.count").read_text() == counted
    assert cluster.job(job_id)["run_time_s"] == pytest.approx(ran, abs=0.1)
    refused = cluster.run("scontrol", "suspend", str(job_id), check=False)
    assert refused.returncode == 1 and "already suspended" in refused.stderr
    cluster.run("scontrol", "resume", str(job_id))
    assert cluster.job(job_id)["state"] == "RUNNING"
    wait_for(lambda: proc_state(pid) != "T", 20, what="the script running again")
    cluster.wait_state(job_id, "COMPLETED")
    assert (tmp_path / f"{job_id}.count").read_text().split()[-1] == "40"
    assert cluster.accounted(job_id)[0]["state"] == "COMPLETED"
    suspended = cluster.run("sacct", "-n", "-X", "-j", str(job_id), "-o", "Suspended").stdout.strip()
    assert suspended not in ("", "00:00:00"), suspended  # the 1.5 s and more it spent suspended


def test_a_suspended_job_gives_its_cpus_to_another_and_takes_them_back(fresh_cluster: Cluster) -> None:
    """As Slurm's scontrol suspend: the suspended job's CPUs (not its memory) go to a waiting job;
    the two swap with suspend and resume, and both end. A controller killed meanwhile keeps the books."""
    cluster = fresh_cluster.start()
    whole = ("-N1", "-w", "n01", "-c", "4", "--mem=100", "-o", "/dev/null", "--wrap", "sleep 30")
    first = cluster.sbatch(*whole)
    cluster.wait_state(first, "RUNNING")
    second = cluster.sbatch(*whole)
    wait_for(lambda: cluster.job(second)["reason"] == "Resources", 20, what="the second job waits for the CPUs")
    cluster.run("scontrol", "suspend", str(first))
    cluster.wait_state(second, "RUNNING")
    node = next(n for n in cluster.nodes() if n["name"] == "n01")
    assert node["alloc_cpus"] == 4 and node["alloc_mem_mb"] == 200, node  # the CPUs once, both memories
    cluster.kill_controller()
    cluster.start_controller()
    wait_for(lambda: next(n for n in cluster.nodes() if n["name"] == "n01")["alloc_cpus"] == 4, 30,
             what="the books restored as they were")
    cluster.run("scontrol", "suspend", str(second))
    cluster.run("scontrol", "resume", str(first))
    assert cluster.job(first)["state"] == "RUNNING" and cluster.job(second)["state"] == "SUSPENDED"
    cluster.run("scancel", str(first))
    cluster.wait_state(first, "CANCELLED")
    cluster.run("scontrol", "resume", str(second))
    cluster.run("scancel", str(second))
    cluster.wait_state(second, "CANCELLED")
    wait_for(lambda: next(n for n in cluster.nodes() if n["name"] == "n01")["alloc_cpus"] == 0, 30,
             what="every CPU given back")


def test_a_suspended_job_can_be_cancelled_and_users_cannot_suspend(cluster: Cluster, tmp_path: Path) -> None:
    job_id = counting_job(cluster, tmp_path)
    user = cluster.run("scontrol", "suspend", str(job_id), env=cluster.user_env(), check=False)
    assert user.returncode == 1 and "Access/permission denied" in user.stderr
    cluster.run("scontrol", "suspend", str(job_id))
    pid = script_pid(cluster, job_id, tmp_path)
    wait_for(lambda: proc_state(pid) == "T", 20, what="the script stopped")
    cluster.run("scancel", str(job_id))
    cluster.wait_state(job_id, "CANCELLED")
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or proc_state(pid) == "Z", 20, what="the script gone")


V1_FREEZER = "/sys/fs/cgroup/freezer"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(V1_FREEZER, os.W_OK), reason="needs a writable v1 freezer")
def test_suspend_freezes_the_jobs_cgroup(fresh_cluster: Cluster, tmp_path: Path) -> None:
    cluster = fresh_cluster
    cluster.conf.write_text(cluster.conf.read_text() + "ProctrackType=proctrack/cgroup\n")
    (cluster.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
    cluster.start()
    job_id = counting_job(cluster, tmp_path)
    node = cluster.job(job_id)["node_list"]
    freezer = Path(V1_FREEZER, "wattsched", cluster.name, f"node_{node}", f"job_{job_id}", "freezer.state")
    wait_for(freezer.exists, 20, what="the job's cgroup")
    cluster.run("scontrol", "suspend", str(job_id))
    wait_for(lambda: freezer.read_text().strip() == "FROZEN", 20, what="frozen")
    cluster.run("scontrol", "resume", str(job_id))
    wait_for(lambda: freezer.read_text().strip() == "THAWED", 20, what="thawed")
    cluster.wait_state(job_id, "COMPLETED")

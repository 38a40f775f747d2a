"""Nothing is lost: controller and agent crashes, node failures, accounting outages."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from wattsched.harness.testing import Cluster, wait_for

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def test_controller_kill9_with_pending_and_running_jobs(fresh_cluster: Cluster) -> None:
    cluster = fresh_cluster.start()
    # 10 one-CPU jobs run on the 16 CPUs; 50 whole-cluster jobs wait behind them.
    running = [cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 8") for _ in range(10)]
    # (started before the big jobs arrive: those rank higher and would hold the nodes for themselves)
    wait_for(lambda: sum(1 for j in cluster.jobs() if j["state"] == "RUNNING") >= 10, 20, what="10 running")
    body = {"script": "#!/bin/sh\nsleep 0.2\n", "work_dir": str(cluster.work), "nodes_min": 4, "exclusive": True,
            "output": "/dev/null", "name": "pending"}
    pending = [cluster.api("POST", "/v1/jobs", json=body).json()["job_id"] for _ in range(50)]
    assert sum(1 for j in cluster.jobs() if j["state"] == "PENDING") == 50
    cluster.kill_controller(signal.SIGKILL)
    cluster.start_controller()
    all_ids = running + pending
    rows = cluster.accounted(*all_ids, timeout=120)
    assert sorted(r["job_id"] for r in rows) == sorted(all_ids)  # none lost, none duplicated
    assert all(r["state"] == "COMPLETED" for r in rows), {r["job_id"]: r["state"] for r in rows}
    assert len({r["job_id"] for r in rows}) == 60


def test_agent_kill9_keeps_running_jobs(fresh_cluster: Cluster) -> None:
    # the agent is back long before SlurmdTimeout (Slurm's default is 300 s): with the harness's
    # 4 s, a loaded machine's slow restart turned its node down and the jobs were requeued
    cluster = Cluster(fresh_cluster.root, extra="SlurmdTimeout=60")
    fresh_cluster.__dict__.update(cluster.__dict__)  # let the fixture stop what we start
    cluster = fresh_cluster.start()
    jobs = [cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 3") for _ in range(4)]
    for job_id in jobs:
        cluster.wait_state(job_id, "RUNNING")
    cluster.kill_agent(0, signal.SIGKILL)
    time.sleep(1)
    cluster.start_agent(0)
    rows = cluster.accounted(*jobs, timeout=60)
    assert sorted(r["job_id"] for r in rows) == sorted(jobs)
    assert all(r["state"] == "COMPLETED" for r in rows), [r["state"] for r in rows]


def _fork_server(agent: int) -> int | None:
    """The pid of the agent's fork server (its child running wattsched.noded.forkserver)."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_bytes()
            if int(stat.rsplit(b")", 1)[1].split()[1]) == agent and b"forkserver" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, ValueError):
            continue
    return None


def _task_of(text: str) -> bool:
    """Whether a ``sh -c`` naming ``text`` runs (the step's task, not srun, whose argv holds it too)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"sh\0-c\0") and text.encode() in cmdline:
            return True
    return False


def test_a_killed_fork_server_loses_no_job_and_is_started_again(fresh_cluster: Cluster) -> None:
    """kill -9 of the step daemons' fork server while a job and its srun step run: both end as they
    should (their daemons report through the spool and the status pipe), and the next job launches."""
    cluster = fresh_cluster.start()
    go = cluster.work / "go"
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap",
                            f"srun sh -c 'while [ ! -e {go} ]; do sleep 0.1; done; exit 3'")
    wait_for(lambda: _task_of(str(go)), 60, what="the srun step's task running")
    server = _fork_server(cluster.agent_procs[0].pid)
    assert server is not None
    os.kill(server, signal.SIGKILL)
    go.touch()
    job = cluster.wait_state(job_id, "FAILED", timeout=60)
    assert job["exit_code"] == 3
    rows = cluster.accounted(job_id, timeout=60)
    assert [r["job_id"] for r in rows] == [job_id]
    after = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(after, "COMPLETED", timeout=60)
    assert _fork_server(cluster.agent_procs[0].pid) not in (None, server)


def test_jobs_ending_while_agent_is_down_are_reported(fresh_cluster: Cluster) -> None:
    cluster = fresh_cluster.start()
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 1; exit 4")
    cluster.wait_state(job_id, "RUNNING")
    cluster.kill_agent(0, signal.SIGKILL)
    time.sleep(2)  # the script ends while no agent watches it
    cluster.start_agent(0)
    job = cluster.wait_state(job_id, "FAILED", timeout=30)
    assert job["exit_code"] == 4


def test_node_failure_requeues_or_fails_jobs(fresh_cluster: Cluster) -> None:
    cluster = Cluster(fresh_cluster.root, agents=2)
    fresh_cluster.__dict__.update(cluster.__dict__)  # let the fixture stop what we start
    cluster = fresh_cluster.start()
    requeued = cluster.sbatch("-w", "n03", "-o", "/dev/null", "--wrap", "sleep 30")
    failed = cluster.sbatch("-w", "n04", "--no-requeue", "-o", "/dev/null", "--wrap", "sleep 30")
    cancelled = cluster.sbatch("-w", "n03", "-o", "/dev/null", "--wrap", "sleep 30")
    for job_id in (requeued, failed, cancelled):
        cluster.wait_state(job_id, "RUNNING")
    cluster.kill_agent(1, signal.SIGKILL)  # n03 and n04 stop answering
    cluster.run("scancel", str(cancelled))  # its end waits for the agent, or for the node to go down
    wait_for(lambda: {n["name"]: n for n in cluster.nodes()}["n03"]["not_responding"], 20, what="n03 down")
    sinfo = cluster.run("sinfo", "-N", "-h", "-n", "n03", "-o", "%N %t").stdout.split()
    assert sinfo == ["n03", "down*"]
    assert cluster.wait_state(failed, "NODE_FAIL")
    job = cluster.wait_state(requeued, "PENDING")
    assert job["restart_count"] == 1
    assert cluster.job(cancelled)["state"] == "CANCELLED"  # a job being cancelled is never requeued
    cluster.start_agent(1)
    cluster.wait_nodes_up()
    cluster.wait_state(requeued, "RUNNING", timeout=30)
    # the run the node failure ended is a record of its own, NODE_FAIL, as Slurm writes it (sacct -D)
    wait_for(lambda: cluster.run("sacct", "-D", "-X", "-n", "-P", "-j", str(requeued), "-o", "State")
             .stdout.splitlines() == ["NODE_FAIL", "RUNNING"], 30, 0.3, what="the failed run's record")
    cluster.run("scancel", str(requeued))


def test_a_no_kill_job_runs_on_without_its_failed_node(fresh_cluster: Cluster) -> None:
    """sbatch -k: a node of the job set DOWN leaves its allocation, and the job runs on (Slurm's
    --no-kill); without -k the same failure requeues it. -k=off is as no -k."""
    cluster = fresh_cluster.start()
    kept = cluster.sbatch("-k", "-N2", "-w", "n[01-02]", "-o", "/dev/null", "--wrap", "sleep 300")
    requeued = cluster.sbatch("--no-kill=off", "-N2", "-w", "n[03-04]", "-o", "/dev/null", "--wrap", "sleep 300")
    for job_id in (kept, requeued):
        cluster.wait_state(job_id, "RUNNING")
    lost = next(n for n in ("n01", "n02") if n != cluster.job(kept)["batch_host"])
    cluster.run("scontrol", "update", f"nodename={lost},n04", "state=down", "reason=test")
    job = wait_for(lambda: (j := cluster.job(kept))["node_list"] != "n[01-02]" and j, 20, what="the node leaves")
    assert job["state"] == "RUNNING" and job["restart_count"] == 0 and lost not in job["node_list"]
    # two heartbeats of the agent that hosts both nodes later it runs on: the reply that has the agent
    # kill it on the node it lost kills it there alone (once it killed it on all the agent's nodes)
    host = job["batch_host"]
    for _ in range(2):
        seen = next(n for n in cluster.nodes() if n["name"] == host)["last_seen"]
        wait_for(lambda seen=seen: next(n for n in cluster.nodes() if n["name"] == host)["last_seen"] > seen, 20,
                 what="a heartbeat")
    assert cluster.job(kept)["state"] == "RUNNING"
    assert cluster.wait_state(requeued, "PENDING")["restart_count"] == 1
    node = next(n for n in cluster.nodes() if n["name"] == lost)
    assert node["alloc_cpus"] == 0, node  # what the job held there went back
    cluster.run("scancel", str(kept), str(requeued))
    # suspended when its node fails: the CPUs it lent stay lent, and come back on its last node alone
    cluster.run("scontrol", "update", f"nodename={lost}", "state=resume")
    suspended = cluster.sbatch("-k", "-N2", "-w", "n[01-02]", "-o", "/dev/null", "--wrap", "sleep 300")
    cluster.wait_state(suspended, "RUNNING")
    batch = cluster.job(suspended)["batch_host"]
    other = "n02" if batch == "n01" else "n01"
    cluster.run("scontrol", "suspend", str(suspended))
    cluster.run("scontrol", "update", f"nodename={other}", "state=down", "reason=test")
    wait_for(lambda: cluster.job(suspended)["node_list"] == batch, 20, what="the suspended job loses its node")
    cpus = {n["name"]: n["alloc_cpus"] for n in cluster.nodes()}
    assert cpus[batch] == 0 and cpus[other] == 0, cpus
    cluster.run("scontrol", "resume", str(suspended))
    assert {n["name"]: n["alloc_cpus"] for n in cluster.nodes()}[batch] == 1
    cluster.run("scancel", str(suspended))
    refused = cluster.run("sbatch", "--no-kill=maybe", "--wrap", "true", check=False)
    assert refused.returncode != 0 and "Invalid --no-kill specification" in refused.stderr


def test_accounting_outage_loses_nothing(fresh_cluster: Cluster, tmp_path) -> None:
    cluster = fresh_cluster.start()
    db = cluster.root / "ctld" / "accounting.db"
    wait_for(db.exists, 10, what="accounting database")
    locker = __import__("sqlite3").connect(db, timeout=1)
    locker.execute("BEGIN EXCLUSIVE")  # the accounting database is unavailable for writes
    jobs = [cluster.sbatch("-o", "/dev/null", "--wrap", "true") for _ in range(5)]
    for job_id in jobs:
        cluster.wait_state(job_id, "COMPLETED")
    time.sleep(1)
    locker.execute("ROLLBACK")
    locker.close()
    rows = cluster.accounted(*jobs, timeout=60)
    assert sorted(r["job_id"] for r in rows) == jobs


def test_a_full_disk_under_the_state_loses_nothing_and_invents_nothing(tmp_path) -> None:
    """The state on a small tmpfs, filled to the last byte: submissions are either saved (and then
    run) or refused with a clear error and never exist; scancel and the agents' reports are refused
    until space returns, then the loop, the heartbeats and the queue carry on by themselves."""
    import os
    import shutil
    import subprocess

    import pytest

    state = tmp_path / "ctld"
    state.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(state)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount -t tmpfs to put the state on a filesystem it can fill")
    cluster = Cluster(tmp_path, nodes=2, cpus=2, extra="AccountingStorageType=accounting_storage/none")
    filler = state / "filler"
    try:
        cluster.start()
        kept = cluster.sbatch("-H", "--wrap", "true")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        accepted, refused = [], 0
        for _ in range(300):  # SQLite's WAL may take a few before the disk refuses a page
            result = cluster.run("sbatch", "--parsable", "-H", "--wrap", "true", check=False)
            if result.returncode == 0:
                accepted.append(int(result.stdout))
                continue
            assert "Slurm temporarily unable to accept job" in result.stderr and "Traceback" not in result.stderr, \
                result.stderr
            refused += 1
            if refused >= 3:
                break
        assert refused >= 3, "the full disk never refused a submission"
        cancel = cluster.run("scancel", str(kept), check=False)
        assert cancel.returncode != 0 and "Unable to save the controller's state" in cancel.stderr
        cycles = cluster.api("GET", "/v1/diag").json()["cycles"]
        filler.unlink()
        wait_for(lambda: cluster.api("GET", "/v1/diag").json()["cycles"] > cycles + 2, 30, what="passes again")
        after = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
        cluster.wait_state(after, "COMPLETED", timeout=60)
        known = {j["job_id"] for j in cluster.jobs()}
        assert {kept, *accepted} <= known
        assert known - {kept, *accepted, after} == set(), "a refused submission exists"
        assert all(not n["not_responding"] for n in cluster.nodes())
        cluster.kill_controller(signal.SIGKILL)  # what was acknowledged is on disk: it survives a restart
        cluster.start_controller()
        assert {kept, *accepted, after} <= {j["job_id"] for j in cluster.jobs()}
    finally:
        cluster.stop()
        subprocess.run(["umount", "-l", str(state)], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)

"""Nothing is lost: controller and agent crashes, node failures, accounting outages."""

from __future__ import annotations

import signal
import time

from tests.testcluster import Cluster, wait_for

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
    cluster.run("scancel", str(requeued))


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

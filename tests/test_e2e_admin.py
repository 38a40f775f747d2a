"""Administration through scontrol and sinfo: node states, requeue, config, machine-readable views."""

from __future__ import annotations

import json

from wattsched.testcluster import Cluster, wait_for


def test_drain_resume_and_reasons(cluster: Cluster) -> None:
    cluster.run("scontrol", "update", "nodename=n[03-04]", "state=drain", "reason=maintenance window")
    nodes = {n["name"]: n for n in cluster.nodes()}
    assert nodes["n03"]["drain"] and nodes["n04"]["reason"] == "maintenance window"
    reasons = cluster.run("sinfo", "-R", "-h").stdout
    assert "maintenance window" in reasons and "n[03-04]" in reasons
    assert "State=IDLE+DRAIN" in cluster.run("scontrol", "show", "node", "n03").stdout
    job_id = cluster.sbatch("-w", "n03", "--wrap", "true")
    wait_for(lambda: cluster.job(job_id)["reason"] == "ReqNodeNotAvail", 10, what="ReqNodeNotAvail")
    cluster.run("scontrol", "update", "nodename=n[03-04]", "state=resume")
    cluster.wait_state(job_id, "COMPLETED")
    assert "drain" not in cluster.run("sinfo", "-h", "-o", "%t").stdout


def test_requeue_running_job(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 30")
    cluster.wait_state(job_id, "RUNNING")
    cluster.run("scontrol", "requeue", str(job_id))
    job = wait_for(lambda: (j := cluster.job(job_id))["restart_count"] == 1 and j, 10, what="requeued")
    assert job["state"] in ("PENDING", "RUNNING")
    cluster.wait_state(job_id, "RUNNING")
    cluster.run("scancel", str(job_id))


def test_immediate_fails_when_resources_are_busy(cluster: Cluster) -> None:
    blocker = cluster.sbatch("-N", "4", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 30")
    cluster.wait_state(blocker, "RUNNING")
    result = cluster.run("srun", "--immediate", "-n", "1", "true", check=False)
    assert result.returncode != 0
    assert "srun: error: Unable to allocate resources" in result.stderr
    cluster.run("scancel", str(blocker))


def test_show_config_partition_and_json(cluster: Cluster) -> None:
    config = cluster.run("scontrol", "show", "config").stdout
    assert config.startswith("Configuration data as of ")
    assert "ClusterName             = testcluster" in config
    assert "SchedulerType           = sched/builtin" in config
    part = cluster.run("scontrol", "show", "partition", "debug").stdout
    assert part.startswith("PartitionName=debug") and "TotalCPUs=16 TotalNodes=4" in part
    nodes = json.loads(cluster.run("sinfo", "--json").stdout)
    assert len(nodes["nodes"]) == 4 and nodes["partitions"][0]["name"] == "debug"
    shown = json.loads(cluster.run("scontrol", "--json", "show", "node", "n01").stdout)
    assert shown["nodes"][0]["cpus"] == 4
    one_line = cluster.run("scontrol", "-o", "show", "node", "n01").stdout
    assert one_line.count("\n") == 1 and "NodeName=n01 " in one_line


def test_openapi_schema_is_served(cluster: Cluster) -> None:
    schema = cluster.api("GET", "/openapi.json", token=None).json()
    assert "/v1/jobs" in schema["paths"] and "JobSubmit" in schema["components"]["schemas"]

"""Partitions changed while the cluster runs: scontrol create, update and delete PartitionName=, as
Slurm's. The jobs of a partition follow its state and nodes, the default partition moves, one in use
cannot be deleted; a user may not change them and bad input changes nothing; the changes outlive a
kill -9 of the controller, and scontrol reconfigure goes back to the file's partitions."""

from __future__ import annotations

import json
import signal

from wattsched.harness.testing import Cluster, wait_for


def _partitions(cluster: Cluster) -> dict[str, dict]:
    shown = json.loads(cluster.run("scontrol", "--json", "show", "partition").stdout)["partitions"]
    return {p["name"]: p for p in shown}


def test_a_partition_is_created_used_changed_and_deleted(cluster: Cluster) -> None:
    cluster.run("scontrol", "create", "PartitionName=spare", "Nodes=n[03-04]", "MaxTime=10", "State=DOWN")
    assert cluster.run("sinfo", "-h", "-p", "spare", "-o", "%P %a %l %D %N").stdout.split() == \
        ["spare", "down", "10:00", "2", "n[03-04]"]
    shown = cluster.run("scontrol", "show", "partition", "spare").stdout
    assert "PartitionName=spare" in shown and "Nodes=n[03-04]" in shown and "State=DOWN" in shown
    assert cluster.run("scontrol", "show", "node", "n03").stdout.count("Partitions=debug,spare") == 1
    # a DOWN partition queues jobs and starts none; UP again, they run on its nodes
    job_id = cluster.sbatch("-p", "spare", "-N2", "--wrap", "true")
    wait_for(lambda: cluster.job(job_id)["reason"] == "PartitionDown", 20, what="the job waits on its partition")
    cluster.run("scontrol", "update", "PartitionName=spare", "State=UP")
    assert cluster.wait_state(job_id, "COMPLETED")["node_list"] == "n[03-04]"
    cluster.run("scontrol", "update", "PartitionName=spare", "Nodes-=n03", "Nodes+=n01")
    assert _partitions(cluster)["spare"]["nodes"]["configured"] == "n[01,04]"
    # the default moves: the old default is no longer one, and jobs without -p land in the new one
    cluster.run("scontrol", "update", "PartitionName=spare", "Default=YES")
    assert "spare*" in cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    assert "debug*" not in cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    held = cluster.sbatch("-H", "--wrap", "true")
    assert cluster.job(held)["partition"] == "spare"
    in_use = cluster.run("scontrol", "delete", "PartitionName=spare", check=False)
    assert in_use.returncode == 1 and "delete_partition PartitionName=spare: Partition is in use" in in_use.stderr
    cluster.run("scancel", str(held))
    cluster.run("scontrol", "update", "PartitionName=debug", "Default=YES")
    cluster.run("scontrol", "delete", "partition", "spare")
    assert "spare" not in _partitions(cluster)
    assert "Partitions=debug " in cluster.run("scontrol", "-o", "show", "node", "n04").stdout
    # sacct keeps the finished job's partition
    assert cluster.accounted(job_id)[0]["partition"] == "spare"


def test_an_exclusive_partition_gives_each_job_whole_nodes(cluster: Cluster) -> None:
    """OverSubscribe=EXCLUSIVE: a one-CPU job holds its whole node, so a second waits for it;
    Slurm's YES and FORCE (CPUs shared by jobs) are refused, naming the key."""
    cluster.run("scontrol", "create", "PartitionName=whole", "Nodes=n03", "OverSubscribe=EXCLUSIVE")
    assert cluster.run("sinfo", "-h", "-p", "whole", "-o", "%P %h").stdout.split() == ["whole", "EXCLUSIVE"]
    assert "OverSubscribe=EXCLUSIVE" in cluster.run("scontrol", "show", "partition", "whole").stdout
    assert _partitions(cluster)["whole"]["maximums"]["oversubscribe"] == {"jobs": 0, "flags": []}
    first = cluster.sbatch("-p", "whole", "-n1", "--wrap", "sleep 300")
    assert cluster.wait_state(first, "RUNNING")["num_cpus"] == 4
    second = cluster.sbatch("-p", "whole", "-n1", "--wrap", "true")
    wait_for(lambda: cluster.job(second)["reason"] == "Resources", 20, what="the second job waits for the node")
    refused = cluster.run("scontrol", "update", "PartitionName=whole", "OverSubscribe=FORCE:2", check=False)
    assert refused.returncode == 1 and "OverSubscribe=FORCE:2" in refused.stderr \
        and "not supported here" in refused.stderr, refused.stderr
    cluster.run("scancel", str(first))
    cluster.wait_state(second, "COMPLETED")
    cluster.run("scontrol", "delete", "PartitionName=whole")


def test_who_may_submit_and_how_small_a_job_may_be(cluster: Cluster) -> None:
    """Slurm's RootOnly, ReqResv and DisableRootJobs refuse at submission with Slurm's words;
    MinNodes pends a smaller job (PartitionNodeLimit), as MaxNodes does a larger one."""
    cluster.run("scontrol", "create", "PartitionName=rootonly", "Nodes=n04", "RootOnly=YES", "MinNodes=1")
    cluster.run("scontrol", "create", "PartitionName=resv", "Nodes=n04", "ReqResv=YES")
    cluster.run("scontrol", "create", "PartitionName=noroot", "Nodes=n04", "DisableRootJobs=YES")
    cluster.run("scontrol", "create", "PartitionName=big", "Nodes=n[01-04]", "MinNodes=2")
    shown = cluster.run("scontrol", "-o", "show", "partition", "rootonly").stdout
    assert "RootOnly=YES ReqResv=NO" in shown and "MinNodes=1 " in shown and "DisableRootJobs=NO" in shown
    for part, env, message in (("rootonly", cluster.user_env(), "Access/permission denied"),
                               ("resv", None, "Access/permission denied"), ("noroot", None, "Invalid user id")):
        refused = cluster.run("sbatch", "-H", "-p", part, "--wrap", "true", env=env, check=False)
        assert refused.returncode == 1 and f"Batch job submission failed: {message}" in refused.stderr, \
            (part, refused.stderr)
    held = cluster.sbatch("-H", "-p", "rootonly", "--wrap", "true")  # root may
    small = cluster.sbatch("-p", "big", "-N1", "--wrap", "true")
    wait_for(lambda: cluster.job(small)["reason"] == "PartitionNodeLimit", 20, what="the one-node job pends")
    cluster.run("scancel", str(held), str(small))
    for part in ("rootonly", "resv", "noroot", "big"):
        cluster.run("scontrol", "delete", f"PartitionName={part}")


def test_bad_changes_and_users_are_refused_and_change_nothing(cluster: Cluster) -> None:
    before = _partitions(cluster)
    for args, message in [
        (["create", "PartitionName=debug"], "Error creating the partition: Invalid partition name specified"),
        (["create", "PartitionName=DEFAULT"], 'PartitionName cannot be "DEFAULT".'),
        (["create", "PartitionName=x", "Nodes=n99"], "Invalid node name specified: n99"),
        (["create", "PartitionName=x", "Colour=blue"], "Update of this parameter is not supported: Colour=blue"),
        (["update", "PartitionName=debug", "State=sideways"], "Invalid input: State=sideways"),
        (["update", "PartitionName=nosuch", "State=UP"], "slurm_update error: Invalid partition name specified"),
        (["update", "PartitionName=debug"], "No changes specified"),
        (["delete", "PartitionName=nosuch"], "Invalid partition name specified"),
        (["create", "Colour=blue"], "Invalid creation entity: Colour=blue"),
    ]:
        result = cluster.run("scontrol", *args, check=False)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    for args in (["create", "PartitionName=mine"], ["update", "PartitionName=debug", "State=DOWN"],
                 ["delete", "PartitionName=debug"]):
        refused = cluster.run("scontrol", *args, check=False, env=cluster.user_env())
        assert refused.returncode == 1 and "Access/permission denied" in refused.stderr, refused.stderr
    assert _partitions(cluster) == before


def test_changes_outlive_a_kill_and_reconfigure_returns_to_the_file(fresh_cluster: Cluster) -> None:
    cluster = fresh_cluster.start()
    cluster.run("scontrol", "create", "PartitionName=later", "Nodes=n02", "PriorityTier=5")
    cluster.run("scontrol", "update", "PartitionName=debug", "State=DRAIN")
    cluster.kill_controller(signal.SIGKILL)  # acknowledged means saved
    cluster.start_controller()
    kept = _partitions(cluster)
    assert kept["later"]["nodes"]["configured"] == "n02" and kept["later"]["priority"]["tier"] == 5
    assert kept["debug"]["partition"]["state"] == ["DRAIN"]
    drained = cluster.run("sbatch", "-p", "debug", "--wrap", "true", check=False)
    assert drained.returncode == 1 and "Required partition not available (inactive or drain)" in drained.stderr
    cluster.run("scontrol", "reconfigure")
    back = _partitions(cluster)
    assert set(back) == {"debug"} and back["debug"]["partition"]["state"] == ["UP"]
    cluster.kill_controller(signal.SIGKILL)
    cluster.start_controller()
    assert set(_partitions(cluster)) == {"debug"}


def test_partition_limits_refuse_at_submission_with_enforce_part_limits(tmp_path) -> None:
    """EnforcePartLimits=ALL: a job beyond its partition's MaxTime or MaxNodes is refused with
    Slurm's words (without it, it waits: PartitionTimeLimit); DefMemPerNode is a job's memory when
    it asks none."""
    cluster = Cluster(tmp_path, extra="EnforcePartLimits=ALL\nDefMemPerNode=128",
                      partitions="PartitionName=short Nodes=ALL Default=YES MaxTime=10 MaxNodes=2").start()
    try:
        long = cluster.run("sbatch", "-t", "20", "--wrap", "true", check=False)
        assert long.returncode == 1
        assert "Requested time limit is invalid (missing or exceeds some limit)" in long.stderr
        wide = cluster.run("sbatch", "-N", "3", "--wrap", "true", check=False)
        assert wide.returncode == 1 and "Node count specification invalid" in wide.stderr
        job = cluster.sbatch("-H", "-t", "5", "--wrap", "true")
        assert "MinMemoryNode=128M" in cluster.run("scontrol", "show", "job", str(job)).stdout
        cluster.run("scancel", str(job))
    finally:
        cluster.stop()

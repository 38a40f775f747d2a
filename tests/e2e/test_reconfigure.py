"""scontrol reconfigure and SIGHUP: the controller re-reads its configuration; new nodes, partitions
and parameters apply while jobs run on and wait on; what needs a restart, a broken file or a
non-admin is refused and changes nothing."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from wattsched.harness.testing import Cluster, free_port, wait_for


def rewrite(cluster: Cluster, old: str, new: str) -> None:
    text = cluster.conf.read_text()
    assert old in text, old
    cluster.conf.write_text(text.replace(old, new))


def test_new_nodes_and_partitions_apply_without_losing_jobs(fresh_cluster: Cluster, tmp_path: Path) -> None:
    cluster = fresh_cluster
    cluster.start()
    running = cluster.sbatch("-N", "2", "--exclusive", "--wrap", "sleep 4")
    cluster.wait_state(running, "RUNNING")
    waiting = cluster.sbatch("-N", "4", "--wrap", "true")
    rewrite(cluster, "NodeName=n[01-04] CPUs=4 RealMemory=8000",
            "NodeName=n[01-04] CPUs=4 RealMemory=8000\nNodeName=n05 CPUs=8 RealMemory=16000")
    rewrite(cluster, "PartitionName=debug Nodes=n[01-04] Default=YES MaxTime=INFINITE",
            "PartitionName=debug Nodes=n[01-04] Default=YES MaxTime=INFINITE\nPartitionName=big Nodes=n05 MaxTime=30")
    result = cluster.run("scontrol", "reconfigure")
    assert result.returncode == 0 and result.stdout == ""
    assert "big" in cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    assert cluster.job(running)["state"] == "RUNNING" and cluster.job(waiting)["state"] == "PENDING"
    # the new node's agent starts as on a new host, and takes jobs of the new partition
    cluster.agent_ports.append(free_port())
    cluster.agent_procs.append(cluster._spawn(["noded", str(cluster.conf), "--nodes", "n05", "--port",
                                               str(cluster.agent_ports[-1])], "noded-n05.log"))
    cluster.wait_nodes_up(["n05"])
    big = cluster.sbatch("-p", "big", "-c", "8", "--wrap", "hostname")
    assert cluster.wait_state(big, "COMPLETED")["node_list"] == "n05"
    assert re.search(r"MaxTime=(00:)?30:00 ", cluster.run("scontrol", "show", "partition", "big").stdout)
    cluster.wait_state(running, "COMPLETED")
    cluster.wait_state(waiting, "COMPLETED")


def test_what_needs_a_restart_a_broken_file_or_a_user_is_refused(cluster: Cluster) -> None:
    before = cluster.run("sinfo", "-h").stdout
    original = cluster.conf.read_text()
    try:
        rewrite(cluster, f"ClusterName={cluster.name}", "ClusterName=othername")
        refused = cluster.run("scontrol", "reconfigure", check=False)
        assert refused.returncode == 1 and "ClusterName cannot change without restarting" in refused.stderr
        cluster.conf.write_text(original + "NoSuchKey=1\n")
        broken = cluster.run("scontrol", "reconfigure", check=False)
        assert broken.returncode == 1 and f"{cluster.conf}:" in broken.stderr and "NoSuchKey" in broken.stderr
        cluster.conf.write_text(original.replace("n[01-04] CPUs=4", "n[01-03] CPUs=4").replace(
            "Nodes=n[01-04]", "Nodes=n[01-03]"))
        holder = cluster.sbatch("-w", "n04", "--wrap", "sleep 30")
        cluster.wait_state(holder, "RUNNING")
        busy = cluster.run("scontrol", "reconfigure", check=False)
        assert busy.returncode == 1 and "n04 cannot be removed while it runs jobs" in busy.stderr
        cluster.run("scancel", str(holder))
        cluster.wait_state(holder, "CANCELLED")  # n04 idle again: its cleanup is done
        cluster.conf.write_text(original)
        user = cluster.run("scontrol", "reconfigure", env=cluster.user_env(), check=False)
        assert user.returncode == 1 and "Access/permission denied" in user.stderr
    finally:
        cluster.conf.write_text(original)
    assert cluster.run("sinfo", "-h").stdout == before


def test_sighup_re_reads_the_configuration(fresh_cluster: Cluster) -> None:
    cluster = fresh_cluster
    cluster.start()
    rewrite(cluster, "PartitionName=debug Nodes=n[01-04] Default=YES MaxTime=INFINITE",
            "PartitionName=debug Nodes=n[01-04] Default=YES MaxTime=INFINITE\nPartitionName=late Nodes=n04")
    assert cluster.controller is not None
    cluster.controller.send_signal(signal.SIGHUP)
    wait_for(lambda: "late" in cluster.run("sinfo", "-h", "-o", "%P").stdout.split(), 20, what="partition late")
    job = cluster.sbatch("-p", "late", "--wrap", "true")
    assert cluster.wait_state(job, "COMPLETED")["node_list"] == "n04"


def test_the_agents_take_a_new_prolog_from_scontrol_reconfigure(fresh_cluster: Cluster, tmp_path: Path) -> None:
    """As Slurm's slurmds: scontrol reconfigure reaches the agents, and the next job runs the Prolog
    the file now names."""
    cluster = fresh_cluster
    cluster.start()
    prolog, touched = tmp_path / "prolog.sh", tmp_path / "prolog-ran"
    prolog.write_text(f"#!/bin/sh\necho $SLURM_JOB_ID > {touched}\n")
    prolog.chmod(0o755)
    cluster.conf.write_text(cluster.conf.read_text() + f"Prolog={prolog}\n")
    cluster.run("scontrol", "reconfigure")
    logs = list(cluster.logs.glob("noded*.log"))
    assert logs
    wait_for(lambda: all("configuration re-read" in log.read_text() for log in logs), 20,
             what="every agent re-read its configuration")
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(job, "COMPLETED")
    assert touched.read_text() == f"{job}\n"
    # SIGHUP to an agent re-reads its file too, as to Slurm's slurmd
    second = tmp_path / "prolog2.sh"
    second.write_text(f"#!/bin/sh\necho second $SLURM_JOB_ID > {touched}\n")
    second.chmod(0o755)
    cluster.conf.write_text(cluster.conf.read_text().replace(f"Prolog={prolog}\n", f"Prolog={second}\n"))
    before = {log: log.read_text().count("configuration re-read") for log in logs}
    for agent in cluster.agent_procs:
        agent.send_signal(signal.SIGHUP)
    wait_for(lambda: all(log.read_text().count("configuration re-read") > seen for log, seen in before.items()), 20,
             what="the agents re-read their file")
    again = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(again, "COMPLETED")
    assert touched.read_text() == f"second {again}\n"

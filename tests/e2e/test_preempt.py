"""Preemption (PreemptType=preempt/qos) on a real cluster, through the real commands: a job of a
QOS that may preempt another finds the cluster full of the other's jobs and takes a place, by
requeue or cancel (PREEMPTED), after the victim's GraceTime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for

SETTINGS = """PriorityType=priority/multifactor
PriorityWeightQOS=10000
PriorityCalcPeriod=0:01
PreemptType=preempt/qos
PreemptMode=REQUEUE
AccountingStorageEnforce=associations,limits,qos"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("preempt"), nodes=2, cpus=4, extra=SETTINGS).start()
    c = running
    c.run("sacctmgr", "-i", "add", "qos", "low")
    c.run("sacctmgr", "-i", "add", "qos", "high", "Priority=100", "Preempt=low")
    c.run("sacctmgr", "-i", "modify", "account", "root", "set", "QOS=normal,low,high")
    yield running
    running.stop()


def _fill(c: Cluster, count: int = 2, *extra: str) -> list[int]:
    """The cluster full of low jobs (a node each), all running."""
    ids = [c.sbatch("--qos=low", "-N", "1", "-n", "4", "-t", "10", "-o", "/dev/null", *extra, "--wrap",
                    "sleep 300") for _ in range(count)]
    for job in ids:
        c.wait_state(job, "RUNNING")
    return ids


def test_a_high_job_requeues_a_low_one_and_runs(cluster: Cluster) -> None:
    c = cluster
    low = _fill(c)
    try:
        high = c.sbatch("--qos=high", "-n", "4", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300")
        c.wait_state(high, "RUNNING")
        states = {j: c.job(j) for j in low}
        requeued = [j for j, rec in states.items() if rec["restart_count"] == 1]
        assert len(requeued) == 1, states  # one node was enough: one victim
        assert states[requeued[0]]["state"] == "PENDING"
        other = next(j for j in low if j not in requeued)
        assert states[other]["state"] == "RUNNING" and states[other]["restart_count"] == 0
        # the requeued job waits its turn: Resources, not preempting anyone (same QOS)
        wait_for(lambda: c.job(requeued[0])["reason"] in ("Resources", "Priority"), 20, 0.2,
                 what="the requeued job waits")
        c.run("scancel", str(high))
        c.wait_state(requeued[0], "RUNNING")  # and runs again once the high job is gone
        # its first run is a record of its own, PREEMPTED, as Slurm writes it (sacct -D)
        wait_for(lambda: c.run("sacct", "-D", "-X", "-n", "-P", "-j", str(requeued[0]), "-o", "State")
                 .stdout.splitlines() == ["PREEMPTED", "RUNNING"], 30, 0.3, what="the preempted run's record")
    finally:
        c.run("scancel", *map(str, low), check=False)
        c.run("scancel", "--qos=high", check=False)


def test_cancel_mode_ends_the_victim_preempted_after_its_grace_time(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptMode=CANCEL", "GraceTime=3")
    marker = tmp_path / "term"
    # the victims hear SIGTERM and have their GraceTime to wrap up
    low = [c.sbatch("--qos=low", "-N", "1", "-n", "4", "-t", "10", "-o", "/dev/null", "--wrap",
                    f"trap 'echo $SLURM_JOB_ID >> {marker}; sleep 30' TERM; sleep 300 & wait")
           for _ in range(2)]
    for job in low:
        c.wait_state(job, "RUNNING")
    try:
        high = c.sbatch("--qos=high", "-n", "4", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300")
        wait_for(lambda: marker.exists() and marker.read_text().strip(), 20, 0.2, what="SIGTERM to the victim")
        victim = int(marker.read_text().split()[0])
        assert c.job(victim)["state"] == "RUNNING"  # within its grace
        c.wait_state(high, "RUNNING", timeout=30)
        c.wait_state(victim, "PREEMPTED")
        [record] = c.accounted(victim)
        assert record["state"] == "PREEMPTED"
        assert c.run("sacct", "-j", str(victim), "-X", "-n", "-P", "-o", "State").stdout.strip() == "PREEMPTED"
        listed = c.run("squeue", "-h", "-t", "PR", "-j", str(victim), "-o", "%T").stdout.strip()
        assert listed in ("", "PREEMPTED")
    finally:
        c.run("scancel", *map(str, low), check=False)
        c.run("scancel", "--qos=high", check=False)
        c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptMode=cluster", "GraceTime=0")


def test_suspend_mode_lends_the_victims_cpus_until_the_preemptor_is_done(cluster: Cluster) -> None:
    c = cluster
    c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptMode=SUSPEND")
    low = _fill(c)
    try:
        high = c.sbatch("--qos=high", "-n", "4", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300")
        c.wait_state(high, "RUNNING")
        states = {j: c.run("squeue", "-h", "-j", str(j), "-o", "%T").stdout.strip() for j in low}
        assert sorted(states.values()) == ["RUNNING", "SUSPENDED"], states
        victim = next(j for j, s in states.items() if s == "SUSPENDED")
        assert c.job(victim)["restart_count"] == 0  # the same run, frozen
        c.run("scancel", str(high))
        wait_for(lambda: c.run("squeue", "-h", "-j", str(victim), "-o", "%T").stdout.strip() == "RUNNING", 30, 0.2,
                 what="the victim resumed once the preemptor was gone")
    finally:
        c.run("scancel", *map(str, low), check=False)
        c.run("scancel", "--qos=high", check=False)
        c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptMode=cluster")


def test_exempt_time_and_qos_order_protect_jobs(cluster: Cluster) -> None:
    c = cluster
    c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptExemptTime=1:00:00")
    low = _fill(c)
    try:
        high = c.sbatch("--qos=high", "-n", "4", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300")
        wait_for(lambda: c.job(high)["reason"] == "Resources", 20, 0.2, what="the high job waits")
        assert all(c.job(j)["state"] == "RUNNING" and c.job(j)["restart_count"] == 0 for j in low)
        # a normal job never preempts: normal's Preempt list is empty
        normal = c.sbatch("-n", "4", "-t", "5", "-o", "/dev/null", "--wrap", "true")
        wait_for(lambda: c.job(normal)["reason"] in ("Resources", "Priority"), 20, 0.2, what="normal waits")
        c.run("sacctmgr", "-i", "modify", "qos", "low", "set", "PreemptExemptTime=-1")
        c.wait_state(high, "RUNNING", timeout=30)
        c.run("scancel", str(normal))
    finally:
        c.run("scancel", *map(str, low), check=False)
        c.run("scancel", "--qos=high", check=False)


def test_bad_preemption_settings_are_refused(cluster: Cluster) -> None:
    c = cluster
    for setting in ("PreemptMode=SOMETIMES", "Preempt=nosuch", "Preempt=high+", "GraceTime=-5"):
        bad = c.run("sacctmgr", "-i", "modify", "qos", "high", "set", setting, check=False)
        assert bad.returncode != 0, setting
    itself = c.run("sacctmgr", "-i", "modify", "qos", "high", "set", "Preempt=high", check=False)
    assert itself.returncode != 0 and "preempt itself" in itself.stderr
    shown = c.run("sacctmgr", "show", "qos", "high", "-P", "-n", "format=Name,Preempt,PreemptMode").stdout.strip()
    assert shown == "high|low|cluster"

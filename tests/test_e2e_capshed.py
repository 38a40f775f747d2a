"""Meeting a lowered cap, on an emulated cluster with metered nodes, through the real commands:
`scontrol update powercap=` below what the running jobs may draw brings the cluster under it
within PowerCapShedTime, first by slowing jobs' CPUs, then by requeueing preemptable ones, and
gives it all back when the cap rises again."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from wattsched.testing import Cluster, wait_for

NODE = "IdleWatts=100 MaxWatts=300 CpuFreqWatts=2000000:300,1500000:220,1000000:160"
SETTINGS = """AcctGatherEnergyType=acct_gather_energy/emulated
AcctGatherNodeFreq=1
PowerCap=INFINITE
PowerCapShed=cpufreq,requeue
PowerCapShedTime=10
PreemptMode=REQUEUE"""


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, nodes=3, cpus=2, extra=SETTINGS, node_extra=NODE).start()
    yield running
    running.stop()


def _current(c: Cluster) -> int:
    shown = c.run("scontrol", "show", "powercap").stdout
    return int(re.search(r"CurrentWatts=(\d+)", shown).group(1))


def _measured(c: Cluster) -> float:
    return c.api("GET", "/v1/dashboard/power").json()["measured_watts"]


def test_a_lowered_cap_is_met_by_slower_cpus_then_requeues_and_given_back(cluster: Cluster) -> None:
    c = cluster
    # one CPU-bound job per node: the cap counts 3 x 300 W
    jobs = [c.sbatch("--exclusive", "-t", "10", "-o", "/dev/null", "--wrap", "while :; do :; done")
            for _ in range(3)]
    for job in jobs:
        c.wait_state(job, "RUNNING")
    try:
        assert _current(c) == 900
        wait_for(lambda: _measured(c) > 300, 20, 0.5, what="the nodes metered busy")
        # 700 W: slower CPUs are enough (1 GHz saves 140 W a node, 1.5 GHz 80 W)
        c.run("scontrol", "update", "powercap=700")
        wait_for(lambda: _current(c) <= 700, 10, 0.2, what="the model under 700 W within PowerCapShedTime")
        slowed = {j: c.job(j)["cpu_freq_khz"] for j in jobs}
        assert any(khz is not None for khz in slowed.values()) and all(c.job(j)["restart_count"] == 0 for j in jobs)
        wait_for(lambda: _measured(c) <= 700, 20, 0.5, what="the metered draw under the cap")
        actions = c.api("GET", "/v1/powercap").json()["shed"]["actions"]
        assert {a["action"] for a in actions} == {"cpufreq"} and all(a["cap"] == 700 for a in actions)
        # 400 W: slowing is not enough: preemptable jobs are requeued, youngest first
        c.run("scontrol", "update", "powercap=400")
        wait_for(lambda: _current(c) <= 400, 10, 0.2, what="the model under 400 W within PowerCapShedTime")
        requeued = [j for j in jobs if c.job(j)["restart_count"] == 1]
        assert requeued and len(requeued) < 3
        for job in requeued:
            assert c.job(job)["state"] == "PENDING"
        wait_for(lambda: c.job(requeued[0])["reason"] in ("PowerNotAvail", "BeginTime"), 10, 0.2,
                 what="the requeued job held by the cap")
        wait_for(lambda: _measured(c) <= 400, 20, 0.5, what="the metered draw under the lower cap")
        steps = [a["action"] for a in c.api("GET", "/v1/powercap").json()["shed"]["actions"]]
        assert "requeue" in steps
        # the cap lifted: the requeued jobs run again and the slowed ones get their frequency back
        c.run("scontrol", "update", "powercap=INFINITE")
        for job in requeued:
            c.wait_state(job, "RUNNING", timeout=60)
        wait_for(lambda: all(c.job(j)["cpu_freq_khz"] is None for j in jobs), 20, 0.2,
                 what="every job back at full speed")
    finally:
        c.run("scancel", *map(str, jobs), check=False)

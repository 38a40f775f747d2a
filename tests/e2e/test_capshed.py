"""The cap lowered and the cap over time, on an emulated cluster with metered nodes, through the
real commands.

Meeting a lowered cap: `scontrol update powercap=` below what the running jobs may draw brings
the cluster under it within PowerCapShedTime, first by slowing jobs' CPUs, then by requeueing
preemptable ones, and gives it all back when the cap rises again.

The cap over time, compressed to seconds: a dip scheduled ahead with `scontrol update
powercap=VALUE@START EndTime=...` makes the scheduler plan around it (jobs whose time limit would
run into it wait, PowerReserved), the metered draw stays under the cap in force all along, and
the jobs held back start when the dip is over. Nothing is killed by the dip."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster, wait_for

NODE = "IdleWatts=100 MaxWatts=300 CpuFreqWatts=2000000:300,1500000:220,1000000:160"
SETTINGS = """AcctGatherEnergyType=acct_gather_energy/emulated
AcctGatherNodeFreq=1
PowerCap=INFINITE
PowerCapShed=cpufreq,requeue
PowerCapShedTime=10
PreemptMode=REQUEUE
SchedulerParameters=bf_interval=1"""
BURN = "timeout 6 sh -c 'while :; do :; done'; true"


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


def _cap(c: Cluster) -> dict:
    return c.api("GET", "/v1/powercap").json()


def test_a_scheduled_dip_is_planned_around_and_the_draw_stays_under_it(cluster: Cluster) -> None:
    c = cluster
    # from 25 s to 45 s from now, at most 500 W: the three idle nodes (300 W) and one busy node
    c.run("scontrol", "update", "powercap=500@now+25", "EndTime=now+45")
    shown = c.run("scontrol", "show", "powercap").stdout.splitlines()
    assert shown[0] == "MinWatts=300 CurrentWatts=300 PowerCap=INFINITE AdjustedMaxWatts=900 MaxWatts=900"
    assert re.fullmatch(r"PowerCapStep=1 PowerCap=500 Watts=500 StartTime=\S+ EndTime=\S+ Source=scontrol", shown[1])
    step = _cap(c)["schedule"][0]
    assert step["end"] - step["start"] == 20
    # three CPU-bound jobs whose one-minute limits all run into the dip: one may start, on one node,
    # though there is power for all three now (without the schedule, all three start at once)
    jobs = [c.sbatch("--exclusive", "-t", "1", "-o", "/dev/null", "--wrap", BURN) for _ in range(3)]
    c.wait_state(jobs[0], "RUNNING")
    for job in jobs[1:]:
        wait_for(lambda job=job: c.job(job)["reason"] == "PowerReserved", 15, 0.2, what=f"job {job} held for the dip")
    # watch the draw until the dip is over: the metered draw and the model stay under the cap in force
    seen: list[tuple[float, float, int, int]] = []  # (time, cap in force, metered W, jobs running)

    def dip_over() -> bool:
        cap = _cap(c)
        now = time.time()
        if step["start"] + 1 <= now < step["end"]:  # (a meter reading lags by its interval)
            measured = _measured(c)
            running = sum(1 for j in jobs if c.job(j)["state"] == "RUNNING")
            seen.append((now, cap["power_cap"], measured, running))
            assert cap["current_watts"] <= 500, cap
        return now >= step["end"] + 1

    wait_for(dip_over, 60, 0.3, what="the dip over")
    assert seen and all(cap == 500 for _t, cap, _w, _r in seen)
    assert all(watts <= 500 for _t, _c, watts, _r in seen), seen
    assert all(running <= 1 for *_rest, running in seen), seen
    # afterwards the cap is what it was, and the held jobs run and end: none was killed or requeued
    assert _cap(c)["power_cap"] == "INFINITE" and _cap(c)["schedule"] == []
    for job in jobs:
        done = c.wait_state(job, "COMPLETED", timeout=60)
        assert done["restart_count"] == 0


def test_steps_are_listed_deleted_and_survive_a_restart(cluster: Cluster) -> None:
    c = cluster
    c.run("scontrol", "update", "powercap=60%@now+2hours", "Duration=30", "Flags=DAILY")
    c.run("scontrol", "update", "powercap=700@now+3hours")
    listed = c.run("scontrol", "show", "powercap").stdout.splitlines()[1:]
    assert [line.split()[:3] for line in listed] == [["PowerCapStep=1", "PowerCap=60%", "Watts=540"],
                                                     ["PowerCapStep=2", "PowerCap=700", "Watts=700"]]
    assert "Flags=DAILY" in listed[0] and "EndTime=None" in listed[1]
    as_json = c.run("scontrol", "show", "powercap", "--json").stdout
    assert '"ahead"' in as_json and '"schedule"' in as_json
    c.kill_controller(signal.SIGKILL)  # what scontrol was told is saved: kill -9 loses none of it
    c.start_controller()
    assert [s["step_id"] for s in _cap(c)["schedule"]] == ["1", "2"]
    c.run("scontrol", "delete", "powercapstep=1")
    assert [s["step_id"] for s in _cap(c)["schedule"]] == ["2"]
    missing = c.run("scontrol", "delete", "powercapstep=1", check=False)
    assert missing.returncode == 1 and "PowerCapStep 1 not found" in missing.stderr
    bad = c.run("scontrol", "update", "powercap=60%@18:00", "Flags=DAILY", check=False)
    assert bad.returncode == 1 and "Flags=DAILY needs an EndTime or a Duration" in bad.stderr
    # an open step whose time comes becomes the cap
    c.run("scontrol", "update", "powercap=800@now+2")
    wait_for(lambda: (cap := _cap(c))["power_cap"] == 800 and [s["step_id"] for s in cap["schedule"]] == ["2"],
             15, 0.2, what="the step carried out")

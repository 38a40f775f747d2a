"""The simulator's power limits: a job at a lower clock (--power-fit, or its node's limit) runs
as long as its busy share says, past its time limit it ends there, and the moving budget
(PowerPlugin=power/balance) moves the limits from a memory-bound job to a compute-bound one, the
draw never over the cap, the queue moving sooner than by admission alone."""

from __future__ import annotations

import json
import subprocess

import pytest

from wattsched import config, cpufreq
from wattsched.harness.testing import BIN
from wattsched.simulator import engine, workload
from wattsched.simulator.workload import SimJob, Workload

# two one-CPU nodes: 100 W idle, 300 W busy at 2 GHz, 150 W at 1 GHz (linear between)
LADDER = "2000000:300,1000000:150"


def _platform(tmp_path, cap: int, extra: str = "") -> config.Config:
    path = tmp_path / "p.conf"
    path.write_text(f"SchedulerType=sched/backfill\nSelectType=select/linear\nPowerCap={cap}\n{extra}\n"
                    f"NodeName=n[1-2] CPUs=1 IdleWatts=100 MaxWatts=300 CpuFreqWatts={LADDER}\n"
                    "PartitionName=p Nodes=n[1-2] Default=YES\n")
    return config.load(path)


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_a_power_fit_job_runs_longer_at_its_slower_clock_as_its_busy_share_says(tmp_path, factor: float) -> None:
    # 350 W: the idle node's 100 W and this one busy at 2 GHz (300 W) do not fit; at 1 GHz (150 W) they do
    jobs = Workload([SimJob(1, 0, 1000, 3000, 1, energy_factor=factor)])
    result = engine.Simulation(_platform(tmp_path, 350), jobs, power_fit=True).run()
    record = result.records[0]
    assert record.freq_khz == 1000000
    stretch = cpufreq.runtime_factor(1000000, 2000000, factor)  # 2 computing all the time, 1.5 half of it
    assert record.end == pytest.approx(1000 * stretch)
    assert record.energy_j == pytest.approx((100 + 50 * factor) * 1000 * stretch)
    assert result.summary()["timeouts"] == 0 and result.over_cap_w == 0


def test_a_job_slowed_past_its_time_limit_ends_there(tmp_path) -> None:
    jobs = Workload([SimJob(1, 0, 1000, 1000, 1)])  # limit: 17 minutes; at half speed it needs 2000 s
    result = engine.Simulation(_platform(tmp_path, 350), jobs, power_fit=True).run()
    assert result.records[0].end == 17 * 60 and result.records[0].timed_out
    assert result.summary()["timeouts"] == 1


def test_the_moving_budget_gives_a_memory_bound_jobs_watts_to_a_compute_bound_one_within_the_cap(tmp_path) -> None:
    # 480 W: both nodes idle take 200 W, and one busy at 300 W leaves no room for the other (admission
    # alone runs the two jobs one after the other); the memory-bound job draws 150 W of its 300
    jobs = Workload([SimJob(1, 0, 3000, 6000, 1, energy_factor=0.25), SimJob(2, 0, 3000, 6000, 1)])
    alone = engine.Simulation(_platform(tmp_path, 480), jobs).run()
    assert [r.start for r in alone.records] == [0, 3000]
    moving = engine.Simulation(_platform(tmp_path, 480, "PowerPlugin=power/balance\n"
                                                        "PowerParameters=balance_interval=30"), jobs).run()
    memory, compute = moving.records
    # the second starts at once, its node held to what fits (150 W, its 1 GHz); then the budget moves
    # the memory-bound node's unused watts to it
    assert memory.start == 0 and compute.start == 0 and moving.limit_changes[0] == (0, "n2", 150.0)
    assert moving.last_end < alone.last_end / 1.5
    assert moving.over_cap_w == 0 and moving.peak_w <= 480
    first: dict[str, list[float]] = {}
    for _t, node, watts in moving.limit_changes:
        if watts is not None:
            first.setdefault(node, []).append(watts)
    assert min(first["n1"]) < 200 and max(first["n2"]) == 300
    # held at first, the compute-bound job ran a little longer than at full speed; the memory-bound
    # one, held above its draw, not at all
    assert 3000 < compute.runtime < 3300 and memory.runtime == pytest.approx(3000)
    assert moving.summary()["timeouts"] == 0
    # every joule its nodes drew is counted: the jobs' energy and the idle time make the total
    assert sum(moving.energy_by_state.values()) == pytest.approx(
        memory.energy_j + compute.energy_j + 100 * (2 * moving.last_end - memory.runtime - compute.runtime))


def test_without_the_plugin_or_a_cap_nothing_is_limited(tmp_path) -> None:
    jobs = Workload([SimJob(1, 0, 3000, 6000, 1, energy_factor=0.25), SimJob(2, 0, 3000, 6000, 1)])
    for extra in ("", "PowerPlugin=power/balance\n"):
        path = tmp_path / "q.conf"
        path.write_text(f"SchedulerType=sched/backfill\n{extra}NodeName=n[1-2] CPUs=1 IdleWatts=100 MaxWatts=300\n"
                        "PartitionName=p Nodes=n[1-2] Default=YES\n")
        result = engine.Simulation(config.load(path), jobs).run()
        assert result.limit_changes == [] and [r.end for r in result.records] == [3000, 3000]


def test_a_cap_that_falls_is_met_at_once_by_the_limit_and_the_job_slows(tmp_path) -> None:
    # a ten-day job starts (the planner sees the schedule 8 days ahead); on day 9 the cap falls for
    # good to 250 W: with n2 idle (100 W) n1 is held to 150 W, its clock to 1 GHz, and the job does
    # the day of its run still to do at half speed
    (tmp_path / "caps").write_text("PowerCap=250@now+9days\n")
    day = 86400
    jobs = Workload([SimJob(1, 0, 10 * day, 20 * day, 1)])
    caps = f"PowerCapSchedule={tmp_path / 'caps'}\n"
    moving = engine.Simulation(_platform(tmp_path, 480, caps + "PowerPlugin=power/balance\n"), jobs).run()
    assert moving.cap_changes == [(0, 480), (9 * day, 250)]
    assert (9 * day, "n1", 150.0) in moving.limit_changes
    assert moving.records[0].end == pytest.approx(9 * day + 2 * day)
    assert moving.over_cap_s == 0 and moving.records[0].energy_j == pytest.approx(300 * 9 * day + 150 * 2 * day)
    alone = engine.Simulation(_platform(tmp_path, 480, caps), jobs).run()  # admission cannot slow a running job
    assert alone.records[0].end == 10 * day and alone.over_cap_s == pytest.approx(day)


@pytest.mark.e2e
def test_the_simulate_command_runs_jobs_with_power_fit_and_the_moving_budget(tmp_path) -> None:
    conf = tmp_path / "p.conf"
    _platform(tmp_path, 350)  # writes p.conf
    jobs = tmp_path / "w.json"
    workload.save_json(Workload([SimJob(1, 0, 1000, 1000, 1), SimJob(2, 0, 500, 3000, 1, energy_factor=0.5)]), jobs)
    out = tmp_path / "out"
    done = subprocess.run([str(BIN / "wattsched"), "simulate", str(conf), str(jobs), "-o", str(out), "-q",
                           "--power-fit", "--set", "PowerPlugin=power/balance"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # job 1 at 1 GHz (the only clock that fits) needs 2,000 s of its 17-minute limit
    assert "timeouts: 1 slowed past the time limit" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["timeouts"] == 1 and summary["over_cap_w"] == 0

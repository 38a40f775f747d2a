"""The power cap over time (wattsched.capschedule): requests in scontrol's grammar, the cap's
timeline, steps carried out and windows rolled, and the backfill planner working around a dip."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

from wattsched import capadmission, capschedule, states
from wattsched.capschedule import INFINITE, CapScheduleError, CapStep
from wattsched.confvalues import SchedulerParams
from wattsched.nodestates import PowerState
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler

from .test_backfill import cluster, job, plan

# a fixed local midnight, so that "18:00" means the same moment wherever the test runs
MIDNIGHT = time.mktime((2026, 11, 26, 0, 0, 0, 0, 0, -1))
NOON = MIDNIGHT + 12 * 3600


def step(text: str, **keys: str) -> CapStep:
    return capschedule.parse_request({"powercap": text, **{k.lower(): v for k, v in keys.items()}}, "1", NOON)


def test_requests_in_scontrols_grammar() -> None:
    dip = step("60%@18:00", Duration="2:00:00")
    assert (dip.start - MIDNIGHT, dip.end - MIDNIGHT, dip.share, dip.every) == (18 * 3600, 20 * 3600, 0.6, 0)
    assert dip.cap(2000) == 1200 and dip.text == "60%"
    later = step("1500@2026-11-27T08:00")
    assert later.open and later.watts == 1500 and later.start == MIDNIGHT + 32 * 3600
    daily = step("INFINITE@now+1hour", EndTime="now+3hours", Flags="daily")
    assert daily.every == 86400 and daily.watts == INFINITE and daily.end - daily.start == 7200
    assert step("1500@10:00").start == MIDNIGHT + 34 * 3600  # a time of day already past is tomorrow's


@pytest.mark.parametrize(("text", "keys", "message"), [
    ("1500", {}, "needs a start"),
    ("150%@18:00", {}, "Invalid power cap"),
    ("lots@18:00", {}, "Invalid power cap"),
    ("1500@someday", {}, "Invalid time"),
    ("1500@18:00", {"EndTime": "17:00"}, "not after the start"),
    ("1500@18:00", {"Flags": "DAILY"}, "needs an EndTime"),
    ("1500@18:00", {"Flags": "HOURLY", "Duration": "10"}, "Invalid power cap flag"),
    ("1500@18:00", {"Duration": "2-00:00:00", "Flags": "DAILY"}, "shorter than its period"),
    ("1500@now-2hours", {"Duration": "60"}, "already ended"),
    ("1500@18:00", {"Nodes": "n1"}, "not supported: nodes"),
])
def test_bad_requests_say_why(text: str, keys: dict[str, str], message: str) -> None:
    with pytest.raises(CapScheduleError, match=message):
        step(text, **keys)


def test_a_file_holds_one_request_per_line() -> None:
    text = "# demand response\nPowerCap=60%@18:00 Duration=2:00:00 Flags=DAILY\n\nPowerCap=1500@now+1day  # later\n"
    steps = capschedule.parse_file(text, NOON)
    assert [s.step_id for s in steps] == ["conf:2", "conf:4"] and steps[0].every == 86400
    with pytest.raises(CapScheduleError, match="line 2: Invalid time"):
        capschedule.parse_file("\nPowerCap=60%@soon\n", NOON)
    with pytest.raises(CapScheduleError, match="line 1: 'PowerCap' is not KEY=VALUE"):
        capschedule.parse_file("PowerCap 60%@18:00", NOON)


def test_the_timeline_takes_the_lowest_window_and_open_steps_replace_the_cap() -> None:
    dip = step("60%@18:00", Duration="2:00:00", Flags="DAILY")
    deeper = replace(step("500@19:00", Duration="30"), step_id="2")
    raise_ = replace(step("3000@22:00"), step_id="3")
    cap_now, ahead = capschedule.timeline(1500.0, [dip, deeper, raise_], NOON, 2000.0, horizon_s=36 * 3600)
    hours = [((t - MIDNIGHT) / 3600, cap) for t, cap in ahead]
    assert cap_now == 1500.0
    # 18:00 60 % of 2000; 19:00-19:30 the deeper window; 20:00 back to 1500; 22:00 the new cap for good;
    # the next day's 18:00 window stays below it
    assert hours == [(18, 1200.0), (19, 500.0), (19.5, 1200.0), (20, 1500.0), (22, 3000.0), (42, 1200.0),
                     (44, 3000.0)]
    # no cap until a window opens: capping is off now, and the cap is none again afterwards
    cap_now, ahead = capschedule.timeline(None, [dip], NOON, 2000.0, horizon_s=12 * 3600)
    assert cap_now is None and [(t - MIDNIGHT) / 3600 for t, _c in ahead] == [18, 20]
    assert ahead[-1][1] == INFINITE


def test_due_carries_out_open_steps_and_rolls_daily_windows() -> None:
    dip = step("60%@18:00", Duration="2:00:00", Flags="DAILY")
    once = replace(step("800@13:00", Duration="10"), step_id="2")
    change = replace(step("1000@now+30minutes"), step_id="3")
    cap, left = capschedule.due(1500.0, [dip, once, change], NOON + 3600, 2000.0)
    assert cap == 1000.0 and [s.step_id for s in left] == ["1", "2"]
    cap, left = capschedule.due(cap, left, MIDNIGHT + 21 * 3600, 2000.0)  # both windows are over
    assert cap == 1000.0 and [(s.step_id, s.start - MIDNIGHT) for s in left] == [("1", 42 * 3600)]


def _dipped(cap: float, dip_from: float, dip_to: float, dip_cap: float) -> capadmission.PowerSnap:
    watts = {n: capadmission.NodePower(100, 300, 100, 300) for n in ("n01", "n02", "n03", "n04")}
    ahead = ((dip_from, dip_cap), (dip_to, cap))
    return capadmission.PowerSnap(watts, dict.fromkeys(watts, PowerState.IDLE), cap, (), ahead)


@pytest.mark.parametrize("kind", ["builtin", "admit", "plan"])
def test_jobs_that_would_run_into_a_dip_wait_and_short_ones_run_before_it(kind: str) -> None:
    from wattsched.scheduling.records import NodeSnap

    base = cluster(4, 4, [])
    now = base.now
    # 1200 W now (all four nodes busy); from +1 h to +3 h only 600 W, room for one busy node
    snap = _dipped(1200.0, now + 3600, now + 3 * 3600, 600.0)
    long_job, short_job = job(1, 8, 120), job(2, 8, 30)
    scheduler = BuiltinScheduler() if kind == "builtin" else BackfillScheduler(SchedulerParams(bf_power=kind))
    decisions = plan(replace(base, pending=(long_job, short_job), power=snap), scheduler)
    assert [j for j, _a in decisions.starts] == [2]  # 30 minutes end before the dip
    assert decisions.reasons[1] == states.R_POWER_RESERVED
    if kind == "plan":
        # the planner sees the dip ahead: the long job is planned for when it ends, on the nodes left
        assert decisions.expected_start[1] == now + 3 * 3600
    # while the dip holds, a job fits on one node only
    inside = replace(base, now=now + 3600 + 60, power=replace(snap, cap=600.0, ahead=((now + 3 * 3600, 1200.0),)),
                     nodes=tuple(NodeSnap(n.name, 4, 4, 1000, 1000) for n in base.nodes),
                     pending=(job(3, 8, 10), job(4, 4, 10)))
    decisions = plan(inside, scheduler)
    assert [j for j, _a in decisions.starts] == [4]
    assert decisions.reasons[3] == states.R_POWER


def test_a_schedule_alone_turns_capping_on() -> None:
    from wattsched import snapbuild

    watts = {"n01": capadmission.NodePower(100, 300, 100, 300)}
    idle = {"n01": PowerState.IDLE}
    assert snapbuild.power_snap(None, watts, idle) is None
    snap = snapbuild.power_snap(None, watts, idle, steps=[step("50%@18:00", Duration="60")], now=NOON)
    assert snap is not None and snap.cap == math.inf and snap.limit() == 300
    assert snap.limit_at(MIDNIGHT + 18.5 * 3600) == 150 and snap.limit_at(MIDNIGHT + 20 * 3600) == 300


def test_a_bad_schedule_file_is_a_configuration_error(tmp_path) -> None:
    from wattsched import config as config_mod
    from wattsched.controller import capsetting

    bad = tmp_path / "caps"
    bad.write_text("PowerCap=60%@18:00 Duration=2:00:00 Flags=DAILY\nPowerCap=50%@whenever\n")
    conf = config_mod.with_overrides(config_mod.Config(), power_cap_schedule=str(bad))
    with pytest.raises(config_mod.ConfigError, match="PowerCapSchedule: line 2: Invalid time specified"):
        capsetting.read_schedule_file(conf, NOON)
    bad.write_text("PowerCap=60%@18:00 Duration=2:00:00 Flags=DAILY\nPowerCap=1000@now-1hour\n")
    # an open step already past was carried out when it came: read again, it is not again
    assert [s.step_id for s in capsetting.read_schedule_file(conf, NOON)] == ["conf:1"]
    missing = config_mod.with_overrides(conf, power_cap_schedule=str(tmp_path / "none"))
    with pytest.raises(config_mod.ConfigError, match="cannot read"):
        capsetting.read_schedule_file(missing, NOON)

"""The power cap through the controller's transitions, in process: set by an administrator alone,
as watts or a share of the nodes' MaxWatts, scheduled ahead as steps that come in force at their
time, and a pass that keeps a job pending (PowerNotAvail) while it would take the nodes over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inprocess import NOW, controller_state
from wattsched import states
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.controller import capsetting, jobs, launching
from wattsched.controller.actions import Refused

ALICE, ROOT = Identity(1000, "alice"), Identity(0, "root")
POWERED = "SlurmdTimeout=100000\nNodeName=DEFAULT IdleWatts=100 MaxWatts=300\n"


def test_the_cap_is_an_administrators_and_its_steps_come_in_force_at_their_time(tmp_path: Path) -> None:
    state = controller_state(tmp_path, POWERED)
    with pytest.raises(Refused, match="permission"):
        capsetting.set_power_cap(state, "250", ALICE)
    capsetting.set_power_cap(state, "50%", ROOT)  # of the nodes' MaxWatts
    assert capsetting.cap_in_force(state, NOW) == 150
    capsetting.set_power_cap(state, "250", ROOT)
    step = capsetting.add_cap_step(state, {"powercap": "200@now+1hour"}, ROOT, NOW)
    assert [s.step_id for s in state.cap_steps] == [step.step_id] and step.start == NOW + 3600
    assert capsetting.cap_in_force(state, NOW + 3599) == 250
    capsetting.roll_schedule(state, NOW + 3600)
    assert (state.power_cap, state.cap_steps) == (200, [])  # carried out: the cap, and the step gone
    later = capsetting.add_cap_step(state, {"powercap": "100@now+2hours"}, ROOT, NOW)
    with pytest.raises(Refused):
        capsetting.delete_cap_step(state, later.step_id, ALICE)
    capsetting.delete_cap_step(state, later.step_id, ROOT)
    capsetting.roll_schedule(state, NOW + 7200)
    assert (state.power_cap, state.cap_steps) == (200, [])
    with pytest.raises(Refused):
        capsetting.delete_cap_step(state, later.step_id, ROOT)


def test_a_job_waits_for_power_until_the_cap_lets_it_run(tmp_path: Path) -> None:
    state = controller_state(tmp_path, POWERED)
    capsetting.set_power_cap(state, "200", ROOT)  # the node would draw up to 300 W busy
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=2), ALICE, NOW)[0]
    launching.schedule(state, NOW + 1)
    assert (job.state, job.reason) == (states.PENDING, states.R_POWER)
    capsetting.set_power_cap(state, "300", ROOT)
    launching.schedule(state, NOW + 2)
    assert job.state == states.RUNNING

"""Power saving through the controller's transitions, in process: scontrol's power_down and power_up
of idle and busy nodes, a node refused while it is being switched, and SuspendProgram or
ResumeProgram failing (the node on again, or DOWN with its job requeued)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inprocess import NOW, controller_state
from wattsched import states
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.controller import jobend, jobs, launching, powersavecontrol
from wattsched.controller.actions import Refused
from wattsched.controller.powersaving import PowerProgram
from wattsched.nodestates import PowerFlag

ALICE = Identity(1000, "alice")
SAVING = "SlurmdTimeout=100000\nSuspendTime=600\nSuspendProgram=/bin/true\nResumeProgram=/bin/true\n"


def test_an_idle_node_is_switched_off_once_and_on_again_if_the_program_fails(tmp_path: Path) -> None:
    state = controller_state(tmp_path, SAVING)
    node = state.nodes["a1"]
    assert powersavecontrol.power_command(state, ["a1"], "power_down", NOW) == [PowerProgram("suspend", ["a1"])]
    assert node.power == PowerFlag.POWERING_DOWN
    with pytest.raises(Refused, match="Node a1 is already being powered down"):
        powersavecontrol.power_command(state, ["a1"], "power_down", NOW + 1)
    powersavecontrol.power_program_failed(state, "suspend", ["a1"], NOW + 2)
    assert (node.power, node.idle_since) == (PowerFlag.NONE, NOW + 2)  # on again, idle from now


def test_a_busy_node_is_marked_and_switched_off_only_once_idle(tmp_path: Path) -> None:
    state = controller_state(tmp_path, SAVING)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=2), ALICE, NOW)[0]
    launching.schedule(state, NOW + 1)
    assert job.state == states.RUNNING
    assert powersavecontrol.power_command(state, ["a1"], "power_down", NOW + 2) == []  # no program yet
    assert state.nodes["a1"].power == PowerFlag.POWER_DOWN  # Slurm's "!": off once idle
    assert powersavecontrol.power_command(state, ["a1"], "power_up", NOW + 3) == []
    assert state.nodes["a1"].power == PowerFlag.NONE  # the mark taken back; it was never off
    powersavecontrol.power_command(state, ["a1"], "power_down", NOW + 4)
    assert PowerProgram("suspend", ["a1"]) not in powersavecontrol.power_tick(state, NOW + 5)  # still busy
    jobend.end(state, job, states.COMPLETED, 0, 0, NOW + 6, ["a1"])
    jobend.node_clean(state, job.job_id, "a1")
    assert PowerProgram("suspend", ["a1"]) in powersavecontrol.power_tick(state, NOW + 7)  # idle: off now
    assert state.nodes["a1"].power == PowerFlag.POWERING_DOWN


def test_a_node_whose_resume_fails_goes_down_and_its_job_is_requeued(tmp_path: Path) -> None:
    state = controller_state(tmp_path, SAVING)
    node = state.nodes["a1"]
    powersavecontrol.power_command(state, ["a1"], "power_down", NOW)
    node.power = PowerFlag.POWERED_DOWN  # (its SuspendTimeout over: off)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=2), ALICE, NOW + 10)[0]
    actions = launching.schedule(state, NOW + 11)  # started on the node it wakes up
    assert PowerProgram("resume", ["a1"]) in actions and node.power == PowerFlag.POWERING_UP
    assert job.shown_state == states.CONFIGURING
    powersavecontrol.power_program_failed(state, "resume", ["a1"], NOW + 20)
    assert node.power == PowerFlag.NONE and node.reason == "ResumeProgram failed"
    assert (job.state, job.restart_count) == (states.PENDING, 1)

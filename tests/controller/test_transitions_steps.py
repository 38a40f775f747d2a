"""The controller's transitions of a job's steps, in process: srun's steps laid out inside an
allocation, steps that may not share CPUs refused as busy until one ends, scancel JOB.STEP, an
allocation released by its srun/salloc, and suspend and resume giving a job's CPUs back."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.inprocess import NOW, controller_state
from wattsched import states
from wattsched.api import JobSubmit, StepComplete, StepCreate
from wattsched.auth import Identity
from wattsched.controller import jobs, launching, steps
from wattsched.controller.actions import Freeze, Refused, Signal
from wattsched.controller.state import ClusterState
from wattsched.model import Job

ALICE, BOB, ROOT = Identity(1000, "alice"), Identity(1001, "bob"), Identity(0, "root")


def _allocation(tmp_path: Path, cpus: int = 4) -> tuple[ClusterState, Job]:
    """salloc -n CPUS, started by a pass."""
    state = controller_state(tmp_path, "SlurmdTimeout=100000\n", cpus=cpus)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", interactive=True, ntasks=cpus), ALICE, NOW)[0]
    launching.schedule(state, NOW + 1)
    assert job.state == states.RUNNING and job.request.interactive
    return state, job


def test_steps_share_no_cpus_until_one_ends_unless_they_overlap(tmp_path: Path) -> None:
    state, job = _allocation(tmp_path)
    first, layout = steps.create_step(state, job, StepCreate(ntasks=3), ALICE, NOW + 2)
    assert (first.step_id, layout, first.node_cpus) == ("0", {"a1": [0, 1, 2]}, {"a1": 3})
    with pytest.raises(Refused, match="Requested nodes are busy"):  # 2 more CPUs: srun waits, asks again
        steps.create_step(state, job, StepCreate(ntasks=2), ALICE, NOW + 3)
    second, _ = steps.create_step(state, job, StepCreate(ntasks=1), ALICE, NOW + 3)  # the one CPU left
    shared, _ = steps.create_step(state, job, StepCreate(ntasks=4, overlap=True), ALICE, NOW + 3)
    assert (second.step_id, shared.step_id, shared.node_cpus) == ("1", "2", {})
    steps.complete_step(state, job, "0", StepComplete(exit_code=0), ALICE, NOW + 4)
    assert first.state == states.COMPLETED and first.end_time == NOW + 4
    third, layout = steps.create_step(state, job, StepCreate(ntasks=2), ALICE, NOW + 5)
    assert third.step_id == "3" and layout == {"a1": [0, 1]}
    with pytest.raises(Refused):  # more tasks than MaxTasksPerNode allows could never fit
        steps.create_step(state, job, StepCreate(ntasks=state.config.max_tasks_per_node + 1), ALICE, NOW + 5)


def test_a_step_is_its_owners_and_cancelled_alone(tmp_path: Path) -> None:
    state, job = _allocation(tmp_path)
    with pytest.raises(Refused):
        steps.create_step(state, job, StepCreate(ntasks=1), BOB, NOW + 2)
    step, _ = steps.create_step(state, job, StepCreate(ntasks=2), ALICE, NOW + 2)
    assert steps.cancel_step(state, job, step.step_id, ALICE, signal.SIGUSR1) == \
        [Signal(job.job_id, ["a1"], signal.SIGUSR1, step_id=0)]  # scancel -s USR1 JOB.0: signalled, runs on
    assert not step.cancelled
    [kill] = steps.cancel_step(state, job, step.step_id, ALICE, None)
    assert (kill.signal, kill.step_id, step.cancelled) == (signal.SIGKILL, 0, True)
    steps.complete_step(state, job, step.step_id, StepComplete(exit_code=0, term_signal=9), ALICE, NOW + 3)
    assert (step.state, job.state) == (states.CANCELLED, states.RUNNING)  # the job goes on
    with pytest.raises(Refused, match="already completing or completed"):
        steps.cancel_step(state, job, step.step_id, ALICE, None)
    with pytest.raises(Refused, match="Invalid job id"):
        steps.cancel_step(state, job, "7", ALICE, None)


def test_an_allocation_released_by_its_command_ends_with_its_exit(tmp_path: Path) -> None:
    state, job = _allocation(tmp_path)
    steps.complete_allocation(state, job, 3, 0, ALICE, NOW + 5)
    assert (job.state, job.final_state, job.exit_code, job.end_time) == (states.COMPLETING, states.FAILED, 3, NOW + 5)
    with pytest.raises(Refused, match="already completing or completed"):
        steps.create_step(state, job, StepCreate(ntasks=1), ALICE, NOW + 6)


def test_suspend_gives_the_cpus_back_and_resume_takes_them_again(tmp_path: Path) -> None:
    state, job = _allocation(tmp_path, cpus=2)
    waiting = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=2), ALICE, NOW + 2)[0]
    with pytest.raises(Refused):  # an administrator's
        jobs.suspend(state, [job], False, ALICE, NOW + 3)
    assert jobs.suspend(state, [job], False, ROOT, NOW + 3) == [Freeze(job.job_id, ["a1"], True)]
    assert (job.shown_state, state.nodes["a1"].alloc_cpus) == (states.SUSPENDED, 0)
    launching.schedule(state, NOW + 4)  # its CPUs went back: the next job starts on them (Slurm's)
    assert waiting.state == states.RUNNING
    assert jobs.suspend(state, [job], True, ROOT, NOW + 13) == [Freeze(job.job_id, ["a1"], False)]
    assert (job.shown_state, job.suspended_s, state.nodes["a1"].alloc_cpus) == (states.RUNNING, 10.0, 4)
    with pytest.raises(Refused, match="is not suspended"):
        jobs.suspend(state, [job], True, ROOT, NOW + 14)

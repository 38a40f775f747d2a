"""A job's life through the controller's transitions, in process (the transition modules called
by name over a real state store and a virtual node, each with its ``now``; no daemon): started by
a pass when its CPUs are free, ended and cleaned up, held and released, cancelled pending or
running, requeued; a node failed under it; a user refused another user's job and a node's drain, as
Slurm refuses them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.inprocess import NOW, controller_state
from wattsched import states
from wattsched.api import JobSubmit, JobUpdate
from wattsched.auth import Identity
from wattsched.controller import jobend, jobs, launching, nodes
from wattsched.controller.actions import Launch, Refused, Signal
from wattsched.controller.state import ClusterState
from wattsched.model import Job

ALICE, BOB, ROOT = Identity(1000, "alice"), Identity(1001, "bob"), Identity(0, "root")


def _state(tmp_path: Path) -> ClusterState:
    return controller_state(tmp_path, "SlurmdTimeout=100000\n", cpus=2)


def _submit(state: ClusterState, who: Identity = ALICE, cpus: int = 2, **fields) -> Job:
    return jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=cpus, **fields), who, NOW)[0]


def _launched(actions: list) -> list[int]:
    return [a.job.job_id for a in actions if isinstance(a, Launch)]


def test_a_pass_starts_what_fits_and_the_next_job_once_the_node_is_clean(tmp_path: Path) -> None:
    state = _state(tmp_path)
    first, second = _submit(state), _submit(state)
    assert _launched(launching.schedule(state, NOW + 1)) == [first.job_id]
    assert (first.state, first.node_list, first.start_time) == (states.RUNNING, ["a1"], NOW + 1)
    assert (second.state, second.reason) == (states.PENDING, states.R_RESOURCES)
    jobs.launched(state, first.job_id)
    cleanup = jobend.end(state, first, states.COMPLETED, 0, 0, NOW + 10, ["a1"])
    assert [(a.job_id, a.nodes, a.signal, a.terminate) for a in cleanup if isinstance(a, Signal)] == \
        [(first.job_id, ["a1"], signal.SIGKILL, True)]
    assert first.state == states.COMPLETING
    assert _launched(launching.schedule(state, NOW + 11)) == []  # its CPUs are held until the node is clean
    jobend.node_clean(state, first.job_id, "a1")
    assert first.state == states.COMPLETED and first.exit_code == 0
    assert _launched(launching.schedule(state, NOW + 12)) == [second.job_id]


def test_a_held_job_waits_until_released(tmp_path: Path) -> None:
    state = _state(tmp_path)
    job = _submit(state)
    jobs.update(state, [job], JobUpdate(hold="user"), ALICE, NOW)
    assert _launched(launching.schedule(state, NOW + 1)) == []
    assert (job.state, job.reason) == (states.PENDING, states.R_HELD_USER)
    jobs.update(state, [job], JobUpdate(release=True), ALICE, NOW + 2)
    assert _launched(launching.schedule(state, NOW + 3)) == [job.job_id]


def test_cancelling_a_pending_job_ends_it_at_once_a_running_one_through_its_nodes(tmp_path: Path) -> None:
    state = _state(tmp_path)
    running, pending = _submit(state, cpus=1), _submit(state, cpus=2)
    unlaunched = _submit(state, cpus=1)
    launching.schedule(state, NOW + 1)
    jobs.launched(state, running.job_id)  # its batch script runs; the other's launch is not confirmed yet
    assert jobs.cancel(state, [pending], ALICE, None, False, NOW + 2) == []
    assert (pending.state, pending.cancelled_by, pending.end_time) == (states.CANCELLED, ALICE.uid, NOW + 2)
    ordered = jobs.cancel(state, [running], ALICE, None, False, NOW + 3)
    assert [(a.job_id, a.nodes, a.signal, a.terminate) for a in ordered if isinstance(a, Signal)] == \
        [(running.job_id, ["a1"], signal.SIGTERM, True)]
    assert running.state == states.RUNNING and running.cancelled_by == ALICE.uid  # until its script's end
    # a job whose script never started has nothing to wait for: it ends, its node cleaned up
    ordered = jobs.cancel(state, [unlaunched], ALICE, None, False, NOW + 4)
    assert [(a.job_id, a.signal) for a in ordered if isinstance(a, Signal)] == [(unlaunched.job_id, signal.SIGKILL)]
    assert (unlaunched.state, unlaunched.final_state) == (states.COMPLETING, states.CANCELLED)


def test_a_user_may_not_touch_another_users_job(tmp_path: Path) -> None:
    state = _state(tmp_path)
    job = _submit(state, ALICE)
    with pytest.raises(Refused, match="Access/permission denied"):
        jobs.cancel(state, [job], BOB, None, False, NOW + 1)
    with pytest.raises(Refused, match="Access/permission denied"):
        jobs.update(state, [job], JobUpdate(hold="user"), BOB, NOW + 1)
    assert job.state == states.PENDING and not job.hold


def test_a_requeued_running_job_waits_again_and_counts_its_restart(tmp_path: Path) -> None:
    state = _state(tmp_path)
    job = _submit(state)
    launching.schedule(state, NOW + 1)
    jobs.launched(state, job.job_id)
    with pytest.raises(Refused, match="Job is pending execution"):
        jobs.requeue(state, [_submit(state)], ALICE, NOW + 2)
    actions = jobs.requeue(state, [job], ALICE, NOW + 3)
    assert any(isinstance(a, Signal) and a.job_id == job.job_id for a in actions)
    assert job.restart_count == 1


@pytest.mark.parametrize(("requeue", "after"), [(True, states.PENDING), (False, states.NODE_FAIL)])
def test_a_failed_node_requeues_its_job_or_ends_it_node_fail(tmp_path: Path, requeue: bool, after: str) -> None:
    state = _state(tmp_path)
    job = _submit(state, requeue=requeue)
    launching.schedule(state, NOW + 1)
    jobs.launched(state, job.job_id)
    jobend.node_down(state, state.nodes["a1"], "Not responding", NOW + 2, not_responding=True)
    # nothing is left to clean on a dead node: the run ends at once
    assert (job.state, job.alloc.completing_nodes) == (after, [])
    if requeue:  # it waits for a node again, and starts on none while its node is down
        assert job.restart_count == 1
        assert _launched(launching.schedule(state, NOW + 3)) == [] and job.state == states.PENDING


def test_an_admin_drains_a_node_with_a_reason_and_a_user_may_not(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with pytest.raises(Refused, match="You must specify a reason when DOWNING or DRAINING a node"):
        nodes.update_nodes(state, ["a1"], "drain", "", ROOT, NOW)
    with pytest.raises(Refused, match="Access/permission denied"):
        nodes.update_nodes(state, ["a1"], "drain", "maintenance", ALICE, NOW)
    nodes.update_nodes(state, ["a1"], "drain", "maintenance", ROOT, NOW)
    job = _submit(state)
    assert _launched(launching.schedule(state, NOW + 1)) == []
    assert job.state == states.PENDING
    nodes.update_nodes(state, ["a1"], "resume", "", ROOT, NOW + 2)
    assert _launched(launching.schedule(state, NOW + 3)) == [job.job_id]


def test_a_job_runs_past_its_time_limit_by_the_over_time_limit_then_times_out(tmp_path: Path) -> None:
    """OverTimeLimit=2: a job with a minute's limit is cancelled (TIMEOUT) two minutes after it, not
    at it; in a partition whose OverTimeLimit=UNLIMITED, never."""
    from wattsched.controller import timers

    state = controller_state(tmp_path, "SlurmdTimeout=100000\nOverTimeLimit=2\n"
                             "PartitionName=free Nodes=a1 OverTimeLimit=UNLIMITED\n", cpus=2)
    soft, free = _submit(state, cpus=1, time_limit="1"), _submit(state, cpus=1, time_limit="1", partition="free")
    assert sorted(_launched(launching.schedule(state, NOW))) == [soft.job_id, free.job_id]
    for job in (soft, free):
        jobs.launched(state, job.job_id)
    timers.check_timers(state, NOW + 60)
    timers.check_timers(state, NOW + 179)
    assert not soft.timed_out and soft.state == states.RUNNING
    ended = timers.check_timers(state, NOW + 180)
    assert soft.timed_out and [a.job_id for a in ended if isinstance(a, Signal) and a.terminate] == [soft.job_id]
    timers.check_timers(state, NOW + 86400)  # (a day: within SlurmdTimeout, the node still up)
    assert not free.timed_out and free.state == states.RUNNING
    assert state.config.over_time_s("p") == 120 and state.config.over_time_s("free") == float("inf")

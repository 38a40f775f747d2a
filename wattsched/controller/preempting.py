"""The controller's side of preemption: the preemptees the pure core chose
(:func:`wattsched.preemption.preemptees`) are cancelled (ending PREEMPTED) or requeued, by
their PreemptMode, after their QOS's GraceTime: SIGTERM at once, the end when it is over; or
suspended at once (SUSPEND), their CPUs lent to the preemptor, their memory kept, until their
CPUs are free again.
"""

from __future__ import annotations

import logging
import signal as signal_mod
from typing import TYPE_CHECKING

from wattsched import preemption, states
from wattsched.controller import jobend, jobs, resources, snapshots
from wattsched.controller.actions import Action, Freeze, Signal
from wattsched.model import Job
from wattsched.scheduling.records import Decisions, Snapshot

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")
SLURM_USER = 0  # who cancelled a preempted job, as sacct's CANCELLED by shows it


def preempt(state: ClusterState, snap: Snapshot, decisions: Decisions,
            now: float) -> list[Action]:
    """Preempt what the pass's pending jobs need, as the core chooses."""
    settings = snap.preempt
    actions: list[Action] = []
    for job_id, by in preemption.preemptees(snap, decisions, state.plugins.select).items():
        job = state.jobs.get(job_id)
        if job is None or job.state != states.RUNNING or job.preempted:
            continue
        qos = state.shares.qos.get(job.qos)
        mode = preemption.mode_of(qos, settings, snap.partitions.get(job.partition))
        asked = job.request
        if mode == preemption.REQUEUE and (asked.interactive or not asked.requeue or not state.config.job_requeue):
            mode = preemption.CANCEL  # as Slurm: a job that may not be requeued is cancelled
        grace = qos.grace_time if qos is not None else 0
        log.info("preempting job", extra={"job": job_id, "preemptor": by, "mode": mode, "grace_s": grace})
        job.preempted_by = by
        state.touch(job)
        if mode == preemption.SUSPEND:  # at once, as Slurm: its CPUs go to the preemptor now
            resources.hold(state, job, -1, only_cpus=True)
            job.preempt_suspended = True
            job.suspended_at = now
            actions.append(Freeze(job.job_id, job.node_list, True))
            continue
        job.preempted = mode
        if job.suspended_at:  # a frozen process takes no signal
            actions.extend(jobs.thaw(state, job, now))
        if grace > 0 and job.launched and not job.request.interactive:
            job.preempt_deadline = now + grace
            actions.append(grace_signal(job))
        else:
            actions.extend(expire(state, job, now))
    return actions


def resume(state: ClusterState, now: float) -> list[Action]:
    """Jobs a preemptor suspended resume, highest priority first, as soon as their CPUs are free
    again (before anything new is started on them) and their preemptor no longer waits for them."""
    waiting = sorted((j for j in state.jobs.values() if j.preempt_suspended and j.state == states.RUNNING),
                     key=lambda j: (-j.priority, j.start_time, j.job_id))
    actions: list[Action] = []
    for job in waiting:
        if snapshots.preemptor_waits(state, job):
            continue
        nodes = [state.nodes.get(n) for n in job.alloc.alloc_cpus]
        if all(node is not None and node.cpus - node.alloc_cpus >= job.alloc.alloc_cpus[node.name] for node in nodes):
            job.preempt_suspended, job.preempted_by = False, 0
            resources.hold(state, job, +1, only_cpus=True)
            log.info("resuming preempted job", extra={"job": job.job_id})
            actions.extend(jobs.thaw(state, job, now))
    return actions


def grace_signal(job: Job) -> Signal:
    """What a preempted job hears when its GraceTime begins."""
    return Signal(job.job_id, job.node_list, signal_mod.SIGTERM, full=True)


def expire(state: ClusterState, job: Job, now: float) -> list[Action]:
    """The preempted job's grace is over: it ends (PREEMPTED) or goes back to the queue."""
    job.preempt_deadline = 0.0
    if job.preempted == preemption.REQUEUE:
        return jobend.requeue_running(state, job, now, states.PREEMPTED)
    job.cancelled_by = SLURM_USER
    state.touch(job)
    return jobs.terminate(state, job, now)

"""The controller's clock-driven transitions, once a second: time limits and --signal
warnings, used-up budgets (once per new reading of the use, every PriorityCalcPeriod), purging
old jobs, reservations rolling, unresponsive nodes, power saving, then the triggers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wattsched import ledger, nodestates, states
from wattsched.controller import (
    acctpolicy,
    jobend,
    jobenergy,
    jobs,
    mail,
    powersavecontrol,
    preempting,
    snapshots,
    triggerctl,
)
from wattsched.controller.actions import Action, RunTrigger, Signal

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")


def check_timers(state: ClusterState, now: float) -> list[Action]:
    """Time limits, --signal warnings, unresponsive nodes and purging of old jobs."""
    actions: list[Action] = []
    if state.with_deadline:
        missed_deadlines(state, now)
    # a pending job has no timer here: they are most of a long queue, left out in one cheap pass
    for job in [j for j in state.jobs.values() if j.state != states.PENDING]:
        if job.preempt_deadline and now >= job.preempt_deadline and job.state == states.RUNNING \
                and job.cancelled_by is None:  # a preempted job's GraceTime is over
            actions.extend(preempting.expire(state, job, now))
        elif job.state == states.RUNNING and job.time_limit_min is not None and not job.configuring \
                and not job.suspended_at:
            if job.request.mail_type:
                actions.extend(mail.time_limit(state, job, now))
            deadline = job.start_time + job.suspended_s + job.time_limit_min * 60  # suspended time is not run time
            if job.request.kill_signal and not job.warn_signal_sent and now >= deadline - job.request.kill_signal_secs:
                job.warn_signal_sent = True
                state.touch(job)
                asked = job.request
                actions.append(Signal(job.job_id, job.node_list, asked.kill_signal, asked.kill_signal_batch_only))
            # past OverTimeLimit too: the limit is then a soft one, as Slurm's
            if now >= deadline + state.config.over_time_s(job.partition) and not job.timed_out \
                    and job.cancelled_by is None:
                job.timed_out = True
                state.touch(job)
                actions.extend(jobs.terminate(state, job, now))
        elif (job.state in states.FINISHED and job.end_time and now - job.end_time > state.config.min_job_age_s
              and job.job_id not in state.journal.dirty):  # while the state cannot be saved, its end is only here
            jobend.purge(state, job)
    if state.memo.budgets_read is not state.shares:
        state.memo.budgets_read = state.shares
        actions.extend(end_overruns(state, now))
    if state.energy_due:
        # the jobs whose nodes stopped reporting end without energy
        jobend.end_settled(state, jobenergy.account_energy(state, now))
    moved, ended = state.resv.roll(now)
    state.journal.resv_dirty.extend(moved + ended)
    changed, purged = state.resv.maintain(state.nodes, snapshots.partition_snaps(state), state.jobs.values(), now)
    state.journal.resv_dirty.extend(changed + purged)
    for node in state.nodes.values():
        # a node switched off (or switching) has no agent to hear from: its switch has its own timeouts
        if not node.not_responding and not node.power and now - node.last_seen > state.config.slurmd_timeout_s:
            actions.extend(jobend.node_down(state, node, nodestates.NODE_NOT_RESPONDING, now, not_responding=True))
    actions.extend(powersavecontrol.power_tick(state, now))
    actions.extend(state.cap.tick(state, now))
    state.budget.tick(state, state.cap.snap, now)
    state.budget.follow_jobs(state)
    if state.carbon is not None:
        state.carbon.poll(now)
    actions.extend(RunTrigger(trig) for trig in triggerctl.tick(state, now))  # after the nodes' changes above
    return actions


def missed_deadlines(state: ClusterState, now: float) -> None:
    """--deadline, as Slurm: a pending job that can no longer end before its deadline, were it to
    start now and run its time limit (a minute without one), ends DEADLINE, exit code 1."""
    for job_id in list(state.with_deadline):
        job = state.jobs.get(job_id)
        if job is None or job.state != states.PENDING:
            state.with_deadline.discard(job_id)
        elif now + (job.time_limit_min if job.time_limit_min is not None else 1) * 60 > job.request.deadline:
            log.info("job cancelled: it cannot end before its deadline", extra={"job_id": job_id})
            job.state, job.reason, job.exit_code = states.DEADLINE, states.R_DEADLINE, 1
            job.start_time = job.end_time = now
            state.touch(job)
            state.with_deadline.discard(job_id)


def end_overruns(state: ClusterState, now: float) -> list[Action]:
    """Running jobs whose group has used up a budget end TIMEOUT (:func:`wattsched.ledger.overrun`)."""
    snap = acctpolicy.snapshot(state)
    actions: list[Action] = []
    for job_id, why in (ledger.overrun(snap) if snap is not None else {}).items():
        job = state.jobs[job_id]
        if job.timed_out or job.cancelled_by is not None:
            continue
        log.info("job ended: its budget is used up", extra={"job": job_id, "limit": why})
        job.timed_out = True
        state.touch(job)
        actions.extend(jobs.terminate(state, job, now))
    return actions

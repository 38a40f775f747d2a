"""How a job's run ends: its steps closed, its nodes cleaned (COMPLETING until every node and
Epilog says so), its energy awaited, its final state settled; or the run requeued (the job pending
again); and a node going DOWN with what that does to the jobs on it.
"""

from __future__ import annotations

import logging
import signal as signal_mod
from collections.abc import Iterable
from typing import TYPE_CHECKING

from wattsched import hostlist, states
from wattsched.api import JobEvent
from wattsched.controller import jobenergy, mail, resources, statesave
from wattsched.controller.actions import Action, Signal, admin_program
from wattsched.model import Job, Node
from wattsched.nodestates import NodeBase
from wattsched.usage import merge as merge_usage

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")
OOM_SIGNAL = 125  # the signal Slurm records for a job or step its memory limit ended (0:125)


def end(state: ClusterState, job: Job, final: str, exit_code: int, term_signal: int, now: float,
         completing_nodes: list[str]) -> list[Action]:
    """A job's main process is over: record it, and clean up the nodes that may hold tasks."""
    if job.preempted and final == states.CANCELLED:
        final = states.PREEMPTED
    job.exit_code, job.term_signal, job.end_time, job.final_state = exit_code, term_signal, now, final
    for step in job.steps:
        if step.state == states.RUNNING:
            # A step still running when its job ends was killed with it: CANCELLED in Slurm,
            # for a timeout too (the job alone is TIMEOUT); a node failure fails its steps.
            step.state = states.NODE_FAIL if final == states.NODE_FAIL else states.CANCELLED
            step.end_time = now
    state.touch(job)
    if job.start_time and any(state.nodes[n].energy_samples for n in job.alloc.alloc_cpus if n in state.nodes):
        state.energy_due.add(job.job_id)
        job.energy_pending = True
    after: list[Action] = [admin_program(state.config, "epilog", job)] if state.config.epilog_slurmctld else []
    if job.request.mail_type:
        after += mail.ended(state, job)
    if completing_nodes:
        job.state = states.COMPLETING
        job.alloc.completing_nodes = list(completing_nodes)
        return [Signal(job.job_id, list(completing_nodes), signal_mod.SIGKILL, terminate=True), *after]
    finish(state, job)
    return after


def finish(state: ClusterState, job: Job) -> None:
    """Every node is clean: the resources are free. The job keeps COMPLETING until its energy
    is settled, so that the record that carries its final state carries its energy too."""
    if job.request.profile and state.config.acct_gather_profile_type == "acct_gather_profile/hdf5":
        state.profiles_due.append((job.user, job.uid, job.job_id))
    resources.hold(state, job, -1)
    job.alloc.completing_nodes = []
    if job.energy_pending:
        job.state = states.COMPLETING
        state.touch(job)
    else:
        settle(state, job)


def settle(state: ClusterState, job: Job) -> None:
    job.state = job.final_state or states.COMPLETED
    state.touch(job)


def end_settled(state: ClusterState, jobs: Iterable[Job]) -> None:
    """Jobs whose energy is now known (jobenergy.account_energy): those that only awaited it end."""
    for job in jobs:
        if settling(state, job):
            settle(state, job)


def settling(state: ClusterState, job: Job) -> bool:
    """COMPLETING with every node clean: only its energy is awaited (it holds no resources)."""
    return job.state == states.COMPLETING and not job.alloc.completing_nodes and bool(job.final_state)


def node_clean(state: ClusterState, job_id: int, node: str) -> None:
    """An agent confirmed a job has no process left on ``node``."""
    job = state.jobs.get(job_id)
    if job is None or node not in job.alloc.completing_nodes:
        return
    job.alloc.completing_nodes.remove(node)
    if job.state == states.PENDING:
        state.touch(job)
    elif not job.alloc.completing_nodes:
        finish(state, job)
    else:
        state.touch(job)


def batch_ended(state: ClusterState, event: JobEvent, now: float) -> list[Action]:
    job = state.jobs.get(event.job_id)
    if job is not None and event.run < job.restart_count:
        node_clean(state, job.job_id, event.node)  # the end of a run that was requeued
        return []
    if job is None or job.state not in (states.RUNNING,) or job.alloc.batch_host != event.node:
        return []
    if event.oom_killed:  # Slurm's record of a job its memory limit ended: OUT_OF_MEMORY, 0:125
        event = event.model_copy(update={"exit_code": 0, "term_signal": OOM_SIGNAL})
    batch = job.find_step("batch")
    if batch is not None:
        batch.state = states.COMPLETED if event.exit_code == 0 and not event.term_signal else states.FAILED
        if event.oom_killed:
            batch.state = states.OUT_OF_MEMORY
        if job.cancelled_by is not None or job.timed_out:  # Slurm: the batch step was CANCELLED
            batch.state = states.CANCELLED
        batch.exit_code, batch.term_signal = event.exit_code, event.term_signal
        batch.end_time = event.end_time
        batch.tasks = merge_usage(batch.tasks, [t.model_dump() for t in event.tasks])
    if job.cancelled_by is not None:
        final = states.CANCELLED
    elif job.timed_out:
        final = states.TIMEOUT
    elif event.oom_killed:
        final = states.OUT_OF_MEMORY
    elif event.exit_code == 0 and not event.term_signal:
        final = states.COMPLETED
    else:
        final = states.FAILED
    if event.error:  # the script never started: say why where scontrol and sacct users look
        job.reason = event.error
        log.warning("batch job launch failed", extra={"job": job.job_id, "node": event.node,
                                                      "error": event.error})
    # the batch host is clean of the job now, unless its Epilog is still to run (it says when done)
    others = job.node_list if state.config.epilog else [n for n in job.node_list if n != event.node]
    return end(state, job, final, event.exit_code, event.term_signal, now, others)


def node_failed_job(state: ClusterState, job: Job, now: float) -> list[Action]:
    """A node under a job failed: requeue the job if it may be, else end it NODE_FAIL. A job
    already being cancelled or killed at its limit ends as such: it must never run again."""
    others = [n for n in job.node_list if state.nodes[n].schedulable or state.nodes[n].base_state in (
        NodeBase.ALLOCATED, NodeBase.MIXED)]
    live = [n for n in others if not state.nodes[n].not_responding]
    if job.cancelled_by is not None or job.timed_out:
        final = states.TIMEOUT if job.timed_out else states.CANCELLED
        return end(state, job, final, job.exit_code, job.term_signal, now, live)
    if job.request.no_kill and live and not job.configuring and job.alloc.batch_host in live:
        return lose_nodes(state, job, [n for n in job.node_list if n not in live])
    if (job.configuring or (job.request.requeue and state.config.job_requeue)) and not job.request.interactive:
        return requeue_running(state, job, now, states.NODE_FAIL)
    return end(state, job, states.NODE_FAIL, 0, 0, now, live)


def lose_nodes(state: ClusterState, job: Job, lost: list[str]) -> list[Action]:
    """A --no-kill job runs on without its failed nodes, as Slurm's: they leave its allocation (and
    what it held on them goes back), its batch host and the rest keep running it."""
    suspended = job.preempt_suspended, job.suspend_released  # (a suspended job's CPUs are already back)
    resources.hold(state, job, -1)
    for name in lost:
        job.alloc.alloc_cpus.pop(name, None)
        job.alloc.tasks_per_node.pop(name, None)
        job.alloc.alloc_gpus.pop(name, None)
    resources.hold(state, job, +1)
    if any(suspended):
        resources.hold(state, job, -1, only_cpus=True)
        job.preempt_suspended, job.suspend_released = suspended
    job.alloc.nodes_expr = hostlist.compress(job.node_list)
    state.touch(job)
    log.warning("job lost nodes and runs on (--no-kill)", extra={"job": job.job_id, "nodes": ",".join(lost)})
    return []


def node_down(state: ClusterState, node: Node, reason: str, now: float, not_responding: bool = False,
              uid: int = 0) -> list[Action]:
    node.not_responding = node.not_responding or not_responding
    node.base_state, node.reason, node.reason_time, node.reason_uid = NodeBase.DOWN, reason, now, uid
    statesave.node_event(state, node, now, "DOWN")
    actions: list[Action] = []
    for job in list(state.jobs.values()):
        if job.state == states.RUNNING and node.name in job.alloc.alloc_cpus:
            actions.extend(node_failed_job(state, job, now))
        elif node.name in job.alloc.completing_nodes:
            node_clean(state, job.job_id, node.name)
    return actions


def requeue_running(state: ClusterState, job: Job, now: float, cause: str = states.REQUEUED) -> list[Action]:
    """The running job's run ends (recorded as ``cause``: REQUEUED, PREEMPTED or NODE_FAIL, as
    Slurm records it) and the job queues again."""
    nodes = job.node_list
    # the run is cleaned up where it may have processes: a configuring job never ran, a down
    # node will not answer
    live = [] if job.configuring else [n for n in nodes if state.nodes[n].base_state != NodeBase.DOWN
                                       and not state.nodes[n].not_responding]
    record_run(state, job, cause, now)
    notices = mail.requeued(state, job) if job.request.mail_type else []
    resources.hold(state, job, -1)
    reset_for_requeue(state, job, now)
    job.alloc.completing_nodes = live
    return [Signal(job.job_id, nodes, signal_mod.SIGKILL, terminate=True), *notices]


def requeue_completing(state: ClusterState, job: Job, now: float) -> None:
    """An ended job whose nodes are still cleaning up, or whose energy is still awaited, queues
    again: its run is recorded as it ended, with the energy its nodes measured up to then; the
    nodes go on cleaning up, and the job starts again only once they are clean."""
    cleaning = job.alloc.completing_nodes
    record_run(state, job, job.final_state, now)
    if cleaning:
        resources.hold(state, job, -1)
    state.energy_due.discard(job.job_id)
    reset_for_requeue(state, job, now)
    job.alloc.completing_nodes = cleaning


def record_run(state: ClusterState, job: Job, final: str, now: float) -> None:
    """Keep the run a requeue ends as an accounting record of its own, as Slurm's job completion
    logger writes it: its state, its end, its steps and the energy its nodes measured up to their
    latest reading, so that its use counts in fair share, limits and budgets however often the job
    is requeued. (An ended job's record is kept as it ended.) The job then queues under a new
    submit time, the key of its next record."""
    run = job.to_dict()
    if job.state not in states.FINISHED:
        run.update(state=final, final_state=final, end_time=job.end_time or (now if job.start_time else 0.0),
                   energy_pending=False)
        for step in run["steps"]:
            if step["state"] == states.RUNNING:
                step["state"], step["end_time"] = states.CANCELLED, now
        if job.start_time and any(state.nodes[n].energy_samples for n in job.alloc.alloc_cpus if n in state.nodes):
            run["consumed_energy_j"] = round(jobenergy.energies_so_far(state, [job], now)[job.job_id])
    state.journal.ended_runs.append(run)


def reset_for_requeue(state: ClusterState, job: Job, now: float) -> None:
    job.submit_time = max(now, job.submit_time + 1.0)  # Slurm's: never the last record's submit time
    job.state = states.PENDING
    job.reason = states.R_NONE
    job.restart_count += 1
    job.start_time = job.end_time = 0.0
    job.alloc.alloc_cpus, job.alloc.tasks_per_node, job.alloc.alloc_mem_mb, job.alloc.nodes_expr = {}, {}, 0, ""
    job.alloc.alloc_gpus = {}
    job.alloc.batch_host, job.launched, job.final_state, job.configuring = "", False, "", False
    job.cancelled_by, job.timed_out, job.warn_signal_sent, job.stopped = None, False, False, False
    job.preempted, job.preempt_deadline = "", 0.0  # (preempt_suspended: cleared as its resources went back)
    job.capping.cap_slowed, job.capping.cap_freq_before, job.capping.cap_suspended = False, None, False
    job.mail_sent = ()
    job.exit_code = job.term_signal = 0
    job.steps, job.next_step_id, job.alloc.completing_nodes = [], 0, []
    state.touch(job)


def purge(state: ClusterState, job: Job) -> None:
    """An ended job leaves the controller (its record stays in the outbox until accounted; one not
    yet saved as it ended is saved with the purge)."""
    if job.job_id in state.journal.dirty:
        state.journal.gone.append(job.to_dict())
    del state.jobs[job.job_id]
    state.memo.job_changed(job.job_id)
    state.journal.purged.append(job.job_id)
    statesave.release_script(state, job)
    state.submissions.pop((job.uid, job.submit_key), None)

"""One scheduling pass and what starting a job takes: the pure core's decisions applied, GPUs
numbered, resources held, CONFIGURING while powered-down nodes wake or PrologSlurmctld runs,
and the failure rules of prologs (Slurm's).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from wattsched import gres, hostlist, prologs, snapbuild, states
from wattsched.api import JobEvent
from wattsched.controller import jobend, mail, preempting, resources, snapshots, statesave
from wattsched.controller.actions import Action, AdminProgram, Launch, admin_program
from wattsched.controller.powersaving import PowerProgram
from wattsched.model import Job, Step
from wattsched.nodestates import PowerFlag
from wattsched.scheduling import cycle
from wattsched.scheduling.records import Allocation

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")


def schedule(state: ClusterState, now: float) -> list[Action]:
    """One scheduling pass: call the pure core, then apply its decisions. A backfill
    scheduler plans the whole queue every bf_interval; in between, passes are strict."""
    interval = state.config.scheduler_parameters.bf_interval_s
    due = state.plugins.scheduler.backfill and now - state.stats.bf_last_time >= interval
    started = time.perf_counter()
    resumed = preempting.resume(state, now)  # before anything new may take their CPUs
    if not any(j.state == states.PENDING for j in state.jobs.values()):
        # nothing waits, nothing to decide: no snapshot of every node (20,000 on the largest machines,
        # a third of a second). A due backfill cycle still counts, empty, so that backfill keeps its
        # bf_interval cadence: aligned to the next submission instead, it would leave a job stuck
        # behind a blocked head for a whole interval every time
        if due:
            state.stats.backfill_done(now, (time.perf_counter() - started) * 1000, 0, 0, 0)
        state.stats.depth = 0
        return resumed
    snap = snapshots.snapshot(state, now, due)
    decisions = cycle.schedule(snap, state.plugins.priority, state.plugins.scheduler, state.plugins.select,
                               state.memo.queue)
    if due:
        state.stats.backfill_done(now, (time.perf_counter() - started) * 1000, decisions.backfilled,
                                 decisions.backfill_depth, len(snap.pending))
        for job_id, when in decisions.expected_start.items():
            job = state.jobs[job_id]
            if job.expected_start != when:
                job.expected_start = when
                state.memo.job_changed(job_id, request_changed=False)
    for job_id, prio in decisions.priorities.items():
        job = state.jobs[job_id]
        if job.priority != prio:
            job.priority = prio
            state.memo.job_changed(job_id, request_changed=False)
    actions: list[Action] = []
    for job_id, reason in decisions.reasons.items():
        job = state.jobs[job_id]
        if job.reason != reason:
            job.reason = reason
            state.touch(job, request_changed=False)
            if reason == states.R_DEP_NEVER and job.request.mail_type:
                actions.extend(mail.invalid_dependency(state, job))
    for job_id, alloc in decisions.starts:
        job = state.jobs[job_id]
        actions.extend(start(state, job, alloc, now))
        if job.request.mail_type:
            actions.extend(mail.began(state, job))
    if snap.running and snap.accounts is not None:
        actions.extend(preempting.preempt(state, snap, decisions, now))
    state.stats.started += len(decisions.starts)
    actions[:0] = resumed
    state.stats.depth = len(snap.pending)
    return actions


def energy_policy(state: ClusterState, job: Job) -> str:
    """The energy policy a job runs under: --energy-policy, else its QOS's EnergyPolicy, its
    partition's, the cluster's; monitoring whatever they say when the user pinned --cpu-freq (the
    user wins)."""
    if job.request.cpu_freq:
        return "monitoring"
    qos = state.shares.qos.get(job.qos)
    part = next((p for p in state.config.partitions if p.name == job.partition), None)
    return (job.energy.energy_policy or (qos.energy_policy if qos else "") or (part.energy_policy if part else "")
            or state.config.energy_policy)


def start(state: ClusterState, job: Job, alloc: Allocation, now: float) -> list[Action]:
    job.state = states.RUNNING
    job.reason = states.R_NONE
    job.start_time = now
    job.preempted_by = 0
    job.expected_start = 0.0
    job.capping.cpu_freq_khz = None if alloc.limited else alloc.cpu_freq_khz
    job.capping.start_limit_khz = alloc.cpu_freq_khz if alloc.limited else None
    if job.capping.start_limit_khz is not None:  # its nodes held to what fits (sent with the allocation too)
        for name in alloc.cpus:
            node = state.nodes[name]
            watts = snapbuild.limit_watts(node, job.capping.start_limit_khz)
            node.balance_watts = watts if node.balance_watts is None else min(node.balance_watts, watts)
        state.journal.meta_dirty = True
    job.capping.admit_watts = alloc.node_watts or 0.0
    job.energy.energy_policy = energy_policy(state, job)
    energy = job.energy
    energy.policy_freq_khz, energy.sig_reports, energy.pred_time_factor, energy.pred_energy_factor = 0, 0, 0.0, 0.0
    job.alloc.alloc_cpus = dict(alloc.cpus)
    job.alloc.nodes_expr = hostlist.compress(alloc.cpus)
    job.alloc.tasks_per_node = dict(alloc.tasks)
    if job.request.overcommit:  # its CPUs are one task's a node: its tasks go over the nodes in blocks, as Slurm's
        names = list(alloc.cpus)
        share, extra = divmod(job.request.ntasks, len(names))
        job.alloc.tasks_per_node = {name: share + (index < extra) for index, name in enumerate(names)}
    if not job.request.ntasks_set:  # a node range given more nodes than its minimum: a task on each, as Slurm's
        job.request = replace(job.request, ntasks=max(job.request.ntasks, sum(alloc.tasks.values())))
    job.alloc.alloc_mem_mb = max(alloc.mem_mb.values(), default=0)
    job.alloc.alloc_gpus = {}
    for name, kinds in alloc.gpus.items():
        node = state.nodes[name]
        chosen: list[int] = []
        for kind, count in kinds.items():  # the policy counted by type: the lowest free numbers of each
            chosen += gres.pick(node.gpus, [*node.alloc_gpus, *chosen], kind, count)
        job.alloc.alloc_gpus[name] = sorted(chosen)
    job.alloc.batch_host = next(iter(alloc.cpus))
    job.launched = False
    resources.hold(state, job, +1)
    state.touch(job)
    waking = [n for n in alloc.cpus if state.nodes[n].power in (PowerFlag.POWERED_DOWN, PowerFlag.POWERING_UP)]
    if state.config.prolog_slurmctld:  # CONFIGURING until it succeeds, as in Slurm
        job.prolog_slurmctld = True
        return [*configure(state, job, waking, now), admin_program(state.config, "prolog", job)]
    if waking:
        return configure(state, job, waking, now)
    if job.request.interactive:
        job.launched = True
        return [Launch(job)]  # its nodes' agents still set its CPU frequency and profile it
    job.steps.append(Step(step_id="batch", name="batch", nodes=[job.alloc.batch_host], ntasks=1,
                          cpus=job.alloc.alloc_cpus[job.alloc.batch_host], start_time=now))
    return [Launch(job)]


def configure(state: ClusterState, job: Job, waking: list[str], now: float) -> list[Action]:
    """Hold a job CONFIGURING while its powered-down nodes are woken (Slurm's power save)."""
    assert state.power_saving is not None
    job.configuring = True
    if not job.request.interactive:
        job.steps.append(Step(step_id="batch", name="batch", nodes=[job.alloc.batch_host], ntasks=1,
                              cpus=job.alloc.alloc_cpus[job.alloc.batch_host], start_time=now))
    asleep = [n for n in waking if state.nodes[n].power == PowerFlag.POWERED_DOWN]
    for name in asleep:
        state.power_saving.begin_resume(state.nodes[name], now, job.job_id)
        statesave.node_event(state, state.nodes[name], now, PowerFlag.POWERING_UP, f"job {job.job_id}")
    return [PowerProgram("resume", asleep)] if asleep else []


def admin_program_done(state: ClusterState, program: AdminProgram, code: int, error: str, now: float) -> list[Action]:
    """PrologSlurmctld's end: the job launches once its nodes are up; on failure a batch job is
    requeued held and an interactive one ends (Slurm's rules). EpilogSlurmctld's failure is logged."""
    job = state.jobs.get(program.job_id)
    if code:
        log.error(f"{program.kind}_slurmctld failed", extra={"job": program.job_id, "error": error})
    if program.kind != "prolog" or job is None or not job.prolog_slurmctld or job.state != states.RUNNING:
        return []
    job.prolog_slurmctld = False
    state.touch(job)
    if not code:
        return configured(state, now)
    return prolog_failed(state, job, now)


def prolog_failed(state: ClusterState, job: Job, now: float) -> list[Action]:
    """A prolog failed: a batch job is requeued and held (JobHeldAdmin); an interactive one fails."""
    if job.request.interactive:
        job.reason = prologs.PROLOG_ERROR
        return jobend.end(state, job, states.FAILED, 1, 0, now, [] if job.configuring else job.node_list)
    actions = jobend.requeue_running(state, job, now)
    job.hold, job.reason = "admin", states.R_HELD_ADMIN
    return actions


def agent_script_ended(state: ClusterState, event: JobEvent, now: float) -> list[Action]:
    """A node's Prolog failed, or its Epilog ended: the node is clean of the job once its Epilog
    is done (it stays COMPLETING until then, as in Slurm); a failed one drains the node, and
    after a Prolog the job is requeued held."""
    if event.step_id == "epilog":
        jobend.node_clean(state, event.job_id, event.node)
        if not event.exit_code:
            return []
    node = state.nodes.get(event.node)
    reason = prologs.PROLOG_ERROR if event.step_id == "prolog" else prologs.EPILOG_ERROR
    if node is not None and not node.drain:
        node.drain, node.reason, node.reason_time, node.reason_uid = True, reason, now, 0
        statesave.node_event(state, node, now, "DRAIN", reason)
        state.journal.meta_dirty = True
    job = state.jobs.get(event.job_id)
    if event.step_id != "prolog" or job is None or job.state != states.RUNNING or event.run != job.restart_count:
        return []
    return prolog_failed(state, job, now)


def configured(state: ClusterState, now: float) -> list[Action]:
    """Launch the CONFIGURING jobs whose nodes are all up and whose PrologSlurmctld succeeded;
    their run starts now."""
    actions: list[Action] = []
    for job in state.jobs.values():
        if job.configuring and not job.prolog_slurmctld and job.state == states.RUNNING and all(
                state.nodes[n].power not in (PowerFlag.POWERED_DOWN, PowerFlag.POWERING_UP)
                for n in job.alloc.alloc_cpus):
            job.configuring = False
            job.start_time = now
            for step in job.steps:
                step.start_time = now
            state.touch(job)
            if job.request.interactive:
                job.launched = True
            actions.append(Launch(job))
    return actions

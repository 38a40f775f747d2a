"""A job's requests from its user or an administrator: submission (and --test-only), updates,
hold and release, requeue, cancellation and signals, suspend and resume.
"""

from __future__ import annotations

import grp
import pwd
import signal as signal_mod
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from wattsched import limits, mailtypes, memos, snapbuild, states, tresbind
from wattsched.api import JobSubmit, JobUpdate, WillRun
from wattsched.auth import Identity
from wattsched.controller import acctpolicy, jobend, jobsubmit, permissions, resources, snapshots, statesave
from wattsched.controller import submit as submit_mod
from wattsched.controller.actions import Action, Freeze, Refused, Signal
from wattsched.model import Job
from wattsched.scheduling.candidates import feasible
from wattsched.scheduling.cycle import schedule

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


def submit(state: ClusterState, req: JobSubmit, who: Identity, now: float) -> list[Job]:
    """The jobs of a submission, new; or, when the same user sent the same submission before (its
    key: a command retrying on a backup controller), the jobs that one made."""
    if req.submit_key and (made := state.submissions.get((who.uid, req.submit_key))):
        return [state.jobs[j] for j in made if j in state.jobs]
    if req.nice < 0 and not permissions.is_admin(state, who):
        raise Refused("Access/permission denied: only an administrator may set a negative nice value", 403)
    gid, group = primary_group(who.uid)
    req = acctpolicy.settle(state, with_account(state, jobsubmit.on_submit(state, req, who, gid), who), who)
    try:
        jobs = submit_mod.build_jobs(req, who, gid, group, state.config, now, state.next_job_id,
                                     snapshots.node_snaps(state), state.plugins.select,
                                     snapshots.partition_snaps(state), state.resv.by_name)
    except submit_mod.SubmitError as exc:
        raise Refused(str(exc)) from exc
    check_submit_limit(state, who, len(jobs))
    acctpolicy.check_submit(state, jobs)
    if len(state.jobs) + len(jobs) > state.config.max_job_count:
        purge_ended(state, len(state.jobs) + len(jobs) - state.config.max_job_count)
    if len(state.jobs) + len(jobs) > state.config.max_job_count:
        raise Refused(f"Slurm temporarily unable to accept job (MaxJobCount={state.config.max_job_count} "
                      "reached)", 503)
    state.next_job_id = jobs[-1].job_id + 1
    state.journal.meta_dirty = True
    for job in jobs:
        expect(state, job)
        state.jobs[job.job_id] = job
        if job.request.deadline:
            state.with_deadline.add(job.job_id)
        state.touch(job)
    statesave.save_script(state, jobs, submit_mod.job_script(req))
    if req.submit_key:
        state.submissions[(who.uid, req.submit_key)] = [job.job_id for job in jobs]
    return jobs


def expect(state: ClusterState, job: Job) -> None:
    """What the same job's earlier runs let expect of it (wattsched.prediction), as of submission."""
    known = state.shares.predictions.get(job.energy.history_key)
    if known is not None:
        energy = job.energy
        energy.exp_elapsed_s, energy.exp_energy_j, energy.exp_watts = known.elapsed_s, known.joules, known.watts


def withdraw(state: ClusterState, submitted: list[Job]) -> None:
    """Undo a submission whose state could not be saved: its jobs never existed (their ids stay used)."""
    for job in submitted:
        state.submissions.pop((job.uid, job.submit_key), None)
        state.jobs.pop(job.job_id, None)
        state.journal.dirty.discard(job.job_id)
        state.memo.job_changed(job.job_id)
        statesave.release_script(state, job)


def check_submit_limit(state: ClusterState, who: Identity, adding: int) -> None:
    """MaxSubmitJobsPerUser: a user's pending and running jobs (array tasks each count), with these."""
    limit = state.config.max_submit_jobs_per_user
    if not limit or permissions.is_admin(state, who):
        return
    active = sum(1 for job in state.jobs.values() if job.uid == who.uid and job.state not in states.FINISHED)
    if active + adding > limit:
        raise Refused("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")


def purge_ended(state: ClusterState, wanted: int) -> None:
    """Make room under MaxJobCount: ended jobs leave the controller's memory before MinJobAge, those
    that ended first going first, so no one is refused while the table holds only history (their
    accounting records stay in the outbox until written)."""
    ended = sorted((job for job in state.jobs.values() if job.state in states.FINISHED and job.end_time),
                   key=lambda job: job.end_time)
    for job in ended[:wanted]:
        jobend.purge(state, job)


def will_run(state: ClusterState, req: JobSubmit, who: Identity, now: float) -> tuple[Job, WillRun]:
    """sbatch --test-only: the job as it would be, and when and where the scheduler would start
    it (now, or at its place in the backfill plan), from a pass of the pure core over the
    current snapshot with the job added. Nothing is kept."""
    gid, group = primary_group(who.uid)
    req = acctpolicy.settle(state, with_account(state, jobsubmit.on_submit(state, req, who, gid), who), who)
    try:
        job = submit_mod.build_jobs(req, who, gid, group, state.config, now, state.next_job_id,
                                    snapshots.node_snaps(state), state.plugins.select, snapshots.partition_snaps(state),
                                    state.resv.by_name)[0]
    except submit_mod.SubmitError as exc:
        raise Refused(str(exc)) from exc
    try:
        snap = snapshots.snapshot(state, now, backfill_due=True)
        snap = replace(snap, pending=(*snap.pending, snapshots.request(state, job)))
        decisions = schedule(snap, state.plugins.priority, state.plugins.scheduler,
                             state.plugins.select, memos.QueueMemo())
    finally:
        state.memo.requests.pop(job.job_id, None)
    expect(state, job)
    known = state.shares.predictions.get(job.energy.history_key)
    expected = {"expected_elapsed_s": job.energy.exp_elapsed_s, "expected_energy_j": job.energy.exp_energy_j,
                "expected_watts": job.energy.exp_watts, "expected_runs": known.runs if known else 0}
    started = dict(decisions.starts).get(job.job_id)
    if started is not None:
        return job, WillRun(start_time=now, nodes=list(started.cpus), cpus=sum(started.cpus.values()),
                            partition=job.partition, **expected)
    cpus = job.request.ntasks * job.request.cpus_per_task
    return job, WillRun(start_time=decisions.expected_start.get(job.job_id), cpus=cpus,
                        partition=job.partition, reason=decisions.reasons.get(job.job_id, job.reason), **expected)


def with_account(state: ClusterState, req: JobSubmit, who: Identity) -> JobSubmit:
    """The job's account: as asked, else the user's default, in lower case as Slurm keeps accounts
    (and wckeys); with AccountingStorageEnforce=associations, only an account the user is associated with."""
    account = (req.account or state.shares.default_account.get(who.user, "")).lower()
    if "associations" in state.config.accounting_storage_enforce and \
            account not in state.shares.user_accounts.get(who.user, ()):
        raise Refused("Invalid account or account/partition combination specified")
    wckey = req.wckey.lower()
    return req.model_copy(update={"account": account, "wckey": wckey}) \
        if (account, wckey) != (req.account, req.wckey) else req


def cancel(state: ClusterState, jobs: Iterable[Job], who: Identity, sig: int | None, batch_only: bool,
           now: float, full: bool = False, by_task: frozenset[int] = frozenset()) -> list[Action]:
    """scancel: cancel the jobs, or send them ``sig``: as Slurm's, to their steps alone, to the
    batch shell alone (``batch_only``) or to both (``full``).

    A pending array task cancelled by its index (``by_task``: ``12_7``) leaves the controller at
    once while other tasks of its array still wait, as Slurm's takes it out of the array's pending
    record: no job is left to show (its record, CANCELLED, still goes to accounting)."""
    jobs = list(jobs)
    for job in jobs:
        permissions.check_owner(state, job, who)
    waiting = _pending_tasks(state, {j.array_job_id for j in jobs if j.job_id in by_task}) if by_task else {}
    actions: list[Action] = []
    for job in jobs:
        if job.state in states.FINISHED:
            continue
        if sig is not None and sig not in (signal_mod.SIGKILL,):
            if job.state == states.RUNNING:
                actions.append(Signal(job.job_id, job.node_list, sig, batch_only, full=full))
                if sig in (signal_mod.SIGSTOP, signal_mod.SIGCONT) and not batch_only:
                    job.stopped = sig == signal_mod.SIGSTOP  # Slurm's JOB_STOPPED flag
                    state.touch(job)
            continue
        if job.state == states.PENDING:
            job.state = states.CANCELLED
            job.cancelled_by = who.uid
            job.start_time = job.end_time = now
            state.touch(job)
            if job.job_id in by_task and job.array_task_id is not None:
                waiting[job.array_job_id] -= 1  # (counted pending above)
                if not job.restart_count and waiting[job.array_job_id] > 0:
                    jobend.purge(state, job)
        elif job.state == states.RUNNING and job.cancelled_by is None:
            job.cancelled_by = who.uid
            state.touch(job)
            if job.suspended_at:  # thawed first: a frozen process takes no SIGTERM
                actions.extend(thaw(state, job, now))
            actions.extend(terminate(state, job, now))
    return actions


def _pending_tasks(state: ClusterState, arrays: set[int]) -> dict[int, int]:
    """How many tasks of each of ``arrays`` are pending (one pass over the jobs)."""
    counts: dict[int, int] = {}
    for job in state.jobs.values():
        if job.array_job_id in arrays and job.array_task_id is not None and job.state == states.PENDING:
            counts[job.array_job_id] = counts.get(job.array_job_id, 0) + 1
    return counts


def suspend(state: ClusterState, jobs: Iterable[Job], resume: bool, who: Identity, now: float) -> list[Action]:
    """scontrol suspend|resume (operators and administrators only, as in Slurm): a suspended
    job's processes are frozen, its time limit does not run, and its CPUs go back for other jobs
    while it keeps its memory and GPUs (Slurm's indefinite suspend). It takes its CPUs again when
    resumed, whoever runs on them then, as Slurm's does."""
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    actions: list[Action] = []
    jobs = list(jobs)
    for job in jobs:
        if job.state != states.RUNNING or job.configuring or job.cancelled_by is not None:
            raise Refused(f"Job {job.display_id} is not running", 409)
        if resume and not job.suspended_at:
            raise Refused(f"Job {job.display_id} is not suspended", 409)
        if not resume and job.suspended_at:
            raise Refused(f"Job {job.display_id} is already suspended", 409)
    for job in jobs:
        if resume:
            if job.suspend_released:
                job.suspend_released = False
                resources.hold(state, job, +1, only_cpus=True)
            actions.extend(thaw(state, job, now))
        else:
            job.suspended_at = now
            if not job.preempt_suspended:
                job.suspend_released = True
                resources.hold(state, job, -1, only_cpus=True)
            state.touch(job)
            actions.append(Freeze(job.job_id, job.node_list, True))
    return actions


def thaw(state: ClusterState, job: Job, now: float) -> list[Action]:
    job.suspended_s += now - job.suspended_at
    job.suspended_at = 0.0
    state.touch(job)
    return [Freeze(job.job_id, job.node_list, False)]


def terminate(state: ClusterState, job: Job, now: float) -> list[Action]:
    """Kill a running job everywhere; allocations with no batch script end right away."""
    if job.request.interactive or not job.launched:
        final = states.TIMEOUT if job.timed_out else states.CANCELLED
        return jobend.end(state, job, final, job.exit_code, job.term_signal, now, job.node_list)
    return [Signal(job.job_id, job.node_list, signal_mod.SIGTERM, terminate=True)]


def update(state: ClusterState, jobs: Iterable[Job], upd: JobUpdate, who: Identity, now: float) -> None:
    jobs = list(jobs)
    admin = permissions.is_admin(state, who)
    for job in jobs:
        permissions.check_owner(state, job, who)
    # the site's job_modify rules see each job's update first: any refusal changes nothing
    updates = [(job, jobsubmit.on_modify(state, job, upd, who)) for job in jobs]
    if any(u.priority is not None or u.hold == "admin" for _, u in updates) and not admin:
        raise Refused("Access/permission denied", 403)
    for job, upd in updates:
        if job.state in states.FINISHED and (upd.hold or upd.release or upd.time_limit or upd.priority):
            raise Refused("Job has already finished", 409)
        if upd.hold is not None:
            if job.state != states.PENDING:
                raise Refused("Job is no longer pending execution", 409)
            job.hold = upd.hold
        if upd.release:
            if job.hold == "admin" and not admin:
                raise Refused("Access/permission denied", 403)
            job.hold = ""
        if upd.time_limit is not None:
            update_time_limit(state, job, upd.time_limit, admin)
        if upd.priority is not None:
            job.admin_priority = job.priority = upd.priority  # shown at once, as Slurm does
        if upd.nice is not None:
            if upd.nice < 0 and not admin:
                raise Refused("Access/permission denied", 403)
            job.nice = upd.nice
        if upd.name is not None:
            job.name = upd.name
        if upd.comment is not None:
            job.comment = upd.comment
        if upd.admin_comment is not None:
            if not admin:
                raise Refused("Access/permission denied", 403)
            job.admin_comment = upd.admin_comment
        if upd.partition is not None and upd.partition != job.partition:
            if job.state != states.PENDING:
                raise Refused("Job is no longer pending execution", 409)
            move_to_partition(state, job, upd.partition, admin)
        if upd.tres_bind is not None:
            if not tresbind.valid(upd.tres_bind):
                raise Refused(submit_mod.INVALID_TRES, 400)
            job.request = replace(job.request, tres_bind=upd.tres_bind)
        if upd.licenses is not None and upd.licenses != job.request.licenses:
            update_licenses(state, job, upd.licenses, admin)
        if upd.mail_type is not None or upd.mail_user is not None:
            try:
                types = submit_mod.check_mail(upd.mail_type or "", upd.mail_user or "")
            except submit_mod.SubmitError as exc:
                raise Refused(str(exc)) from exc
            if upd.mail_type is not None:
                job.request = replace(job.request, mail_type=types)
            if upd.mail_user is not None:
                recipient = mailtypes.recipient(upd.mail_user or job.user, state.config.mail_domain)
                job.request = replace(job.request, mail_user=recipient)
        state.touch(job)


def update_licenses(state: ClusterState, job: Job, spec: str, admin: bool) -> None:
    """A job's licenses changed, as Slurm's: a pending job's by its owner; a running job's by an
    administrator (who may so hold more than the totals for a while), or cleared by its owner."""
    try:
        submit_mod.check_licenses(spec, state.config)
    except submit_mod.SubmitError as exc:
        raise Refused(str(exc)) from exc
    if job.state == states.RUNNING:
        if spec and not admin:
            raise Refused("Access/permission denied", 403)
    elif job.state != states.PENDING:
        raise Refused("Job is not pending nor running", 409)
    job.request = replace(job.request, licenses=spec)


def move_to_partition(state: ClusterState, job: Job, name: str, admin: bool) -> None:
    """A pending job moved to another partition is checked as a submission to it would be (Slurm's
    update path, _valid_job_part): the partition's state, its AllowGroups, AllowAccounts/DenyAccounts
    and AllowQos/DenyQos, the job fitting its nodes, and (for users) the submit limits that the
    partition's QOS sets. Nothing changes on a refusal."""
    partitions = snapshots.partition_snaps(state)
    try:
        part = submit_mod.partition_open(name, state.config, partitions)
        submit_mod.check_partition_access(part, job.account, Identity(job.uid, job.user), job.gid, job.reservation)
    except submit_mod.SubmitError as exc:
        raise Refused(str(exc)) from exc
    if state.shares.qos and job.qos and not acctpolicy.qos_allowed(part, job.qos):
        raise Refused(limits.INVALID_QOS)
    moved = Job.from_dict(dict(job.to_dict(), partition=name))
    if not feasible(snapbuild.request(moved, whole_nodes=part.whole_nodes), partitions[name],
                    snapshots.node_snaps(state), state.plugins.select, state.config.def_mem_per_cpu_mb):
        raise Refused("Requested node configuration is not available")
    if not admin:
        acctpolicy.check_submit(state, [moved], skip=job.job_id)
    job.partition = name


def update_time_limit(state: ClusterState, job: Job, text: str, admin: bool) -> None:
    from wattsched import timefmt

    current = job.time_limit_min
    sign = text[:1] if text[:1] in "+-" else ""
    try:
        minutes = timefmt.parse_duration_min(text[1:] if sign else text)
    except timefmt.TimeFormatError as exc:
        raise Refused(str(exc)) from exc
    if sign:  # TimeLimit=+N / -N: relative to the current limit, as scontrol allows
        if minutes is None or current is None:
            raise Refused("Invalid time limit: a relative change needs a finite limit")
        minutes = max(0, current + minutes) if sign == "+" else max(1, current - minutes)
    increase = (minutes is None and current is not None) or (
        minutes is not None and current is not None and minutes > current)
    if increase and not admin:
        raise Refused("Access/permission denied", 403)
    job.time_limit_min = minutes


def requeue(state: ClusterState, jobs: Iterable[Job], who: Identity, now: float) -> list[Action]:
    """Running jobs end and queue again, ended ones queue again, also while their nodes are still
    cleaning up (Slurm's rule for a completing job). Every job is checked before any is
    touched: an ended job that comes back counts as a submission against the user's submit limits
    (MaxSubmitJobsPerUser, the QOS and association submit limits), so cancelling and requeueing
    never queues more than submitting could."""
    jobs = list(jobs)
    for job in jobs:
        permissions.check_owner(state, job, who)
        if job.request.interactive:
            raise Refused("Only batch jobs are accepted or processed", 400)
        if job.state == states.PENDING:
            raise Refused("Job is pending execution", 409)
    returning = [job for job in jobs if job.state in states.FINISHED]
    if returning:
        check_submit_limit(state, who, len(returning))
        if not permissions.is_admin(state, who):
            acctpolicy.check_submit(state, returning)
    actions: list[Action] = []
    for job in jobs:
        if job.state == states.RUNNING:
            actions.extend(jobend.requeue_running(state, job, now))
        elif job.state == states.COMPLETING:
            jobend.requeue_completing(state, job, now)
        else:  # its record stays as it ended, whether or not accounting has it yet
            jobend.record_run(state, job, job.state, now)
            jobend.reset_for_requeue(state, job, now)
    return actions


def launched(state: ClusterState, job_id: int) -> None:
    job = state.jobs.get(job_id)
    if job is not None and not job.launched and job.state == states.RUNNING:
        job.launched = True
        state.touch(job)


def primary_group(uid: int) -> tuple[int, str]:
    """The uid's primary gid and group name (cached: each lookup reads the user database)."""
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = uid
    try:
        return gid, grp.getgrgid(gid).gr_name
    except KeyError:
        return gid, str(gid)

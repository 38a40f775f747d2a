"""Whether a pending job may be considered now, and Slurm's reason when not: holds, begin time,
deadline, dependencies (the --dependency grammar and its states), reservation, partition state
and limits. The array throttle, which changes within a pass, is the throttle's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from wattsched import states
from wattsched.scheduling.records import JobBrief, JobRequest, Snapshot

if TYPE_CHECKING:
    pass


def ineligibility(job: JobRequest, snapshot: Snapshot) -> str | None:
    """The reason a pending job may not be considered now, or None if it may.

    The array throttle is not checked here: it changes as a pass starts tasks
    (see :class:`Throttle`)."""
    if job.hold:
        return states.R_HELD_ADMIN if job.hold == "admin" else states.R_HELD_USER
    if job.begin_time > snapshot.now:
        return states.R_BEGIN
    if job.deadline and snapshot.now + (job.time_limit_min if job.time_limit_min is not None else 1) * 60 \
            > job.deadline:  # it would end after its deadline: never started (the shell removes it)
        return states.R_DEADLINE
    if job.dependency:
        verdict = dependency_state(job, snapshot.jobs)
        if verdict is not None:
            return verdict
    if job.reservation:
        resv = snapshot.reservations.get(job.reservation)
        if resv is None:
            return states.R_RESV_DELETED
        if resv.start > snapshot.now and "FLEX" not in resv.flags:
            return states.R_RESERVATION
    part = snapshot.partitions.get(job.partition)
    if part is None or part.state != "UP":
        return states.R_PART_DOWN
    if part.max_time_min is not None and (job.time_limit_min is None or job.time_limit_min > part.max_time_min) \
            and not qos_flag(snapshot, job, "PartitionTimeLimit"):  # a QOS that may go over MaxTime
        return states.R_PART_TIME
    if (part.max_nodes is not None and job.nodes_min > part.max_nodes) or job.nodes_min < part.min_nodes:
        return states.R_PART_NODES
    return None


def qos_flag(snapshot: Snapshot, job: JobRequest, flag: str) -> bool:
    """Whether the job's QOS has this flag (wattsched.limits.QOS_FLAGS)."""
    accounts = snapshot.accounts
    qos = accounts.qos.get(job.qos) if accounts is not None and job.qos else None
    return qos is not None and flag in qos.flags


_DEP_ITEM = re.compile(r"^(after|afterany|afterok|afternotok|aftercorr|singleton)((?::\d+(?:_\d+)?(?:\+\d+)?)*)$")


def parse_dependency(text: str) -> tuple[str, list[tuple[str, list[tuple[str, int]]]]]:
    """Parse ``--dependency``: returns the joiner (',' = all, '?' = any) and (type, [(id, minutes)])."""
    text = text.strip()
    joiner = "?" if "?" in text else ","
    items = []
    for part in text.split(joiner):
        match = _DEP_ITEM.match(part)
        if not match or (match.group(1) != "singleton" and not match.group(2)):
            raise ValueError(f"Job dependency problem: invalid dependency '{part}'")
        targets = []
        for target in filter(None, match.group(2).split(":")):
            job_ref, _, delay = target.partition("+")
            targets.append((job_ref, int(delay or 0)))
        items.append((match.group(1), targets))
    return joiner, items


def _targets(ref: str, jobs: Mapping[int, JobBrief]) -> list[JobBrief]:
    """The jobs a dependency reference names: one job, or every task of an array."""
    if "_" in ref:
        array_id, task = ref.split("_", 1)
        return [b for b in jobs.values() if b.array_job_id == int(array_id) and str(b.array_task_id) == task]
    job_id = int(ref)
    brief = jobs.get(job_id)
    tasks = [b for b in jobs.values() if b.array_job_id == job_id] if brief is None or brief.array_job_id \
        else []
    if tasks:
        return tasks
    return [brief] if brief else []


def dependency_state(job: JobRequest, jobs: Mapping[int, JobBrief]) -> str | None:
    """None when the job's dependencies are satisfied, else Dependency or DependencyNeverSatisfied."""
    try:
        joiner, items = parse_dependency(job.dependency)
    except ValueError:
        return states.R_DEP_NEVER
    verdicts = [_item_state(kind, targets, job, jobs) for kind, targets in items]
    if joiner == "?":
        if any(v is None for v in verdicts):
            return None
        return states.R_DEP_NEVER if all(v == states.R_DEP_NEVER for v in verdicts) else states.R_DEPENDENCY
    if any(v == states.R_DEP_NEVER for v in verdicts):
        return states.R_DEP_NEVER
    return states.R_DEPENDENCY if any(v is not None for v in verdicts) else None


def _item_state(kind: str, targets: list[tuple[str, int]], job: JobRequest,
                jobs: Mapping[int, JobBrief]) -> str | None:
    if kind == "singleton":
        for other in jobs.values():
            if other.job_id != job.job_id and other.user == job.user and other.name == job.name \
                    and other.state in (states.RUNNING, states.COMPLETING):
                return states.R_DEPENDENCY
        return None
    for ref, _delay in targets:
        briefs = _targets(ref, jobs)
        if not briefs:
            # A job that left the controller's memory finished long ago; Slurm treats the
            # dependency as satisfied for 'after'/'afterany' and unknown otherwise.
            if kind in ("afterok", "afternotok", "aftercorr"):
                return states.R_DEP_NEVER
            continue
        for brief in briefs:
            verdict = _one_target(kind, brief)
            if verdict is not None:
                return verdict
    return None


def _one_target(kind: str, brief: JobBrief) -> str | None:
    done = brief.state in states.FINISHED
    if kind == "after":
        return None if brief.state != states.PENDING else states.R_DEPENDENCY
    if not done:
        return states.R_DEPENDENCY
    succeeded = brief.state == states.COMPLETED and brief.exit_code == 0
    if kind in ("afterok", "aftercorr"):
        return None if succeeded else states.R_DEP_NEVER
    if kind == "afternotok":
        return None if not succeeded else states.R_DEP_NEVER
    return None  # afterany

"""One scheduling pass: the priority plugin orders the pending jobs, eligibility gives the reasons
of those that may not be considered, and the scheduler plugin walks the rest, asking the select
plugin for nodes under the throttle. Nothing here reads the clock, the network or a database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from wattsched import states
from wattsched.scheduling.eligibility import ineligibility
from wattsched.scheduling.records import Decisions, JobBrief, JobRequest, PartitionSnap, Snapshot
from wattsched.scheduling.throttle import Throttle

if TYPE_CHECKING:
    from wattsched.memos import QueueMemo
    from wattsched.scheduling.plugins import PriorityPlugin, SchedulerPlugin, SelectPlugin


def schedule(snapshot: Snapshot, priority: PriorityPlugin, scheduler: SchedulerPlugin,
             select: SelectPlugin, memo: QueueMemo | None = None) -> Decisions:
    """Run one scheduling pass over ``snapshot`` and return what to start and why others wait.
    A shell that calls it pass after pass may keep a :class:`QueueMemo` for it; the decisions'
    priorities are then a view of the memo's, good until the next pass."""
    if memo is not None and priority.static:
        prio, order, ineligible = memo.update(snapshot, priority)
    else:
        prio = priority.priorities(snapshot)
        order = sorted(snapshot.pending, key=lambda j: (-tier(snapshot.partitions, j), -prio.get(j.job_id, 0),
                                                        j.submit_time, j.job_id))
        ineligible = {job.job_id: reason for job in order if (reason := ineligibility(job, snapshot)) is not None}
    decisions = Decisions(priorities=prio)
    throttle = Throttle(_running_per_array(snapshot.jobs), snapshot.accounts, snapshot.now, snapshot.fairshare,
                        snapshot.licenses)
    scheduler.plan(snapshot, order, ineligible, select, throttle, decisions)
    return decisions


def tier(partitions: Mapping[str, PartitionSnap], job: JobRequest) -> int:
    """The PriorityTier of the job's partition (jobs of a higher tier are scheduled first)."""
    part = partitions.get(job.partition)
    return part.priority_tier if part is not None else 1


def _running_per_array(jobs: Mapping[int, JobBrief]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for brief in jobs.values():
        if brief.array_job_id and brief.state in (states.RUNNING, states.COMPLETING):
            counts[brief.array_job_id] = counts.get(brief.array_job_id, 0) + 1
    return counts

"""sched/builtin: strict priority order (FIFO under priority/basic).

Pending jobs are considered highest priority first. A job that is eligible but finds no
nodes gets pending reason ``Resources`` and blocks its partition: no lower-priority job in
that partition starts in this pass (they show ``Priority``), so nothing ever overtakes a
blocked higher-priority job. Jobs of an advanced reservation block only the other jobs of
that reservation, since they run on its nodes alone. Ineligible jobs (held, waiting on a
dependency, a begin time or their reservation, over a partition limit) keep their own reason
and block nothing, as in Slurm. Under a PowerCap, a job whose nodes would take the cluster over
the cap (or a planned cap) stays pending with PowerNotAvail (PowerReserved) and the next job is
tried, as in the power-capping prototype (Hautreux 2013). As Slurm's main scheduler, a pass looks at
most at ``default_queue_depth`` eligible jobs, those in a blocked partition included, and leaves
the rest with their reason until a later pass (backfill looks deeper, ``bf_max_job_test``); so
a pass costs the same however long the queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from wattsched import states
from wattsched.confvalues import SchedulerParams
from wattsched.memos import NodeMemo
from wattsched.plugins.sched.plainplanner import PlainLevels
from wattsched.plugins.sched.planner import Levels, NowLevels, Planner
from wattsched.scheduling.candidates import unplaced_reason
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import Decisions, JobRequest, Snapshot, job_end
from wattsched.scheduling.throttle import Throttle


class BuiltinScheduler:
    """Start jobs in priority order until one cannot start."""

    backfill = False  # strict at every pass: running jobs' ends are not needed

    def __init__(self, params: SchedulerParams | None = None, nodes: NodeMemo | None = None, plain: bool = False):
        """``plain``: plan over the plain timeline (PlainLevels), the test oracle."""
        self.params = params or SchedulerParams()
        self.nodes = nodes if nodes is not None else NodeMemo()  # the backfill scheduler shares its own
        self.plain = plain

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None:
        planner = Planner(snapshot, select, self.nodes, self._levels)
        blocked: set[tuple[str, str]] = set()
        depth = 0
        for job in order:
            reason = ineligible.get(job.job_id)
            if reason is not None:
                decisions.reasons[job.job_id] = reason
                continue
            if (job.array_throttle or throttle.limits_on or job.licenses) \
                    and (refusal := throttle.refusal(job)) is not None:
                decisions.reasons[job.job_id] = refusal  # (most jobs are in no throttled array, want no license)
                continue
            if depth >= self.params.default_queue_depth:
                # Slurm's "already tested N jobs, breaking out": the rest keep their reasons, but
                # for the ineligible ones, whose reasons are their own
                decisions.reasons.update(ineligible)
                break
            depth += 1
            if (job.partition, job.reservation) in blocked:
                decisions.reasons[job.job_id] = states.R_PRIORITY
                continue
            alloc = planner.fits_now(job)
            if alloc is None:
                decisions.reasons[job.job_id] = unplaced_reason(job, snapshot, planner.candidates.by_name)
                blocked.add((job.partition, job.reservation))
                continue
            alloc, power_reason = planner.power_fit(job, alloc, snapshot.now)
            if power_reason is not None:
                decisions.reasons[job.job_id] = power_reason
                continue
            planner.start(alloc, job_end(job, snapshot.now))
            decisions.starts.append((job.job_id, alloc))
            throttle.started(job)

    def _levels(self, snapshot: Snapshot, nodes: NodeMemo) -> Levels:
        """The pass's levels: the node memo's, now (the plain timeline's, for the oracle)."""
        return PlainLevels(snapshot, nodes, self.params.bf_resolution_s) if self.plain else NowLevels(snapshot, nodes)

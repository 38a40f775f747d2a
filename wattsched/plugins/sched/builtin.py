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

import functools
from collections.abc import Mapping, Sequence

from wattsched import states
from wattsched.confvalues import SchedulerParams
from wattsched.memos import NodeMemo
from wattsched.scheduling.candidates import Candidates, unplaced_reason
from wattsched.scheduling.ledgers import PowerMeter, fit_power, gpu_ledger
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import Decisions, JobRequest, Snapshot, job_end
from wattsched.scheduling.throttle import Throttle


class BuiltinScheduler:
    """Start jobs in priority order until one cannot start."""

    backfill = False  # strict at every pass: running jobs' ends are not needed

    def __init__(self, params: SchedulerParams | None = None, nodes: NodeMemo | None = None):
        self.params = params or SchedulerParams()
        self.nodes = nodes if nodes is not None else NodeMemo()  # the backfill scheduler shares its own

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None:
        candidates = Candidates(snapshot, self.nodes)
        # the memo's, read as they are while the pass starts nothing or places its starts through the
        # select plugin's index; copied (with what was planned) before the first scan that follows a
        # start: a copy of a 25,000-node mapping at every start would cost more than the placing
        free, with_cpus, copied = self.nodes.free, self.nodes.with_cpus, False
        planned = self.nodes.planned  # what this pass's starts leave free (NodeMemo.taken)
        total_free = self.nodes.total_free
        blocked: set[tuple[str, str]] = set()
        depth = 0
        meter = PowerMeter(snapshot.power, snapshot.running) if snapshot.power is not None else None
        ledger = gpu_ledger(snapshot, self.nodes)
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
            # a job needs at least a CPU per task: more than the machine has free fits nowhere
            alloc = None
            if job.min_cpus <= total_free:
                alloc = select.quick_select(job, candidates, snapshot.def_mem_per_cpu_mb)
                if alloc is None:
                    if planned and not copied:
                        free = {**free, **planned}
                        with_cpus = {n for n in with_cpus if n not in planned or planned[n][0] > 0}
                        copied = True
                    gpus = ledger.free(snapshot.now, snapshot.now) if ledger is not None and job.gpus else None
                    alloc = select.select(job, candidates.for_job(job, with_cpus), free, snapshot.def_mem_per_cpu_mb,
                                          gpus)
            if alloc is None:
                decisions.reasons[job.job_id] = unplaced_reason(job, snapshot, candidates.by_name)
                blocked.add((job.partition, job.reservation))
                continue
            if meter is not None:
                alloc, power_reason = fit_power(job, alloc, meter.snap,
                                                functools.partial(meter.check, job, start=snapshot.now))
                if power_reason is not None:
                    decisions.reasons[job.job_id] = power_reason
                    continue
                meter.commit(alloc, job_end(job, snapshot.now))
            if ledger is not None and alloc.gpus:
                ledger.hold(alloc, snapshot.now, job_end(job, snapshot.now))
            total_free -= sum(alloc.cpus.values())
            for name, cpus in alloc.cpus.items():
                free_cpus, free_mem = planned[name] if name in planned else free[name]
                left = (free_cpus - cpus, free_mem - alloc.mem_mb.get(name, 0))
                if copied:
                    free[name] = left
                    if free_cpus == cpus:
                        with_cpus.discard(name)
                self.nodes.taken(name, left)
            decisions.starts.append((job.job_id, alloc))
            throttle.started(job)

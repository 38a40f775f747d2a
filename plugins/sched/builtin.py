"""sched/builtin: strict priority order (FIFO under priority/basic).

Pending jobs are considered highest priority first. A job that is eligible but finds no
nodes gets pending reason ``Resources`` and blocks its partition: no lower-priority job in
that partition starts in this pass (they show ``Priority``), so nothing ever overtakes a
blocked higher-priority job. Ineligible jobs (held, waiting on a dependency or begin time,
over a partition limit) keep their own reason and block nothing, as in Slurm.
"""

from __future__ import annotations

from wattsched import states
from wattsched.scheduling import ArrayThrottle, Decisions, JobRequest, SelectPlugin, Snapshot, candidates_for


class BuiltinScheduler:
    """Start jobs in priority order until one cannot start."""

    def plan(self, snapshot: Snapshot, order: list[JobRequest], eligible: dict[int, str | None],
             select: SelectPlugin, throttle: ArrayThrottle, decisions: Decisions) -> None:
        by_name = {n.name: n for n in snapshot.nodes}
        free = {n.name: (n.free_cpus, n.free_mem_mb) for n in snapshot.nodes}
        blocked: set[str] = set()
        for job in order:
            reason = eligible[job.job_id]
            if reason is not None:
                decisions.reasons[job.job_id] = reason
                continue
            if job.partition in blocked:
                decisions.reasons[job.job_id] = states.R_PRIORITY
                continue
            if not throttle.allows(job):
                decisions.reasons[job.job_id] = states.R_ARRAY_LIMIT
                continue
            alloc = select.select(job, candidates_for(job, snapshot, by_name, free), free,
                                  snapshot.def_mem_per_cpu_mb)
            if alloc is None:
                unavailable = [n for n in job.req_nodes if n not in by_name or not by_name[n].schedulable]
                decisions.reasons[job.job_id] = states.R_NODE_NOT_AVAIL if unavailable else states.R_RESOURCES
                blocked.add(job.partition)
                continue
            for name, cpus in alloc.cpus.items():
                free_cpus, free_mem = free[name]
                free[name] = (free_cpus - cpus, free_mem - alloc.mem_mb.get(name, 0))
            decisions.starts.append((job.job_id, alloc))
            throttle.started(job)

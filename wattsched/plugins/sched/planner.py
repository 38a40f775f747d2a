"""The planner under every scheduling policy, in the spirit of flux-sched's planner and OAR's slot
set: one pass's resources over time (nodes' CPUs and memory, GPU nodes' GPUs, the cluster's power
under the cap) and the few operations a policy is written in:

- ``fits(job, start, end)``: where the job fits over [start, end), nodes, memory and GPUs
  (``fits_now(job)``: from now until its time limit);
- ``power_fit(job, alloc, start)``: the allocation the power cap lets the job start with at
  ``start``, or the cap's reason;
- ``earliest(job, until)``: its earliest start (power included, when the pass plans power) and where;
- ``start(alloc, end)``: the allocation's resources taken from now until ``end``, its nodes busy;
- ``reserve(alloc, start, end)``: the allocation's resources (and power) held over [start, end);
- ``seize(job, seizer)``: where it fits from now were the running jobs it may preempt gone.

What a pass knows of the time to come decides how nodes' CPUs and memory are kept (the ``Levels``):
a strict pass (sched/builtin, and backfill's passes between two bf_interval) knows no running job's
end and asks only about now: :class:`NowLevels` reads the node memo's levels, which a select
plugin's index follows, so ``quick_select`` may answer. A backfill pass plans from the running
jobs' ends: :class:`wattsched.plugins.sched.timeline.Profile`, numpy steps behind caches; and
:mod:`wattsched.plugins.sched.plainplanner` keeps the same timeline and the power plan the plain
way, the test oracle the property tests hold the fast ones and the policies' decisions equal to.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from wattsched import preemption
from wattsched.memos import NodeMemo
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.scheduling.candidates import Candidates
from wattsched.scheduling.ledgers import PowerMeter, fit_power, gpu_ledger
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import Allocation, JobRequest, Snapshot, job_end

Failure = tuple[int, int, float]  # (nodes at least, tasks, end) of a request that did not fit from now


class Levels(Protocol):
    """Nodes' free CPUs and memory over a pass's time: now, and the steps by which they change."""

    total_now: int  # the CPUs free now, in all

    def total_from_now(self, end: float) -> int:
        """The CPUs free throughout [now, end), in all."""
        ...

    def during(self, start: float, end: float) -> tuple[Mapping[str, tuple[int, int]], Collection[str], int]:
        """Per node, its least free CPUs and memory over [start, end) (a node not there has no
        free CPU); the nodes with a free CPU throughout; and their free CPUs in all."""
        ...

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        """Take the allocation's resources from ``start`` until ``end`` (forever: never given back)."""
        ...

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        """The times in (after, until] something is given back, rounded up to ``resolution``, in order."""
        ...

    def total_free_at(self, times: list[float]) -> list[int]:
        """The machine's free CPUs at each of the (sorted) ``times``."""
        ...


class NowLevels:
    """The levels of a pass that plans only the present: the node memo's, as they are until the
    pass starts a job, and with what its starts leave (``NodeMemo.planned``, which the select
    plugin's indexes follow). Copied with what was planned before the first search that follows a
    start: a copy of a 25,000-node mapping at every start would cost more than the placing. No
    running job's end is known here, so nothing is given back."""

    def __init__(self, snapshot: Snapshot, nodes: NodeMemo):
        self.nodes = nodes
        self.free, self.with_cpus, self.copied = nodes.free, nodes.with_cpus, False
        self.total_now = nodes.total_free

    def total_from_now(self, end: float) -> int:
        return self.total_now

    def during(self, start: float, end: float) -> tuple[Mapping[str, tuple[int, int]], Collection[str], int]:
        planned = self.nodes.planned
        if planned and not self.copied:
            self.free = {**self.free, **planned}
            self.with_cpus = {n for n in self.with_cpus if n not in planned or planned[n][0] > 0}
            self.copied = True
        return self.free, self.with_cpus, self.total_now

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        planned = self.nodes.planned
        self.total_now -= sum(alloc.cpus.values())
        for name, cpus in alloc.cpus.items():
            free_cpus, free_mem = planned[name] if name in planned else self.free[name]
            left = (free_cpus - cpus, free_mem - alloc.mem_mb.get(name, 0))
            if self.copied:
                self.free[name] = left
                if free_cpus == cpus:
                    self.with_cpus.discard(name)
            self.nodes.taken(name, left)

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        return []

    def total_free_at(self, times: list[float]) -> list[int]:
        return [self.total_now] * len(times)


class Planner:
    """One pass's plan: the levels, the GPU ledger and the cluster's power (the meter of what runs
    now, and under ``bf_power=plan`` the power over time), held together by :meth:`start` and :meth:`reserve`."""

    def __init__(self, snapshot: Snapshot, select: SelectPlugin, nodes: NodeMemo,
                 levels: Callable[[Snapshot, NodeMemo], Levels], power_grace_s: float | None = None,
                 power_plan: type[PowerPlan] = PowerPlan):
        """``levels`` makes the pass's levels from the snapshot and the node memo (refreshed first);
        ``power_grace_s``: plan power over time (``power_plan``, with this grace for nodes being
        freed), else power is only admitted now."""
        self.snapshot, self.select, self.now = snapshot, select, snapshot.now
        self.candidates = Candidates(snapshot, nodes)  # refreshes the memo the levels read
        self.levels = levels(snapshot, nodes)
        self.quick = isinstance(self.levels, NowLevels)  # the select plugin's index follows these levels
        self.gpus = gpu_ledger(snapshot, nodes)
        self.meter = PowerMeter(snapshot.power, snapshot.running) if snapshot.power is not None else None
        self.power = power_plan(self.meter, snapshot.running, self.now, power_grace_s) \
            if self.meter is not None and power_grace_s is not None else None
        # per request shape, the (nodes, tasks, end) of the requests that did not fit from now: a
        # frontier where no entry asks for no more nodes, no more tasks and ends no later than another
        self.failed: dict[tuple, list[Failure]] = {}

    @property
    def total_now(self) -> int:
        return self.levels.total_now

    def fits(self, job: JobRequest, start: float, end: float) -> Allocation | None:
        """Where the job fits over [start, end): nodes, memory and GPUs (None: nowhere)."""
        need = job.min_cpus
        if start == self.now:
            if need > self.levels.total_from_now(end):
                return None  # (most candidates that fail do so here: no window is built for them)
            if self.quick and (alloc := self.select.quick_select(job, self.candidates,
                                                                 self.snapshot.def_mem_per_cpu_mb)) is not None:
                return alloc
        free, usable, total = self.levels.during(start, end)
        if need > total:
            return None
        gpus = self.gpus.free(start, end) if self.gpus is not None and job.gpus else None
        return self.select.select(job, self.candidates.for_job(job, usable, start), free,
                                  self.snapshot.def_mem_per_cpu_mb, gpus)

    def fits_now(self, job: JobRequest) -> Allocation | None:
        """:meth:`fits` from now to the job's time limit. Within a pass what is free from now only
        shrinks, so a request that failed fails again with a later end, more tasks or a higher
        minimum node count (of the same shape otherwise; :func:`shape`): such requests are
        refused without a search."""
        if job.min_cpus > self.levels.total_now:
            return None
        end = job_end(job, self.now)
        failed = self.failed.setdefault(shape(job), [])
        failure = (job.nodes_min, job.ntasks, end)
        if any(covers(earlier, *failure) for earlier in failed):
            return None
        alloc = self.fits(job, self.now, end)
        if alloc is None:
            failed[:] = [earlier for earlier in failed if not covers(failure, *earlier)]
            failed.append(failure)
        return alloc

    def power_fit(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """The allocation (at a lower CPU frequency if that is what fits) and why the power cap keeps
        the job from starting at ``start`` (None: it does not). Without a power plan, power is
        admitted now only."""
        if self.power is not None:
            plan = self.power
            return fit_power(job, alloc, plan.snap, lambda a: plan.check(job, a, start))
        if self.meter is not None and start == self.now:
            meter = self.meter
            return fit_power(job, alloc, meter.snap, lambda a: meter.check(job, a, start))
        return alloc, None

    def _planned_power(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """Power as the plan has it; plain admission only judges jobs starting now, elsewhere."""
        return self.power_fit(job, alloc, start) if self.power is not None else (alloc, None)

    def earliest(self, job: JobRequest, until: float, resolution: float, also: Iterable[float] = (),
                 allowed: Callable[[float], bool] | None = None) -> tuple[float, Allocation] | None:
        """The job's earliest start up to ``until`` and where: its nodes free (and its power, when
        planned) from then to its time limit. The starts tried are now, the times something is
        given back (rounded up to ``resolution``), reservations' boundaries, the power plan's
        release times and ``also``; with ``allowed``, only the starts it allows (from now on too)."""
        now = self.now
        if allowed is None:
            alloc = self.fits_now(job)
            if alloc is not None:
                alloc, reason = self._planned_power(job, alloc, now)
                if reason is None:
                    return now, alloc  # most jobs at the head of a queue start at once: no timeline needed
        times = set(self.levels.release_times(now, until, resolution))
        times.update(also)
        for resv in self.snapshot.reservations.values():
            times.update(t for t in (resv.start, resv.end) if now < t <= until)
        if self.power is not None:
            times.update(t for t in self.power.release_times() if t <= until)
        ordered = sorted(times)
        need = job.min_cpus
        for start, total in zip(ordered, self.levels.total_free_at(ordered), strict=True):
            if total < need:  # not enough CPUs in the whole machine at that moment
                continue
            if allowed is not None and not allowed(start):
                continue
            alloc = self.fits(job, start, job_end(job, start))
            if alloc is not None:
                alloc, reason = self._planned_power(job, alloc, start)
                if reason is None:
                    return start, alloc
        return None

    def start(self, alloc: Allocation, end: float) -> None:
        """The job starts now: its CPUs, memory and GPUs are taken until ``end``, its nodes busy in
        the power meter (and the power plan) from now."""
        self._hold(alloc, self.now, end)
        if self.power is not None:
            self.power.start_now(alloc, end)
        elif self.meter is not None:
            self.meter.commit(alloc, end)

    def reserve(self, alloc: Allocation, start: float, end: float) -> None:
        """The job is planned over [start, end): its resources are held there, its power too when
        the pass plans power."""
        self._hold(alloc, start, end)
        if self.power is not None:
            self.power.hold(alloc, start, end)

    def _hold(self, alloc: Allocation, start: float, end: float) -> None:
        self.levels.hold(alloc, start, end)
        if self.gpus is not None and alloc.gpus:
            self.gpus.hold(alloc, start, end)

    def seize(self, job: JobRequest, seizer: preemption.Seizer) -> Allocation | None:
        """Where the job could run from now to its time limit, taking nothing reserved, were the
        running jobs it may preempt gone (Slurm's will-run test with preemptee candidates)."""
        end = job_end(job, self.now)
        gpus = self.gpus.free(self.now, end) if self.gpus is not None and job.gpus else None
        return seizer.seize(job, self.candidates.for_job(job, None), self.levels.during(self.now, end)[0], gpus)


def shape(job: JobRequest) -> tuple:
    """Everything about a request that decides where it fits, but its time limit, task count and
    (unless its GPUs are spread over its nodes) its minimum node count."""
    spread = job.nodes_min if job.gpus and job.gpus.per_job else None
    return (job.partition, job.reservation, spread, job.nodes_max, job.ntasks_per_node,
            job.cpus_per_task, job.mem_per_node_mb, job.mem_per_cpu_mb, job.exclusive, job.req_nodes,
            job.exc_nodes, job.features, job.gpus)


def covers(failure: Failure, nodes: Any, tasks: Any, end: Any) -> Any:
    """Whether a request of the failure's shape with these nodes, tasks and end fails too: it asks
    no fewer nodes and tasks and ends no sooner. The one rule, for numbers and numpy arrays alike
    (the first-fit tail applies it to a whole queue at once)."""
    at_least, ntasks, until = failure
    return (nodes >= at_least) & (tasks >= ntasks) & (end >= until)

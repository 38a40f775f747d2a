"""sched/backfill: EASY (or conservative) backfilling, with first-fit or best-fit candidates.

Algorithm. Pending jobs are walked in priority order against a *profile*: each node's free
CPUs and memory now, plus the steps by which they change later (running jobs give their
resources back at start + time limit; every reservation takes them for its window). The
first ``bf_reservations`` jobs that cannot start now get a reservation at their earliest
start in the profile (their *shadow time*); a job whose earliest start is now starts. Every
later job is a backfill candidate: it starts now only if, for its whole time limit, it uses
nothing a reservation needs, so no reserved job is ever delayed. With ``bf_reservations=1``
this is EASY backfilling as in all five seeds; with ``unlimited`` every job gets a
reservation (conservative backfilling).

Candidates start in priority order (``bf_candidate=first``, first fit) or, as in the BFF and
BBF variants of seed 002_4f74bc575692707e.txt, repeatedly the best candidate that fits:
``shortest`` or ``longest`` time limit, ``most_cpus`` or ``fewest_cpus``.

Reservations. Advanced reservations are honoured by node selection itself (see
:class:`wattsched.scheduling.Candidates`): a job's candidate nodes for a window exclude every
reservation it is not a member of that overlaps the window, and a reservation's boundaries
are among the start times tried.

Speed. Within a pass free resources only shrink, so a request that failed to fit now fails
again with a longer time limit or more tasks (of the same shape otherwise): such candidates are
rejected without a search. This holds for any selection plugin with which more tasks never fit
where fewer did not.
A candidate needing more CPUs than are free in the whole machine is rejected at once. Free
resources over a window are computed lazily, node by node, only for the nodes the selection
plugin looks at.

Power. Under a PowerCap (``bf_power=plan``, the default) the timeline also tracks the cluster's
maximum power (:mod:`wattsched.plugins.sched.powerplan`): a job blocked by the cap gets its
reservation when both its nodes and its power are free, and backfilled jobs may delay it in
neither. ``bf_power=admit`` is the prototype's plain admission (seed 003): power is checked only
for jobs starting now, and a job it blocks gets no reservation; the next job is tried.

Constraints. A job without a time limit never ends in the profile: it can start now only on
resources no reservation needs, and a reservation behind it waits forever (no shadow time,
reason Resources, no expected start). Reservations are only planned within ``bf_window``.

Parameters (SchedulerParameters): ``bf_interval`` (seconds between full backfill passes; the
passes in between are strict priority order, as sched/builtin), ``bf_window`` (minutes),
``bf_resolution`` (seconds: release times are rounded up to it, which bounds the start times
tried), ``bf_max_job_test`` (jobs tested per pass; as in Slurm, the jobs past it are not looked
at and keep their reasons), ``bf_max_job_user`` (jobs tested per user per pass),
``bf_continue`` (accepted; a pass here is never interrupted, so it always runs to the end of
the queue it tests), ``default_queue_depth`` (for the strict passes),
``bf_reservations`` and ``bf_candidate`` (ours, see above).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
from wattsched import states
from wattsched.config import SchedulerParams
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.scheduling import (
    Allocation,
    ArrayThrottle,
    Candidates,
    Decisions,
    JobRequest,
    NodeMemo,
    PowerMeter,
    RunningJob,
    SelectPlugin,
    Snapshot,
    fit_power,
    job_end,
    unplaced_reason,
)

_FOREVER = math.inf


class ReleaseMemo:
    """Running jobs' release steps from one pass to the next, as arrays sorted by node then time,
    for as long as the pass gets the very same RunningJob objects (the simulator keeps them; the
    controller builds new ones, which only misses): only the jobs that started or ended since are
    turned into steps, where a thousand running jobs would otherwise be at every pass."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names = names or []
        self.jobs: set[RunningJob] = set()
        empty = np.zeros(0, dtype=np.int64)
        # (end time, node index, cpus, memory, job id), sorted by node, then end time
        self.steps: tuple[np.ndarray, ...] = (np.zeros(0), empty, empty, empty, empty)

    def update(self, running: Iterable[RunningJob], index: Mapping[str, int]) -> tuple[np.ndarray, ...]:
        current = set(running)
        gone, new = self.jobs - current, current - self.jobs
        self.jobs = current
        if not gone and not new:
            return self.steps
        steps = self.steps
        if gone:
            kept = ~np.isin(steps[4], np.fromiter((j.job_id for j in gone), dtype=np.int64, count=len(gone)))
            steps = tuple(column[kept] for column in steps)
        rows = [(job.end_time, i, cpus, job.mem_mb.get(node, 0), job.job_id) for job in new
                if job.end_time is not None for node, cpus in job.cpus.items() if (i := index.get(node)) is not None]
        if rows:
            added = np.array(rows, dtype=np.float64)
            when = np.concatenate((steps[0], added[:, 0]))
            others = (np.concatenate((old, added[:, k].astype(np.int64))) for k, old in enumerate(steps[1:], 1))
            steps = (when, *others)
            order = np.lexsort((steps[0], steps[1]))
            steps = tuple(column[order] for column in steps)
        self.steps = steps
        return steps


class Profile:
    """Free CPUs and memory per node: now (after this pass's starts) and the later steps by
    which they change (running jobs ending, reserved jobs starting and ending).

    Steps are kept as arrays so that a window's least free resources, the release times and
    the machine's free total over time are computed for all nodes at once."""

    def __init__(self, now: float, nodes: NodeMemo):
        self.now = now
        self.names = nodes.names
        self.index = nodes.index
        self.cpus_now = nodes.cpus.copy()
        self.mem_now = nodes.mem.copy()
        self.total_now = int(self.cpus_now.sum())
        self._new: list[tuple[float, int, int, int]] = []
        empty = np.zeros(0, dtype=np.int64)
        self._arrays: tuple[np.ndarray, ...] = (np.zeros(0), empty, empty, empty)
        # what was derived from one version of the arrays, kept until a step is added
        self._released: tuple = (None, None, [])
        self._over_time: tuple = (None, None, None)

    def add(self, node: str, when: float, cpus: int, mem_mb: int) -> None:
        i = self.index[node]
        if when <= self.now:
            self.cpus_now[i] += cpus
            self.mem_now[i] += mem_mb
            self.total_now += cpus
        else:
            self._new.append((when, i, cpus, mem_mb))

    def releases(self, running: Iterable[RunningJob], resolution: float, memo: ReleaseMemo) -> ReleaseMemo:
        """Running jobs give their resources back at their time limit (a job past it is being
        killed: a little later); a job without a limit never does. Returns the memo to keep for
        the next pass (a new one when the nodes are not those of the last pass)."""
        if memo.names is not self.names:  # other nodes (NodeMemo keeps the list while they stay)
            memo = ReleaseMemo(self.names)
        when, node, cpus, mem, _job = memo.update(running, self.index)
        # raising every time to one floor keeps the steps sorted by node, then time
        self._arrays = (np.maximum(when, self.now + resolution), node, cpus, mem)
        return memo

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        """Take the allocation's resources from ``start`` until ``end`` (forever: never given back)."""
        for node, cpus in alloc.cpus.items():
            mem = alloc.mem_mb.get(node, 0)
            self.add(node, start, -cpus, -mem)
            if end != _FOREVER:
                self.add(node, end, cpus, mem)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The steps as (time, node, cpus, mem) arrays, sorted by node, then time; steps added
        since the last call are merged in (converting only them keeps repeated calls cheap)."""
        if self._new:
            new = np.array(self._new, dtype=np.float64)
            self._new = []
            when = np.concatenate((self._arrays[0], new[:, 0]))
            node = np.concatenate((self._arrays[1], new[:, 1].astype(np.int64)))
            cpus = np.concatenate((self._arrays[2], new[:, 2].astype(np.int64)))
            mem = np.concatenate((self._arrays[3], new[:, 3].astype(np.int64)))
            order = np.lexsort((when, node))
            self._arrays = (when[order], node[order], cpus[order], mem[order])
        return self._arrays

    def window(self, start: float, end: float) -> Window:
        return Window(self, start, end)

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        """Times at which something is given back, rounded up to ``resolution``, in order."""
        arrays = self.arrays()
        key = (after, until, resolution)
        if self._released[0] is not arrays or self._released[1] != key:
            when, _node, cpus, mem = arrays
            picked = when[((cpus > 0) | (mem > 0)) & (when > after) & (when <= until)]
            times = np.unique(after + np.ceil((picked - after) / resolution) * resolution).tolist()
            self._released = (arrays, key, times)
        return self._released[2]

    def total_free_at(self, times: list[float]) -> list[int]:
        """Free CPUs of the whole machine at each of the (sorted) ``times``."""
        arrays = self.arrays()
        if self._over_time[0] is not arrays:  # steps in time order and the running change they make
            when, _node, cpus, _mem = arrays
            order = np.argsort(when, kind="stable")
            self._over_time = (arrays, when[order], np.concatenate(([0], np.cumsum(cpus[order]))))
        _arrays, when, running = self._over_time
        return (self.total_now + running[np.searchsorted(when, times, side="right")]).tolist()


class Window(Mapping[str, tuple[int, int]]):
    """Per node, the least free CPUs and memory over [start, end)."""

    def __init__(self, profile: Profile, start: float, end: float):
        self.profile = profile
        when, node, cpus, mem = profile.arrays()
        size = len(profile.names)
        before = when <= start
        low_cpus, low_mem = profile.cpus_now.copy(), profile.mem_now.copy()
        if before.any():  # never for a window from now: steps come later, starts are counted in cpus_now
            low_cpus += np.bincount(node[before], cpus[before], minlength=size).astype(np.int64)
            low_mem += np.bincount(node[before], mem[before], minlength=size).astype(np.int64)
        inside = (when > start) & (when < end)
        if inside.any():
            # steps stay sorted by node then time: a running sum per node gives each level reached
            n_in, c_in, m_in = node[inside], cpus[inside], mem[inside]
            first = np.flatnonzero(np.concatenate(([True], n_in[1:] != n_in[:-1])))
            for values, low in ((c_in, low_cpus), (m_in, low_mem)):
                sums = np.cumsum(values)
                group_base = np.repeat(sums[first] - values[first], np.diff(np.append(first, len(values))))
                dips = np.minimum.reduceat(sums - group_base, first)
                low[n_in[first]] += np.minimum(dips, 0)
        self.cpus = np.maximum(low_cpus, 0)
        self.mem = np.maximum(low_mem, 0)
        self._lists: tuple[list[int], list[int]] | None = None

    def __getitem__(self, node: str) -> tuple[int, int]:
        if self._lists is None:  # a selection asks for dozens of nodes: plain ints beat numpy scalars
            self._lists = (self.cpus.tolist(), self.mem.tolist())
        i = self.profile.index[node]
        return self._lists[0][i], self._lists[1][i]

    def with_cpus(self) -> set[str]:
        """The nodes with a free CPU throughout the window."""
        names = self.profile.names
        return {names[i] for i in np.flatnonzero(self.cpus > 0)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.profile.names)

    def __len__(self) -> int:
        return len(self.profile.names)


_BEST = {
    "shortest": lambda job: job.time_limit_min if job.time_limit_min is not None else _FOREVER,
    "longest": lambda job: -(job.time_limit_min if job.time_limit_min is not None else _FOREVER),
    "most_cpus": lambda job: -job.ntasks * job.cpus_per_task,
    "fewest_cpus": lambda job: job.ntasks * job.cpus_per_task,
}


def _shape(job: JobRequest) -> tuple:
    """Everything about a request that decides where it fits, but its time limit and task count."""
    return (job.partition, job.reservation, job.nodes_min, job.nodes_max, job.ntasks_per_node,
            job.cpus_per_task, job.mem_per_node_mb, job.mem_per_cpu_mb, job.exclusive, job.req_nodes,
            job.exc_nodes, job.features)


class _Pass:
    """The state of one backfill pass: the profile, the candidate lists, the failures seen."""

    def __init__(self, snapshot: Snapshot, select: SelectPlugin, params: SchedulerParams, memo: ReleaseMemo,
                 nodes: NodeMemo):
        self.snapshot, self.select, self.params = snapshot, select, params
        self.now = snapshot.now
        self.candidates = Candidates(snapshot, nodes)
        self.profile = Profile(snapshot.now, nodes)
        self.memo = self.profile.releases(snapshot.running, params.bf_resolution_s, memo)
        # per request shape, the (tasks, end) of the requests that did not fit now: a frontier
        # where no entry asks for fewer tasks and ends sooner than another
        self.failed: dict[tuple, list[tuple[int, float]]] = {}
        self.meter = PowerMeter(snapshot.power, snapshot.running) if snapshot.power is not None else None
        self.power = PowerPlan(self.meter, snapshot.running, self.now, params.bf_resolution_s) \
            if self.meter is not None and params.bf_power == "plan" else None

    def power_fit(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """The allocation (at a lower CPU frequency if that is what fits) and why the power cap keeps
        the job from starting at ``start`` (None: it does not)."""
        if self.power is not None:
            plan = self.power
            return fit_power(job, alloc, plan.snap, lambda a: plan.check(job, a, start))
        if self.meter is not None and start == self.now:
            meter = self.meter
            return fit_power(job, alloc, meter.snap, lambda a: meter.check(job, a, start))
        return alloc, None

    def start(self, job: JobRequest, alloc: Allocation) -> None:
        end = job_end(job, self.now)
        self.profile.hold(alloc, self.now, end)
        if self.power is not None:
            self.power.start_now(alloc, end)
        elif self.meter is not None:
            self.meter.commit(alloc, end)

    def reserve(self, job: JobRequest, alloc: Allocation, start: float) -> None:
        end = job_end(job, start)
        self.profile.hold(alloc, start, end)
        if self.power is not None:
            self.power.hold(alloc, start, end)

    def fits_now(self, job: JobRequest) -> Allocation | None:
        """Where the job can run from now to its time limit without taking anything reserved."""
        if job.ntasks * max(1, job.cpus_per_task) > self.profile.total_now:
            return None
        end = job_end(job, self.now)
        failed = self.failed.setdefault(_shape(job), [])
        if any(tasks <= job.ntasks and until <= end for tasks, until in failed):
            return None
        window = self.profile.window(self.now, end)
        alloc = self.select.select(job, self.candidates.for_job(job, window.with_cpus()), window,
                                   self.snapshot.def_mem_per_cpu_mb)
        if alloc is None:
            failed[:] = [(tasks, until) for tasks, until in failed if tasks < job.ntasks or until < end]
            failed.append((job.ntasks, end))
        return alloc

    def earliest(self, job: JobRequest) -> tuple[float, Allocation] | None:
        """The job's earliest start within bf_window (nodes, and power when it is planned), and where."""
        now, params = self.now, self.params
        alloc = self.fits_now(job)
        if alloc is not None:
            alloc, reason = self._planned_power(job, alloc, now)
            if reason is None:
                return now, alloc  # most jobs at the head of a queue start at once: no timeline needed
        window_end = now + params.bf_window_min * 60
        times = set(self.profile.release_times(now, window_end, params.bf_resolution_s))
        for resv in self.snapshot.reservations.values():
            times.update(t for t in (resv.start, resv.end) if now < t <= window_end)
        if self.power is not None:
            times.update(t for t in self.power.release_times() if t <= window_end)
        ordered = sorted(times)
        need = job.ntasks * max(1, job.cpus_per_task)
        for start, total in zip(ordered, self.profile.total_free_at(ordered), strict=True):
            if total < need:  # not enough CPUs in the whole machine at that moment
                continue
            window = self.profile.window(start, job_end(job, start))
            alloc = self.select.select(job, self.candidates.for_job(job, window.with_cpus(), start), window,
                                       self.snapshot.def_mem_per_cpu_mb)
            if alloc is not None:
                alloc, reason = self._planned_power(job, alloc, start)
                if reason is None:
                    return start, alloc
        return None

    def _planned_power(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """Power as the timeline plans it; plain admission only judges jobs starting now, elsewhere."""
        return self.power_fit(job, alloc, start) if self.power is not None else (alloc, None)


class BackfillScheduler:
    """Reservations for the top blocked jobs; later jobs start now only if they delay none of them."""

    backfill = True  # the controller gives it running jobs' end times every bf_interval

    def __init__(self, params: SchedulerParams | None = None):
        self.params = params or SchedulerParams()
        self.strict = BuiltinScheduler(self.params)
        self.memo = ReleaseMemo()

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: ArrayThrottle, decisions: Decisions) -> None:
        if not snapshot.backfill_due:
            self.strict.plan(snapshot, order, ineligible, select, throttle, decisions)
            return
        params = self.params
        bf = _Pass(snapshot, select, params, self.memo, self.strict.nodes)
        self.memo = bf.memo
        reserved, tested = 0, 0
        per_user: Counter[str] = Counter()
        blocked: set[tuple[str, str]] = set()
        later: list[JobRequest] = []
        for job in order:
            reason = ineligible.get(job.job_id)
            if reason is not None:
                decisions.reasons[job.job_id] = reason
                continue
            if tested >= params.bf_max_job_test:
                # as Slurm's backfill: the jobs past the limit are not looked at and keep their
                # reasons, but for the ineligible ones, whose reasons are their own
                decisions.reasons.update(ineligible)
                break
            if params.bf_max_job_user:
                if per_user[job.user] >= params.bf_max_job_user:
                    decisions.reasons[job.job_id] = states.R_PRIORITY
                    continue
                per_user[job.user] += 1
            tested += 1
            if not throttle.allows(job):
                decisions.reasons[job.job_id] = states.R_ARRAY_LIMIT
                continue
            if params.bf_reservations == 0 or reserved < params.bf_reservations:
                found = bf.earliest(job)
                if found is not None and found[0] == bf.now:
                    now_alloc, power_reason = bf.power_fit(job, found[1], bf.now)
                else:
                    now_alloc = bf.fits_now(job)
                    power_reason = bf.power_fit(job, now_alloc, bf.now)[1] if now_alloc is not None else None
                if found is not None and found[0] == bf.now and power_reason is None:
                    self._start(job, now_alloc, bf, throttle, decisions, backfilled=bool(blocked))
                    continue
                key = (job.partition, job.reservation)
                if power_reason is not None:
                    decisions.reasons[job.job_id] = power_reason
                    if bf.power is None:  # plain admission: the next job is tried, nothing is reserved
                        continue
                else:
                    decisions.reasons[job.job_id] = states.R_PRIORITY if key in blocked else \
                        unplaced_reason(job, snapshot, bf.candidates.by_name)
                blocked.add(key)
                if found is not None:
                    start, alloc = found
                    bf.reserve(job, alloc, start)
                    decisions.expected_start[job.job_id] = start
                    reserved += 1
            elif params.bf_candidate == "first":
                alloc = bf.fits_now(job)
                reason = states.R_PRIORITY
                if alloc is not None:
                    alloc, reason = bf.power_fit(job, alloc, bf.now)
                if reason is None:
                    self._start(job, alloc, bf, throttle, decisions, backfilled=True)
                else:
                    decisions.reasons[job.job_id] = reason
            else:
                later.append(job)
        self._best_fit(later, bf, throttle, decisions)
        decisions.backfill_depth = tested

    def _best_fit(self, later: list[JobRequest], bf: _Pass, throttle: ArrayThrottle, decisions: Decisions) -> None:
        """Start the best-fitting candidate, again and again, until none fits (BFF/BBF)."""
        key = _BEST.get(self.params.bf_candidate)
        waiting = list(later)
        while waiting and key is not None:
            fitting = []
            for job in waiting:
                if throttle.allows(job):
                    alloc = bf.fits_now(job)
                    if alloc is not None:
                        alloc, reason = bf.power_fit(job, alloc, bf.now)
                        if reason is None:
                            fitting.append((key(job), job, alloc))
            if not fitting:
                break
            _key, job, alloc = min(fitting, key=lambda f: (f[0], f[1].submit_time, f[1].job_id))
            self._start(job, alloc, bf, throttle, decisions, backfilled=True)
            waiting.remove(job)
        for job in waiting:
            decisions.reasons[job.job_id] = states.R_PRIORITY

    @staticmethod
    def _start(job: JobRequest, alloc: Allocation, bf: _Pass, throttle: ArrayThrottle, decisions: Decisions,
               backfilled: bool) -> None:
        bf.start(job, alloc)
        decisions.starts.append((job.job_id, alloc))
        decisions.backfilled += int(backfilled)
        throttle.started(job)

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
BBF variants of Mämmelä et al. 2011, repeatedly the best candidate that fits:
``shortest`` or ``longest`` time limit, ``most_cpus`` or ``fewest_cpus``.

Reservations. Advanced reservations are honoured by node selection itself (see
:class:`wattsched.scheduling.Candidates`): a job's candidate nodes for a window exclude every
reservation it is not a member of that overlaps the window, and a reservation's boundaries
are among the start times tried.

Speed. Within a pass free resources only shrink, so a request that failed to fit now fails
again with a longer time limit or more tasks (of the same shape otherwise): such candidates are
rejected without a search. This holds for any selection plugin with which more tasks never fit
where fewer did not.
A candidate needing more CPUs than are free in the whole machine, or over its window, is
rejected at once. Both rejections only grow within a pass, so once every reservation is made
(first fit) they are computed for the rest of the queue at once, and only the candidates left
are tried one by one. Releases only raise a node's free resources, so a window's least free
resources are its start's levels, lowered only on the nodes a reservation takes from inside it.

Power. Under a PowerCap (``bf_power=plan``, the default) the timeline also tracks the cluster's
maximum power (:mod:`wattsched.plugins.sched.powerplan`): a job blocked by the cap gets its
reservation when both its nodes and its power are free, and backfilled jobs may delay it in
neither. ``bf_power=admit`` is the prototype's plain admission (Hautreux 2013): power is checked only
for jobs starting now, and a job it blocks gets no reservation; the next job is tried.

Preemption. A job that may preempt (wattsched.preemption) and fits once the running jobs it
may preempt are gone gets its reservation now, on their nodes, as Slurm's will-run test with
preemptee candidates plans it: nothing of lower priority is backfilled there while they end.

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

import itertools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, KeysView, Mapping, Sequence
from typing import Any

import numpy as np

from wattsched import ledger, preemption, states
from wattsched.confvalues import SchedulerParams
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.scheduling import (
    Allocation,
    Candidates,
    Changes,
    Decisions,
    JobRequest,
    NodeMemo,
    PowerMeter,
    RunningJob,
    Seen,
    SelectPlugin,
    Snapshot,
    Throttle,
    fit_power,
    gpu_ledger,
    job_changes,
    job_end,
    qos_flag,
    unplaced_reason,
)

_FOREVER = math.inf
# what became of a first-fit candidate (BackfillScheduler._first_fit)
_STARTED, _UNFIT, _REFUSED = "started", "unfit", "refused"


class ReleaseMemo:
    """Running jobs' release steps from one pass to the next, as arrays (in no order: nothing reads
    one), for as long as the pass gets the very same RunningJob objects (the simulator keeps them; the
    controller builds new ones, which only misses): only the jobs that started or ended since are
    turned into steps, where a thousand running jobs would otherwise be at every pass. Given the
    snapshot's :class:`Changes`, it reads their delta rather than comparing the jobs as sets."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names = names or []
        self.jobs: set[RunningJob] = set()
        self.seen = Seen()
        empty = np.zeros(0, dtype=np.int64)
        # (end time, node index, cpus, memory, job id)
        self.steps: tuple[np.ndarray, ...] = (np.zeros(0), empty, empty, empty, empty)

    def update(self, running: Collection[RunningJob], changes: Changes | None,
               index: Mapping[str, int]) -> tuple[np.ndarray, ...]:
        delta = changes.running if changes is not None else None
        gone, new = job_changes(self.jobs, running, delta if self.seen.follows(changes, delta) else None)
        self.seen.read(changes)
        if not gone and not new:
            return self.steps
        steps = self.steps
        if gone:
            kept = ~_among(steps[4], np.fromiter((j.job_id for j in gone), dtype=np.int64, count=len(gone)))
            steps = tuple(column[kept] for column in steps)
        rows = [(job.end_time, i, cpus, job.mem_mb.get(node, 0), job.job_id) for job in new
                if job.end_time is not None for node, cpus in job.cpus.items() if (i := index.get(node)) is not None]
        if rows:
            added = np.array(rows, dtype=np.float64)
            when = np.concatenate((steps[0], added[:, 0]))
            others = (np.concatenate((old, added[:, k].astype(np.int64))) for k, old in enumerate(steps[1:], 1))
            steps = (when, *others)
        self.steps = steps
        return steps


class Profile:
    """Free CPUs and memory per node: now (after this pass's starts) and the later steps by
    which they change: running jobs' releases (the *base*, never negative, fixed for the pass)
    and the *holds* this pass adds (a reservation takes resources at its start and gives them
    back at its end; a job started now gives them back at its end).

    Steps are kept as arrays so that a window's least free resources, the release times and
    the machine's free total over time are computed for all nodes at once. Releases only raise
    a node's level, so over a window only a node with a hold starting inside it can dip below
    its level at the window's start: only those few nodes' steps are gone through, the rest
    read from the level alone."""

    def __init__(self, now: float, nodes: NodeMemo):
        self.now = now
        self.names = nodes.names
        self.index = nodes.index
        self.cpus_now = nodes.cpus.copy()
        self.mem_now = nodes.mem.copy()
        self.total_now = int(self.cpus_now.sum())
        empty = np.zeros(0, dtype=np.int64)
        # releases
        self._base: tuple[np.ndarray, ...] = (np.zeros(0), empty, empty, empty)
        self._released_from = _FOREVER  # no release comes sooner
        # the nodes with a free CPU now -> (CPUs, memory), and their CPUs in all: what a window from now
        # starts from (built when first asked for, then kept up to date as jobs start)
        self._free_now: tuple[dict[str, tuple[int, int]], int] | None = None
        # holds' steps later than now, in the order added (at one time, releases come first,
        # then holds in that order): a (time, nodes, cpus, mem) block of arrays each
        self._holds: list[tuple[np.ndarray, ...]] = []
        self._takes: list[tuple[float, int]] = []  # the holds' negative steps: (time, node)
        self._first_take = _FOREVER
        self._from_now: _FromNow | None = None
        # what was derived from the steps, by name, and the windows asked for: kept until a change
        self._changes = 0
        self._derived: dict[str, tuple[int, Any]] = {}
        self._windows: dict[tuple[float, float | None], Window] = {}

    def _step(self, when: float, nodes: np.ndarray, cpus: np.ndarray, mem: np.ndarray) -> None:
        """Add the change of the nodes' free CPUs and memory at ``when`` (counted now, if it is past)."""
        if when <= self.now:
            self.cpus_now[nodes] += cpus
            self.mem_now[nodes] += mem
            self.total_now += int(cpus.sum())
            if self._free_now is not None:
                self._free_now = _patch(*self._free_now, self.names, nodes, self.cpus_now, self.mem_now)
            return
        self._holds.append((np.full(len(nodes), when), nodes, cpus, mem))
        taking = (cpus < 0) | (mem < 0)
        if taking.any():
            self._takes.extend(zip(itertools.repeat(when), nodes[taking].tolist()))
            self._first_take = min(self._first_take, when)
            self._from_now = None
        elif self._from_now is not None:
            self._from_now.gives(nodes, when)

    def releases(self, running: Collection[RunningJob], resolution: float, memo: ReleaseMemo,
                 changes: Changes | None = None) -> ReleaseMemo:
        """Running jobs give their resources back at their time limit (a job past it is being
        killed: a little later); a job without a limit never does. Returns the memo to keep for
        the next pass (a new one when the nodes are not those of the last pass). ``changes``: the
        snapshot's, which spare the memo a comparison of the running jobs."""
        if memo.names is not self.names:  # other nodes (NodeMemo keeps the list while they stay)
            memo = ReleaseMemo(self.names)
        when, node, cpus, mem, _job = memo.update(running, changes, self.index)
        self._released_from = self.now + resolution
        self._base = (np.maximum(when, self._released_from), node, cpus, mem)
        return memo

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        """Take the allocation's resources from ``start`` until ``end`` (forever: never given back)."""
        self._changes += 1
        self._windows.clear()
        count = len(alloc.cpus)
        nodes = np.fromiter(map(self.index.__getitem__, alloc.cpus), dtype=np.int64, count=count)
        cpus = np.fromiter(alloc.cpus.values(), dtype=np.int64, count=count)
        mem = np.fromiter(map(alloc.mem_mb.get, alloc.cpus, itertools.repeat(0)), dtype=np.int64, count=count)
        self._step(start, nodes, -cpus, -mem)
        if end != _FOREVER:
            self._step(end, nodes, cpus, mem)

    def free_now(self) -> tuple[dict[str, tuple[int, int]], int]:
        """The nodes with a free CPU now, with their free CPUs and memory (never below 0), and the
        CPUs free on them in all. Read-only."""
        if self._free_now is None:
            pairs, total = _with_cpus(self.names, self.cpus_now, self.mem_now)
            self._free_now = dict(pairs), total
        return self._free_now

    def _derive(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept for as long as nothing is added."""
        kept = self._derived.get(name)
        if kept is None or kept[0] != self._changes:
            kept = (self._changes, compute())
            self._derived[name] = kept
        return kept[1]

    def steps(self) -> tuple[np.ndarray, ...]:
        """All the steps as (time, node, cpus, mem) arrays: the releases, then the holds."""
        def merge() -> tuple[np.ndarray, ...]:
            if not self._holds:
                return self._base
            return tuple(np.concatenate(pair) for pair in zip(self._base, self._held(), strict=True))
        return self._derive("steps", merge)

    def _held(self) -> tuple[np.ndarray, ...]:
        """The holds' steps as (time, node, cpus, mem) arrays, in the order added."""
        def join() -> tuple[np.ndarray, ...]:
            if not self._holds:
                empty = np.zeros(0, dtype=np.int64)
                return np.zeros(0), empty, empty, empty
            return tuple(np.concatenate(column) for column in zip(*self._holds, strict=True))
        return self._derive("held", join)

    def window(self, start: float, end: float) -> Window:
        """The least free resources over [start, end): one object for all the windows that are
        alike until the next change (those from one start that no hold dips into are)."""
        if start == self.now:
            dips = self._dips_from_now(end) if self._first_take < end else None
        else:
            dipping = sorted({i for when, i in self._takes if start < when < end})
            dips = self.dips(dipping, start, end) if dipping else None
        key = (start, end if dips is not None else None)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = Window(self, start, dips)
        return window

    def _dips_from_now(self, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`dips` for a window from now: read from every taking node's running lowest
        levels, kept until a hold takes more (or gives back on such a node before ``end``)."""
        if self._from_now is None:
            dipping = sorted({i for _when, i in self._takes})
            self._from_now = _FromNow(len(self.names), dipping, *self._steps_on(dipping, self.now, _FOREVER))
        dips = self._from_now.dips(end)
        if dips is None:
            return self.dips(sorted({i for when, i in self._takes if when < end}), self.now, end)
        return dips

    def levels(self, at: float) -> tuple[np.ndarray, np.ndarray]:
        """Free CPUs and memory per node just after ``at`` (every step at ``at`` counted)."""
        cpus, mem = self.cpus_now.copy(), self.mem_now.copy()
        if at <= self.now:  # every step comes later; the starts now are counted in cpus_now
            return cpus, mem
        when, node, step_cpus, step_mem = self.steps()
        before = when <= at
        cpus += np.bincount(node[before], step_cpus[before], minlength=len(cpus)).astype(np.int64)
        mem += np.bincount(node[before], step_mem[before], minlength=len(mem)).astype(np.int64)
        return cpus, mem

    def dips(self, dipping: list[int], start: float, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """How far below their levels at ``start`` the CPUs and memory of the ``dipping`` nodes
        (those on which a hold takes resources inside (start, end)) go there."""
        _when, node, first, levels = self._steps_on(dipping, start, end)
        lows = np.minimum(np.minimum.reduceat(levels, first, axis=0), 0)
        return node[first], lows[:, 0], lows[:, 1]

    def _steps_on(self, nodes: list[int], start: float, end: float) -> tuple[np.ndarray, ...]:
        """The steps on ``nodes`` inside (start, end) in time order, node by node: their times,
        nodes, where each node's begin, and the CPU and memory levels each reaches (relative to
        the node's level at ``start``; a column each)."""
        mask = np.zeros(len(self.names), dtype=bool)
        mask[nodes] = True
        # from now on, forever: every step is in (holds are later than now, releases finite and later than start)
        everywhen = start <= self.now and start < self._released_from and end == _FOREVER
        held = self._held()
        kept = [mask[node] if everywhen else mask[node] & (when > start) & (when < end)
                for when, node, *_levels in (self._base, held)]
        # releases before holds, holds in the order added: a stable sort keeps that at one time
        when, node, cpus, mem = (np.concatenate((base[kept[0]], hold[kept[1]])) for base, hold in
                                 zip(self._base, held, strict=True))
        order = np.lexsort((when, node))
        when, node, values = when[order], node[order], np.column_stack((cpus, mem))[order]
        first = np.flatnonzero(np.concatenate(([True], node[1:] != node[:-1])))
        sums = np.cumsum(values, axis=0)  # a running sum per node gives each level reached
        return when, node, first, sums - np.repeat(sums[first] - values[first], np.diff(np.append(first, len(node))),
                                                   axis=0)

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        """Times at which something is given back, rounded up to ``resolution``, in order."""
        def compute() -> list[float]:
            when, _node, cpus, mem = self.steps()
            picked = when[((cpus > 0) | (mem > 0)) & (when > after) & (when <= until)]
            return np.unique(after + np.ceil((picked - after) / resolution) * resolution).tolist()
        return self._derive(f"released {after} {until} {resolution}", compute)

    def total_free_at(self, times: list[float]) -> list[int]:
        """Free CPUs of the whole machine at each of the (sorted) ``times``."""
        def over_time() -> tuple[np.ndarray, np.ndarray]:  # steps in time order, the running change
            when, _node, cpus, _mem = self.steps()
            order = np.argsort(when, kind="stable")
            return when[order], np.concatenate(([0], np.cumsum(cpus[order])))
        when, running = self._derive("over_time", over_time)
        return (self.total_now + running[np.searchsorted(when, times, side="right")]).tolist()


class _FromNow:
    """For windows from now: the steps on every node a hold takes from, with each node's running
    lowest CPU and memory levels, so that a window's dips are read at its end. A step given back
    on such a node afterwards (a job started now ending) is not in them: a window reaching past
    it is computed afresh."""

    def __init__(self, size: int, nodes: list[int], when: np.ndarray, node: np.ndarray, first: np.ndarray,
                 levels: np.ndarray):
        self.covers = np.zeros(size, dtype=bool)
        self.covers[nodes] = True
        self.when, self.node, self.first = when, node, first
        self.later = _FOREVER  # the first step given back on a covered node since
        # each node's levels shifted below all earlier nodes' makes one running minimum per node
        span = np.abs(levels).max(axis=0) * 2 + 1
        shift = np.repeat(np.arange(len(first), dtype=np.int64)[:, None] * span, np.diff(np.append(first, len(levels))),
                          axis=0)
        self.lows = np.minimum.accumulate(levels - shift, axis=0) + shift  # CPUs, memory

    def gives(self, nodes: np.ndarray, when: float) -> None:
        if self.covers[nodes].any():
            self.later = min(self.later, when)

    def dips(self, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if self.later < end:
            return None
        counts = np.add.reduceat((self.when < end).astype(np.int64), self.first)
        last = self.first + np.maximum(counts, 1) - 1
        lows = np.where((counts > 0)[:, None], np.minimum(self.lows[last], 0), 0)
        return self.node[self.first], lows[:, 0], lows[:, 1]


class Window(dict[str, tuple[int, int]]):
    """Per node with a free CPU throughout [start, end), its least free CPUs and memory over it.
    A dict, since a selection looks up hundreds of nodes per job; another node shows 0 CPUs."""

    def __init__(self, profile: Profile, start: float, dips: tuple[np.ndarray, np.ndarray, np.ndarray] | None):
        low_cpus, low_mem = profile.levels(start)
        if dips is not None:
            nodes, dip_cpus, dip_mem = dips
            low_cpus[nodes] += dip_cpus
            low_mem[nodes] += dip_mem
        self._index = profile.index
        self._mem = np.maximum(low_mem, 0)
        if start <= profile.now:  # the levels now, but on the nodes a reservation dips: copied and patched
            free, total = profile.free_now()
            super().__init__(free)
            if dips is not None:  # (most nodes a reservation covers have their resources back by then)
                nodes, dip_cpus, dip_mem = dips
                total = _patch(self, total, profile.names, nodes[(dip_cpus < 0) | (dip_mem < 0)], low_cpus, low_mem)[1]
            self.total = total
            return
        pairs, self.total = _with_cpus(profile.names, low_cpus, low_mem)
        super().__init__(pairs)

    def __missing__(self, node: str) -> tuple[int, int]:
        return 0, int(self._mem[self._index[node]])

    def with_cpus(self) -> KeysView[str]:
        """The nodes with a free CPU throughout the window."""
        return self.keys()


def _with_cpus(names: list[str], cpus: np.ndarray,
               mem: np.ndarray) -> tuple[Iterator[tuple[str, tuple[int, int]]], int]:
    """The nodes with a free CPU, as (name, (free CPUs, free memory never below 0)) pairs, and
    their free CPUs in all."""
    with_cpus = np.flatnonzero(cpus > 0)
    free = cpus[with_cpus]
    return zip([names[i] for i in with_cpus.tolist()],
               zip(free.tolist(), np.maximum(mem[with_cpus], 0).tolist(), strict=True), strict=True), int(free.sum())


def _patch(free: dict[str, tuple[int, int]], total: int, names: list[str], nodes: np.ndarray, cpus: np.ndarray,
           mem: np.ndarray) -> tuple[dict[str, tuple[int, int]], int]:
    """``free`` and ``total`` (as :func:`_with_cpus` makes them) with the levels of ``nodes`` set to
    ``cpus`` and ``mem`` (arrays over all nodes), in place."""
    for i in nodes.tolist():
        name = names[i]
        level = int(cpus[i])
        old = free.get(name)
        if old is not None:
            total -= old[0]
        if level > 0:
            free[name] = (level, max(int(mem[i]), 0))
            total += level
        elif old is not None:
            del free[name]
    return free, total


_BEST = {
    "shortest": lambda job: job.time_limit_min if job.time_limit_min is not None else _FOREVER,
    "longest": lambda job: -(job.time_limit_min if job.time_limit_min is not None else _FOREVER),
    "most_cpus": lambda job: -job.ntasks * job.cpus_per_task,
    "fewest_cpus": lambda job: job.ntasks * job.cpus_per_task,
}


def _among(values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Which ``values`` are among ``targets`` (a few): a binary search each, where np.isin's set-up
    costs more than the search."""
    if not len(targets):
        return np.zeros(len(values), dtype=bool)
    targets = np.sort(targets)
    return targets[np.minimum(np.searchsorted(targets, values), len(targets) - 1)] == values


def _shape(job: JobRequest) -> tuple:
    """Everything about a request that decides where it fits, but its time limit and task count."""
    return (job.partition, job.reservation, job.nodes_min, job.nodes_max, job.ntasks_per_node,
            job.cpus_per_task, job.mem_per_node_mb, job.mem_per_cpu_mb, job.exclusive, job.req_nodes,
            job.exc_nodes, job.features, job.gpus)


class _Requests:
    """Per pending request, what the first-fit tail of a pass compares in bulk, kept from pass to
    pass while the request is the same object: its shape (a number standing for :func:`_shape`),
    task count, CPUs needed at least, time limit in seconds (inf: none), whether an array
    throttle applies, and its job id. A memo: the rows say what the requests say."""

    SHAPE, TASKS, NEED, LIMIT, THROTTLED, JOB_ID = range(6)

    def __init__(self) -> None:
        self.row: dict[int, int] = {}  # id(request) -> its row
        self.requests: list[JobRequest] = []  # by row, kept alive so that their ids stay theirs
        self.shapes: dict[tuple, int] = {}
        self.table = np.zeros((0, 6))

    def shape_id(self, shape: tuple) -> int:
        return self.shapes.setdefault(shape, len(self.shapes))

    def rows(self, jobs: Sequence[JobRequest]) -> np.ndarray:
        """The table's rows for ``jobs``, added for those it does not hold yet."""
        rows = np.fromiter(map(self.row.get, map(id, jobs), itertools.repeat(-1)), dtype=np.int64, count=len(jobs))
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            new = [jobs[k] for k in missing.tolist()]
            rows[missing] = np.arange(len(self.requests), len(self.requests) + len(new))
            self.row.update((id(job), len(self.requests) + k) for k, job in enumerate(new))
            self.requests.extend(new)
            added = np.array([(self.shape_id(_shape(job)), job.ntasks, job.ntasks * max(1, job.cpus_per_task),
                               job.time_limit_min * 60 if job.time_limit_min is not None else _FOREVER,
                               bool(job.array_throttle), job.job_id) for job in new], dtype=np.float64)
            self.table = np.concatenate((self.table, added))
        return self.table[rows]

    def keep(self, jobs: Sequence[JobRequest]) -> None:
        """Forget the requests that are not among ``jobs`` once they are most of the table."""
        if len(self.requests) > 2 * len(jobs) + 1024:
            rows = [row for job in jobs if (row := self.row.get(id(job))) is not None]
            self.requests = [self.requests[row] for row in rows]
            self.table = self.table[rows]
            self.row = {id(job): k for k, job in enumerate(self.requests)}


class _Pass:
    """The state of one backfill pass: the profile, the candidate lists, the failures seen."""

    def __init__(self, snapshot: Snapshot, select: SelectPlugin, params: SchedulerParams, memo: ReleaseMemo,
                 nodes: NodeMemo):
        self.snapshot, self.select, self.params = snapshot, select, params
        self.now = snapshot.now
        self.candidates = Candidates(snapshot, nodes)
        self.profile = Profile(snapshot.now, nodes)
        self.memo = self.profile.releases(snapshot.running, params.bf_resolution_s, memo, snapshot.changes)
        # per request shape, the (tasks, end) of the requests that did not fit now: a frontier
        # where no entry asks for fewer tasks and ends sooner than another
        self.failed: dict[tuple, list[tuple[int, float]]] = {}
        self.gpus = gpu_ledger(snapshot, nodes)
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
        if self.gpus is not None and alloc.gpus:
            self.gpus.hold(alloc, self.now, end)
        if self.power is not None:
            self.power.start_now(alloc, end)
        elif self.meter is not None:
            self.meter.commit(alloc, end)

    def reserve(self, job: JobRequest, alloc: Allocation, start: float) -> None:
        end = job_end(job, start)
        self.profile.hold(alloc, start, end)
        if self.gpus is not None and alloc.gpus:
            self.gpus.hold(alloc, start, end)
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
        alloc = self._place(job, self.now, end)
        if alloc is None:
            failed[:] = [(tasks, until) for tasks, until in failed if tasks < job.ntasks or until < end]
            failed.append((job.ntasks, end))
        return alloc

    def _place(self, job: JobRequest, start: float, end: float) -> Allocation | None:
        """Where the job fits over [start, end) in the profile (None: nowhere)."""
        window = self.profile.window(start, end)
        if job.ntasks * max(1, job.cpus_per_task) > window.total:  # a task takes a CPU at least
            return None
        gpus = self.gpus.free(start, end) if self.gpus is not None and job.gpus else None
        return self.select.select(job, self.candidates.for_job(job, window.with_cpus(), start), window,
                                  self.snapshot.def_mem_per_cpu_mb, gpus)

    def earliest(self, job: JobRequest, power_share: Throttle | None = None) -> tuple[float, Allocation] | None:
        """The job's earliest start within bf_window (nodes, and power when it is planned), and where;
        with ``power_share``, a job its power limits hold: also when they let it."""
        now, params = self.now, self.params
        alloc = self.fits_now(job) if power_share is None else None
        if alloc is not None:
            alloc, reason = self._planned_power(job, alloc, now)
            if reason is None:
                return now, alloc  # most jobs at the head of a queue start at once: no timeline needed
        window_end = now + params.bf_window_min * 60
        times = set(self.profile.release_times(now, window_end, params.bf_resolution_s))
        if power_share is not None:
            times.update(t for t in power_share.power_times(job) if t <= window_end)
        for resv in self.snapshot.reservations.values():
            times.update(t for t in (resv.start, resv.end) if now < t <= window_end)
        if self.power is not None:
            times.update(t for t in self.power.release_times() if t <= window_end)
        ordered = sorted(times)
        need = job.ntasks * max(1, job.cpus_per_task)
        for start, total in zip(ordered, self.profile.total_free_at(ordered), strict=True):
            if total < need:  # not enough CPUs in the whole machine at that moment
                continue
            if power_share is not None and not power_share.power_fits(job, start):
                continue
            alloc = self._place(job, start, job_end(job, start))
            if alloc is not None:
                alloc, reason = self._planned_power(job, alloc, start)
                if reason is None:
                    return start, alloc
        return None

    def seize(self, job: JobRequest, seizer: preemption.Seizer) -> Allocation | None:
        """Where the job could run from now to its time limit, taking nothing reserved, were the
        running jobs it may preempt gone (Slurm's will-run test with preemptee candidates)."""
        end = job_end(job, self.now)
        gpus = self.gpus.free(self.now, end) if self.gpus is not None and job.gpus else None
        return seizer.seize(job, self.candidates.for_job(job, None), self.profile.window(self.now, end), gpus)

    def _planned_power(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """Power as the timeline plans it; plain admission only judges jobs starting now, elsewhere."""
        return self.power_fit(job, alloc, start) if self.power is not None else (alloc, None)


class BackfillScheduler:
    """Reservations for the top blocked jobs; later jobs start now only if they delay none of them."""

    backfill = True  # the controller gives it running jobs' end times every bf_interval

    def __init__(self, params: SchedulerParams | None = None):
        self.params = params or SchedulerParams()
        self.nodes = NodeMemo()  # one memo of the nodes for both kinds of pass
        self.strict = BuiltinScheduler(self.params, self.nodes)
        self.memo = ReleaseMemo()
        self.requests = _Requests()

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None:
        if not snapshot.backfill_due:
            self.strict.plan(snapshot, order, ineligible, select, throttle, decisions)
            return
        params = self.params
        bf = _Pass(snapshot, select, params, self.memo, self.nodes)
        self.memo = bf.memo
        seizer = preemption.Seizer(snapshot, select)
        reserved, tested = 0, 0
        per_user: Counter[str] = Counter()
        blocked: set[tuple[str, str]] = set()
        later: list[JobRequest] = []
        in_bulk = params.bf_candidate == "first" and params.bf_reservations > 0 and not params.bf_max_job_user
        for position, job in enumerate(order):
            if in_bulk and reserved >= params.bf_reservations:
                tested = self._first_fit_tail(order, position, tested, ineligible, bf, throttle, decisions)
                break
            reason: str | None = ineligible.get(job.job_id)
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
            if (refusal := throttle.refusal(job)) is not None:
                decisions.reasons[job.job_id] = refusal
                if refusal in ledger.POWER_REASONS and (params.bf_reservations == 0 or
                                                        reserved < params.bf_reservations):
                    # held by a power share: planned like the cap, when both its nodes and its power are free
                    found = bf.earliest(job, throttle)
                    if found is not None:
                        self._reserve(job, *found, bf, throttle, decisions)
                        reserved += 1
                continue
            if params.bf_reservations == 0 or reserved < params.bf_reservations:
                found = bf.earliest(job)
                now_alloc: Allocation | None
                if found is not None and found[0] == bf.now:
                    now_alloc, power_reason = bf.power_fit(job, found[1], bf.now)
                else:
                    now_alloc = bf.fits_now(job)
                    power_reason = bf.power_fit(job, now_alloc, bf.now)[1] if now_alloc is not None else None
                if found is not None and found[0] == bf.now and power_reason is None and now_alloc is not None:
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
                if qos_flag(snapshot, job, "NoReserve"):  # Slurm's NoReserve: no place is kept for it
                    continue
                blocked.add(key)
                if power_reason is None and seizer.on and seizer.may_want(job) and \
                        (seized := bf.seize(job, seizer)) is not None:
                    # it starts once its preemptees are gone: planned from now, waiting for Resources
                    found = (bf.now, seized)
                    decisions.reasons[job.job_id] = states.R_RESOURCES
                if found is not None:
                    self._reserve(job, *found, bf, throttle, decisions)
                    reserved += 1
            elif params.bf_candidate == "first":
                self._first_fit(job, bf, throttle, decisions)
            else:
                later.append(job)
        self._best_fit(later, bf, throttle, decisions)
        decisions.backfill_depth = tested
        self.requests.keep(order)

    def _first_fit_tail(self, order: Sequence[JobRequest], begin: int, tested: int, ineligible: Mapping[int, str],
                        bf: _Pass, throttle: Throttle, decisions: Decisions) -> int:
        """The first-fit candidates once every reservation is made, from ``order[begin]`` on: what
        the loop of :meth:`plan` does, but in bulk. Most candidates are rejected by
        :meth:`_Pass.fits_now` before any search (more CPUs than are free, or a request of their
        shape with no more tasks and no later end already failed); both only grow within a pass,
        so they are computed for all jobs at once, and only the others are tried, one by one, in
        order: they get the very reasons and starts the loop would give. Returns the jobs tested."""
        limit, now, columns = self.params.bf_max_job_test, bf.now, _Requests
        failures = [(self.requests.shape_id(shape), tasks, until)
                    for shape, frontier in bf.failed.items() for tasks, until in frontier]
        unlooked = np.fromiter(ineligible, dtype=np.int64, count=len(ineligible))
        position = begin
        while position < len(order) and tested < limit:
            chunk = order[position:position + max(64, limit - tested)]
            position += len(chunk)
            rows = self.requests.rows(chunk)
            ids = rows[:, columns.JOB_ID].astype(np.int64)
            eligible = ~_among(ids, unlooked)
            counted = np.cumsum(eligible)
            if counted[-1] > limit - tested:  # the job that makes ``limit`` is the last one looked at
                chunk = chunk[:int(np.searchsorted(counted, limit - tested)) + 1]
                rows, ids, eligible = rows[:len(chunk)], ids[:len(chunk)], eligible[:len(chunk)]
            tested += int(eligible.sum())
            shape, tasks, need = rows[:, columns.SHAPE], rows[:, columns.TASKS], rows[:, columns.NEED]
            end = now + rows[:, columns.LIMIT]
            rejected = need > bf.profile.total_now
            for failure in failures:
                rejected |= (shape == failure[0]) & (tasks >= failure[1]) & (end >= failure[2])
            if throttle.limits_on:  # a job a limit holds keeps the limit's reason, whatever its fit
                for i in np.flatnonzero(eligible).tolist():
                    refusal = throttle.refusal(chunk[i])
                    if refusal is not None:
                        decisions.reasons[chunk[i].job_id] = refusal
                        eligible[i] = False
            attended = rows[:, columns.THROTTLED] > 0  # a throttled job is looked at one by one
            at = 0
            while True:
                tried = np.flatnonzero((~rejected[at:] | attended[at:]) & eligible[at:])
                upto = at + int(tried[0]) if len(tried) else len(chunk)
                passed = np.flatnonzero(eligible[at:upto]) + at
                decisions.reasons.update(dict.fromkeys(ids[passed].tolist(), states.R_PRIORITY))
                if upto == len(chunk):
                    break
                job = chunk[upto]
                if (refusal := throttle.refusal(job)) is not None:
                    decisions.reasons[job.job_id] = refusal
                else:
                    outcome = self._first_fit(job, bf, throttle, decisions)
                    if outcome == _STARTED:
                        rejected |= need > bf.profile.total_now
                    elif outcome == _UNFIT:  # a failure: the requests it rules out now
                        failures.append((shape[upto], tasks[upto], end[upto]))
                        rejected |= (shape == shape[upto]) & (tasks >= tasks[upto]) & (end >= end[upto])
                at = upto + 1
        decisions.reasons.update(ineligible)
        return tested

    def _best_fit(self, later: list[JobRequest], bf: _Pass, throttle: Throttle, decisions: Decisions) -> None:
        """Start the best-fitting candidate, again and again, until none fits (BFF/BBF)."""
        key = _BEST.get(self.params.bf_candidate)
        waiting = list(later)
        while waiting and key is not None:
            fitting = []
            for job in waiting:
                if throttle.refusal(job) is None:
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
            decisions.reasons[job.job_id] = throttle.refusal(job) or states.R_PRIORITY

    def _first_fit(self, job: JobRequest, bf: _Pass, throttle: Throttle, decisions: Decisions) -> str:
        """A first-fit candidate, once every reservation is made: it starts now if it fits and the
        cap allows, else waits (Priority, or the cap's reason). The one path of first fit, for the
        loop of :meth:`plan` and the bulk of :meth:`_first_fit_tail` alike."""
        alloc = bf.fits_now(job)
        if alloc is None:
            decisions.reasons[job.job_id] = states.R_PRIORITY
            return _UNFIT
        alloc, reason = bf.power_fit(job, alloc, bf.now)
        if reason is not None:
            decisions.reasons[job.job_id] = reason
            return _REFUSED
        self._start(job, alloc, bf, throttle, decisions, backfilled=True)
        return _STARTED

    @staticmethod
    def _reserve(job: JobRequest, start: float, alloc: Allocation, bf: _Pass, throttle: Throttle,
                 decisions: Decisions) -> None:
        bf.reserve(job, alloc, start)
        throttle.planned(job, start)
        decisions.expected_start[job.job_id] = start

    @staticmethod
    def _start(job: JobRequest, alloc: Allocation, bf: _Pass, throttle: Throttle, decisions: Decisions,
               backfilled: bool) -> None:
        bf.start(job, alloc)
        decisions.starts.append((job.job_id, alloc))
        decisions.backfilled += int(backfilled)
        throttle.started(job)

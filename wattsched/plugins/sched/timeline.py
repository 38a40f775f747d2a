"""The backfill planner's timeline (as OAR's slot set, flux's planner): each node's free CPUs and
memory now and the steps by which they change later, running jobs' releases at their ends and the
holds a pass adds (a reservation takes resources at its start and gives them back at its end), and
the questions a pass asks of it: the least free resources over a window, the release times, the
machine's free total over time. The steps are numpy arrays, so each question is answered for all
nodes at once. ``ReleaseMemo`` keeps the running jobs' steps from pass to pass.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Collection, Iterator, KeysView, Mapping
from typing import Any

import numpy as np

from wattsched.memos import NodeMemo, Seen, job_changes
from wattsched.scheduling.records import Allocation, Changes, RunningJob

_FOREVER = math.inf
_FEW = 64  # up to this many values, Python's sort and set outrun numpy's (per-call set-up, measured)
_WALKED = 64  # up to this many nodes taken from, total_from_now walks their steps in Python (_TakenWalk)


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
        # the end times, and a row each of node indexes, CPUs, memory and job ids: two arrays to
        # filter or extend at each pass rather than five
        self.when = np.zeros(0)
        self.ints = np.zeros((4, 0), dtype=np.int64)
        self.steps: tuple[np.ndarray, ...] = (self.when, *self.ints)  # (end time, node, cpus, memory, job id)

    def update(self, running: Collection[RunningJob], changes: Changes | None,
               index: Mapping[str, int]) -> tuple[np.ndarray, ...]:
        delta = changes.running if changes is not None else None
        gone, new = job_changes(self.jobs, running, delta if self.seen.follows(changes, delta) else None)
        self.seen.read(changes)
        if not gone and not new:
            return self.steps
        when, ints = self.when, self.ints
        if gone:
            ids = ints[3]
            if len(gone) == 1:  # (most passes see one job end: a comparison, not a search)
                kept = ids != next(iter(gone)).job_id
            else:
                kept = ~among(ids, np.fromiter((j.job_id for j in gone), dtype=np.int64, count=len(gone)))
            when, ints = when[kept], ints[:, kept]
        rows = [(job.end_time, (i, cpus, job.mem_mb.get(node, 0), job.job_id)) for job in new
                if job.end_time is not None for node, cpus in job.cpus.items() if (i := index.get(node)) is not None]
        if rows:
            when = np.concatenate((when, [end for end, _ints in rows]))
            ints = np.concatenate((ints, np.array([row for _end, row in rows], dtype=np.int64).T), axis=1)
        self.when, self.ints = when, ints
        self.steps = (when, *ints)
        return self.steps


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
        self.total_now = nodes.total_cpus
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
        self._taking: set[int] = set()  # their nodes
        self._first_take = _FOREVER
        self._from_now: _FromNow | None = None
        self._walk: _TakenWalk | None = None  # total_from_now's answers over a few taking nodes
        # what was derived from the steps, by name, and the windows asked for: kept until a change
        self._changes = 0
        self._derived: dict[str, tuple[int, Any]] = {}
        self._windows: dict[tuple[float, float | None], Window] = {}

    def _step(self, when: float, nodes: np.ndarray, cpus: np.ndarray, mem: np.ndarray, takes: bool) -> None:
        """Add the change of the nodes' free CPUs and memory at ``when`` (counted now, if it is past);
        ``takes``: whether it may lower them (a hold's start), else it only gives back (its end)."""
        if when <= self.now:
            self.cpus_now[nodes] += cpus
            self.mem_now[nodes] += mem
            self.total_now += sum(cpus.tolist())  # (a job's few nodes: numpy's sum costs more)
            if self._free_now is not None:
                self._free_now = _patch(*self._free_now, self.names, nodes, self.cpus_now, self.mem_now)
            if self._from_now is not None:
                self._from_now.taken_off = None  # (it was read from the levels now)
            return
        times = np.empty(len(nodes))
        times.fill(when)
        self._holds.append((times, nodes, cpus, mem))
        taken = nodes[(cpus < 0) | (mem < 0)].tolist() if takes else []
        if taken:
            self._takes.extend(zip(itertools.repeat(when), taken))
            self._taking.update(taken)
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
        self._walk = None
        count = len(alloc.cpus)
        nodes = np.fromiter(map(self.index.__getitem__, alloc.cpus), dtype=np.int64, count=count)
        cpus = np.fromiter(alloc.cpus.values(), dtype=np.int64, count=count)
        mem = np.fromiter(map(alloc.mem_mb.get, alloc.cpus, itertools.repeat(0)), dtype=np.int64, count=count)
        self._step(start, nodes, -cpus, -mem, True)
        if end != _FOREVER:
            self._step(end, nodes, cpus, mem, False)

    def total_from_now(self, end: float) -> int:
        """The total of :meth:`window` (now, ``end``) without building the window: the CPUs free now,
        less what the holds taking before ``end`` take from the nodes they dip."""
        total = self.free_now()[1]
        if self._first_take >= end:
            return total
        taken_off: int | None
        if len(self._taking) <= _WALKED:
            if self._walk is None:
                self._walk = _TakenWalk(self)
            taken_off = self._walk.taken_off_by(end)
        else:
            taken_off = self._taking_from_now().taken_off_by(end, self.cpus_now)
        if taken_off is not None:
            return total - taken_off
        nodes, dip_cpus, _dip_mem = self._dips_from_now(end)
        now = self.cpus_now[nodes]
        return total + int((np.maximum(now + dip_cpus, 0) - np.maximum(now, 0)).sum())

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

    def during(self, start: float, end: float) -> tuple[Window, KeysView[str], int]:
        """The planner's question (planner.Levels): the window, its nodes with a free CPU, their total."""
        window = self.window(start, end)
        return window, window.with_cpus(), window.total

    def _dips_from_now(self, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`dips` for a window from now: read from every taking node's running lowest
        levels, kept until a hold takes more (or gives back on such a node before ``end``)."""
        dips = self._taking_from_now().dips(end)
        if dips is None:
            return self.dips(sorted({i for when, i in self._takes if when < end}), self.now, end)
        return dips

    def _taking_from_now(self) -> _FromNow:
        if self._from_now is None:
            dipping = sorted(self._taking)
            self._from_now = _FromNow(len(self.names), dipping, *self._steps_on(dipping, self.now, _FOREVER))
        return self._from_now

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
        when, node, values = when[order], node[order], np.stack((cpus, mem), axis=1)[order]
        first = np.concatenate(([True], node[1:] != node[:-1])).nonzero()[0]
        sums = values.cumsum(axis=0)  # a running sum per node gives each level reached
        return when, node, first, sums - (sums[first] - values[first]).repeat(_spans(first, len(node)), axis=0)

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        """Times at which something is given back, rounded up to ``resolution``, in order."""
        def compute() -> list[float]:
            when, _node, cpus, mem = self.steps()
            picked = when[((cpus > 0) | (mem > 0)) & (when > after) & (when <= until)]
            rounded = after + np.ceil((picked - after) / resolution) * resolution
            if len(rounded) > _FEW:
                return np.unique(rounded).tolist()
            return sorted(set(rounded.tolist()))  # (np.unique's set-up costs more on a few)
        return self._derive(f"released {after} {until} {resolution}", compute)

    def total_free_at(self, times: list[float]) -> list[int]:
        """Free CPUs of the whole machine at each of the (sorted) ``times``."""
        def over_time() -> tuple[np.ndarray, np.ndarray]:  # steps in time order, the running change
            when, _node, cpus, _mem = self.steps()
            order = when.argsort(kind="stable")
            return when[order], np.concatenate(([0], cpus[order].cumsum()))
        when, running = self._derive("over_time", over_time)
        return (self.total_now + running[when.searchsorted(times, side="right")]).tolist()


class _FromNow:
    """For windows from now: the steps on every node a hold takes from, with each node's running
    lowest CPU and memory levels, so that a window's dips are read at its end. A step given back
    on such a node afterwards (a job started now ending) is not in them: a window reaching past
    it is computed afresh.

    For :meth:`Profile.total_from_now`, the CPUs the dips take off the machine's free CPUs now, as
    a step function of the window's end: each step on a node changes that node's part by what its
    lowest level so far takes off its level now, so their running sum in time order is the whole
    answer, read for any end with one bisection (a pass asks it for many candidates' ends)."""

    def __init__(self, size: int, nodes: list[int], when: np.ndarray, node: np.ndarray, first: np.ndarray,
                 levels: np.ndarray):
        self.covers = np.zeros(size, dtype=bool)
        self.covers[nodes] = True
        self.when, self.node, self.first = when, node, first
        self.later = _FOREVER  # the first step given back on a covered node since
        # each node's levels shifted below all earlier nodes' makes one running minimum per node
        span = np.abs(levels).max(axis=0) * 2 + 1
        shift = (np.arange(len(first), dtype=np.int64)[:, None] * span).repeat(_spans(first, len(levels)), axis=0)
        self.lows = np.minimum.accumulate(levels - shift, axis=0) + shift  # CPUs, memory
        # (the step times in order, the CPUs taken off up to each): from the levels now, so a start now
        # sets it aside
        self.taken_off: tuple[list[float], list[int]] | None = None

    def gives(self, nodes: np.ndarray, when: float) -> None:
        if self.covers[nodes].any():
            self.later = min(self.later, when)

    def taken_off_by(self, end: float, cpus_now: np.ndarray) -> int | None:
        """The free CPUs now that the dips take off over a window from now to ``end`` (None: a
        release on a covered node since makes it a question for :meth:`dips`)."""
        if self.later < end:
            return None
        if self.taken_off is None:
            now = cpus_now[self.node]  # each node's part, after each of its steps:
            part = np.maximum(now, 0) - np.maximum(now + np.minimum(self.lows[:, 0], 0), 0)
            change = part.copy()
            change[1:] -= part[:-1]
            change[self.first] = part[self.first]  # (a node's first step starts from nothing taken)
            order = self.when.argsort(kind="stable")
            self.taken_off = self.when[order].tolist(), change[order].cumsum().tolist()
        return _taken_by(*self.taken_off, end)

    def dips(self, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if self.later < end:
            return None
        counts = np.add.reduceat((self.when < end).astype(np.int64), self.first)
        last = self.first + np.maximum(counts, 1) - 1
        lows = np.where((counts > 0)[:, None], np.minimum(self.lows[last], 0), 0)
        return self.node[self.first], lows[:, 0], lows[:, 1]


class _TakenWalk:
    """:meth:`_FromNow.taken_off_by` where a few nodes are taken from, walked in Python: their steps
    in time order (releases first at one time, then holds in the order added), each node's lowest
    level so far, and where that takes more of its free CPUs now, a step of the function. Over a
    few nodes numpy's set-up per call costs several times the walk (on KTH SP2's 100 nodes, where a
    reservation takes 8 on average, the timeline's builds were a tenth of a replay); the property
    test of tests/core/test_timeline.py holds the two equal. It holds until the next hold, which the
    profile drops it at (a hold changes the levels now or adds a step)."""

    def __init__(self, profile: Profile):
        taking = profile._taking
        covered = np.zeros(len(profile.names), dtype=bool)
        covered[list(taking)] = True
        steps: dict[int, list[tuple[float, int, int]]] = {i: [] for i in taking}
        when, node, cpus, _mem = profile._base
        kept = covered[node]
        for at, i, change in zip(when[kept].tolist(), node[kept].tolist(), cpus[kept].tolist(), strict=True):
            steps[i].append((at, 0, change))
        for order, (times, nodes, changes, _mem) in enumerate(profile._holds, 1):
            at = float(times[0])  # (a hold's block is at one time)
            for i, change in zip(nodes.tolist(), changes.tolist(), strict=True):
                if i in taking:
                    steps[i].append((at, order, change))
        parts: list[tuple[float, int]] = []  # (time, change of the CPUs taken off)
        for i, walk in steps.items():
            walk.sort()
            free = max(int(profile.cpus_now[i]), 0)
            level = low = taken = 0
            for at, _order, change in walk:
                level += change
                if level < low:
                    low = level
                    now_taken = free - max(free + low, 0)
                    if now_taken != taken:
                        parts.append((at, now_taken - taken))
                        taken = now_taken
        parts.sort()
        self.times = [at for at, _change in parts]
        self.taken = list(itertools.accumulate(change for _at, change in parts))

    def taken_off_by(self, end: float) -> int:
        return _taken_by(self.times, self.taken, end)


def _taken_by(times: list[float], taken: list[int], end: float) -> int:
    """The step function of the CPUs taken off, (``times``, ``taken``) in time order, read for a
    window from now to ``end``: what the steps before ``end`` come to."""
    steps = bisect.bisect_left(times, end)
    return taken[steps - 1] if steps else 0


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
    with_cpus = (cpus > 0).nonzero()[0]
    free = cpus[with_cpus].tolist()
    return zip([names[i] for i in with_cpus.tolist()],
               zip(free, np.maximum(mem[with_cpus], 0).tolist(), strict=True), strict=True), sum(free)


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


def _spans(first: np.ndarray, size: int) -> np.ndarray:
    """The lengths of the groups that begin at ``first`` (sorted) in a sequence of ``size``."""
    ends = np.empty(len(first), dtype=np.int64)
    ends[:-1] = first[1:]
    ends[-1:] = size
    return ends - first


def among(values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Which ``values`` are among ``targets`` (a few): a binary search each, where np.isin's set-up
    costs more than the search."""
    if not len(targets):
        return np.zeros(len(values), dtype=bool)
    targets = np.sort(targets)
    return targets[np.minimum(np.searchsorted(targets, values), len(targets) - 1)] == values

"""The planner's parts kept the plain way, slow and obvious: the oracle that the property tests hold
the fast parts, and the policies planned over them, equal to (tests/core/test_timeline.py,
tests/core/test_planner.py).

:class:`PlainLevels` is the backfill timeline (:class:`wattsched.plugins.sched.timeline.Profile`,
numpy steps behind caches) as each node's steps in a list, every question answered by walking them
in time order (at one time, running jobs' releases first, then holds in the order added).
:class:`PlainPowerPlan` is the power plan summing the busy nodes' watts node by node and looking
at a job's whole window wherever anything in it changes, where the fast plan looks only where the
power can rise or the cap fall."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from wattsched.memos import NodeMemo
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.scheduling.records import Allocation, Snapshot

Step = tuple[float, int, int, int]  # (time, order: 0 a release, k the k-th hold, CPUs, memory)


class PlainWindow(dict[str, tuple[int, int]]):
    """A window's least free CPUs and memory by node, as :class:`timeline.Window` gives them: a node
    without a free CPU throughout is not there and shows 0 CPUs and its least free memory."""

    def __init__(self, free: dict[str, tuple[int, int]], mem: dict[str, int]):
        super().__init__(free)
        self.mem = mem

    def __missing__(self, node: str) -> tuple[int, int]:
        return 0, self.mem[node]


class PlainLevels:
    def __init__(self, snapshot: Snapshot, nodes: NodeMemo, resolution: float):
        """From the node memo's levels now and the running jobs' ends: a job past its limit (being
        killed) gives its resources back at the next resolution step; one without a limit never."""
        self.now = snapshot.now
        self.free_now = {name: (int(nodes.cpus[i]), int(nodes.mem[i])) for i, name in enumerate(nodes.names)}
        self.total_now = sum(cpus for cpus, _mem in self.free_now.values())
        self.steps: dict[str, list[Step]] = {name: [] for name in nodes.names}
        self.holds = 0
        for job in snapshot.running:
            if job.end_time is not None:
                for node, cpus in job.cpus.items():
                    if node in self.steps:
                        self.steps[node].append((max(job.end_time, self.now + resolution), 0, cpus,
                                                 job.mem_mb.get(node, 0)))

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        self.holds += 1
        for node, cpus in alloc.cpus.items():
            mem = alloc.mem_mb.get(node, 0)
            self._step(node, start, -cpus, -mem)
            if end != math.inf:
                self._step(node, end, cpus, mem)

    def _step(self, node: str, when: float, cpus: int, mem: int) -> None:
        if when <= self.now:  # counted in the levels now
            now_cpus, now_mem = self.free_now[node]
            self.free_now[node] = (now_cpus + cpus, now_mem + mem)
            self.total_now += cpus
        else:
            self.steps[node].append((when, self.holds, cpus, mem))

    def during(self, start: float, end: float) -> tuple[Mapping[str, tuple[int, int]], Collection[str], int]:
        free: dict[str, tuple[int, int]] = {}
        least_mem: dict[str, int] = {}
        for node, (cpus, mem) in self.free_now.items():
            ordered = sorted(self.steps[node], key=lambda step: step[:2])
            cpus += sum(step[2] for step in ordered if step[0] <= start)
            mem += sum(step[3] for step in ordered if step[0] <= start)
            low_cpus, low_mem = cpus, mem
            for when, _order, step_cpus, step_mem in ordered:
                if start < when < end:
                    cpus, mem = cpus + step_cpus, mem + step_mem
                    low_cpus, low_mem = min(low_cpus, cpus), min(low_mem, mem)
            least_mem[node] = max(low_mem, 0)
            if low_cpus > 0:
                free[node] = (low_cpus, least_mem[node])
        return PlainWindow(free, least_mem), free.keys(), sum(cpus for cpus, _mem in free.values())

    def total_from_now(self, end: float) -> int:
        return self.during(self.now, end)[2]

    def release_times(self, after: float, until: float, resolution: float) -> list[float]:
        given_back = {when for steps in self.steps.values() for when, _order, cpus, mem in steps
                      if (cpus > 0 or mem > 0) and after < when <= until}
        return sorted({after + math.ceil((when - after) / resolution) * resolution for when in given_back})

    def total_free_at(self, times: list[float]) -> list[int]:
        return [self.total_now + sum(cpus for steps in self.steps.values() for when, _order, cpus, _mem in steps
                                     if when <= t) for t in times]


class PlainPowerPlan(PowerPlan):
    def _busy_extra(self, t: float) -> float:
        return float(sum(self.extra.get(name, 0) for name, release in self.release.items() if release > t))

    def moments(self, start: float, end: float, nodes: frozenset[str]) -> set[float]:
        """Every moment of [start, end) where something changes: held jobs' starts and ends, nodes'
        releases, power reservations' starts and ends, the schedule's changes of the cap."""
        snap = self.snap
        changes = [*(t for hold in self.holds for t in hold[:2]), *self.release.values(),
                   *(t for r in snap.reservations for t in (r.start, r.end)), *(t for t, _cap in snap.ahead)]
        return {start, *(t for t in changes if start < t < end)}

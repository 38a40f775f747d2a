"""Power in the backfill timeline: the cluster's maximum power over the coming hours, so that a
job blocked by the power cap gets a reservation when both its nodes and its power are free, and
no backfilled job may delay it in either (issue 5; the prototype of seed 003 only admitted jobs
at the present moment and so "degraded into first fit").

A node counts its extra watts (MaxWatts minus the watts of its idle, powered-down or down
state) while it is busy: from now until its running jobs' time limits end, during the window
of a reserved job that holds it, and, for a job being checked, during the job's own run. The
planned cap at time t is the cap (INFINITE: the cluster's MaxWatts) minus the power
reservations active at t, except the job's own. Over a job's window the power can only rise
where another reservation starts (a held job or a power reservation), so those moments and
the start are the only ones checked.
"""

from __future__ import annotations

import math

import numpy as np
from wattsched import states
from wattsched.power import PowerSnap
from wattsched.scheduling import Allocation, JobRequest, PowerMeter, RunningJob, job_end


class PowerPlan:
    def __init__(self, meter: PowerMeter, running: tuple[RunningJob, ...], now: float, grace_s: float):
        snap: PowerSnap = meter.snap
        self.snap, self.meter, self.now = snap, meter, now
        self.extra = {name: 0 if node.always_max else node.max - node.watts(snap.states.get(name, "idle"))
                      for name, node in snap.nodes.items()}
        self.release: dict[str, float] = dict.fromkeys(meter.busy, now + grace_s)  # e.g. COMPLETING nodes
        for job in running:
            # a job past its limit is being killed: its nodes are counted busy a little longer
            end = math.inf if job.end_time is None else max(job.end_time, now + grace_s)
            for name in job.cpus:
                self.release[name] = max(self.release.get(name, now), end)
        self.holds: list[tuple[float, float, frozenset[str]]] = []
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        self.static = meter.current - sum(self.extra.get(n, 0) for n in self.release)

    def start_now(self, alloc: Allocation, end: float) -> None:
        self.meter.commit(alloc, end)
        for name in alloc.cpus:
            self.release[name] = max(self.release.get(name, self.now), end)
        self._sorted = None

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        self.holds.append((start, end, frozenset(alloc.cpus)))

    def _busy_extra(self, t: float) -> float:
        """Extra watts of the nodes whose running (or just started) jobs still hold them at t."""
        if self._sorted is None:
            pairs = sorted((r, self.extra.get(n, 0)) for n, r in self.release.items())
            times = np.array([p[0] for p in pairs], dtype=float)
            tail = np.cumsum([p[1] for p in pairs][::-1])[::-1] if pairs else np.zeros(0)
            self._sorted = (times, np.append(tail, 0.0))
        times, tail = self._sorted
        return float(tail[np.searchsorted(times, t, side="right")])

    def level(self, t: float, nodes: frozenset[str]) -> tuple[float, float]:
        """(the cluster's maximum power at t, the part the given nodes add at t)."""
        held: set[str] = set()
        for start, end, names in self.holds:
            if start <= t < end:
                held |= names
        idle_at = [n for n in held | nodes if self.release.get(n, self.now) <= t]
        others = sum(self.extra.get(n, 0) for n in idle_at if n in held)
        mine = sum(self.extra.get(n, 0) for n in idle_at if n not in held)
        return self.static + self._busy_extra(t) + others, mine

    def check(self, job: JobRequest, alloc: Allocation, start: float) -> str | None:
        """None if the job fits under the cap and the planned caps over its whole run."""
        end = job_end(job, start)
        nodes = frozenset(alloc.cpus)
        limit = self.snap.limit()
        times = {start, *(s for s, _e, _n in self.holds if start < s < end),
                 *(r.start for r in self.snap.reservations if start < r.start < end)}
        for t in sorted(times):
            level, mine = self.level(t, nodes)
            if mine <= 0:
                continue  # nothing added: filling busy nodes always passes, as in the prototype
            if level + mine > limit:
                return states.R_POWER
            reserved = sum(r.watts for r in self.snap.reservations
                           if r.name != job.reservation and r.start <= t < r.end)
            if level + mine > limit - reserved:
                return states.R_POWER_RESERVED
        return None

    def release_times(self) -> list[float]:
        """When power comes back: node releases, held jobs' ends and power reservations' ends."""
        times = {t for t in self.release.values() if t != math.inf}
        times.update(e for _s, e, _n in self.holds)
        times.update(r.end for r in self.snap.reservations)
        return sorted(t for t in times if t > self.now)

"""Power in the backfill timeline: the cluster's maximum power over the coming hours, so that a
job blocked by the power cap gets a reservation when both its nodes and its power are free, and
no backfilled job may delay it in either (issue 5; Hautreux 2013's prototype only admitted jobs
at the present moment and so "degraded into first fit").

A node counts its extra watts (MaxWatts minus the watts of its idle, powered-down or down
state) while it is busy: from now until its running jobs' time limits end, during the window
of a reserved job that holds it, and, for a job being checked, during the job's own run. The
planned cap at time t is the cap the schedule sets at t (INFINITE: the cluster's MaxWatts)
minus the power reservations active at t, except the job's own. Over a job's window the power
can only rise, or the cap fall, where another reservation starts (a held job or a power
reservation) or the schedule changes the cap; and what the job adds grows where one of its nodes
stops being kept busy by others, the running jobs or a held job it shares it with (from then on
the job alone keeps it busy: on a cluster over a cap just lowered, a job that fills a node for a
moment must not keep it busy after). Those moments and the start are the only ones checked
(plainplanner.PlainPowerPlan, which looks wherever anything changes, is the test oracle). Being
over a cap lower than the one at the start is PowerReserved: power is set aside ahead.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np

from wattsched import states
from wattsched.capadmission import PowerSnap, verdict
from wattsched.nodestates import PowerState
from wattsched.scheduling.ledgers import PowerMeter
from wattsched.scheduling.records import Allocation, JobRequest, RunningJob, job_end


class PowerPlan:
    def __init__(self, meter: PowerMeter, running: Collection[RunningJob], now: float, grace_s: float):
        snap: PowerSnap = meter.snap
        self.snap, self.meter, self.now = snap, meter, now
        self._added: dict[tuple[str, int | None, float | None], float] = {}
        self.release: dict[str, float] = dict.fromkeys(meter.busy, now + grace_s)  # e.g. COMPLETING nodes
        for job in running:
            # a job past its limit is being killed: its nodes are counted busy a little longer
            end = math.inf if job.end_time is None else max(job.end_time, now + grace_s)
            for name in job.cpus:
                self.release[name] = max(self.release.get(name, now), end)
        # what each busy node adds over the idle state it returns to when released
        self.extra = {n: 0 if snap.nodes[n].always_max else snap.nodes[n].watts(PowerState.BUSY) - snap.nodes[n].idle
                      for n in self.release if n in snap.nodes}
        # (start, end, nodes, kHz, predicted watts a node) of the jobs the plan reserved
        self.holds: list[tuple[float, float, frozenset[str], int | None, float | None]] = []
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        self.static = meter.current - sum(self.extra.values())

    def _adds(self, name: str, khz: int | None, predicted: float | None = None) -> float:
        """What a node adds when a job makes it busy at ``khz`` (and its prediction, if counted),
        from the state it is in when free (kept for the pass: a check sums it over a job's nodes at
        every moment it looks at, ~2 million times in a replay of 1,500 jobs under a daily cap dip,
        measured)."""
        key = (name, khz, predicted)
        found = self._added.get(key)
        if found is None:
            node = self.snap.nodes.get(name)
            if node is None or node.always_max:
                found = 0.0
            else:
                state = self.snap.states.get(name, PowerState.IDLE)
                found = node.busy_for(khz, predicted) - \
                    node.watts(PowerState.IDLE if state == PowerState.BUSY else state)
            self._added[key] = found
        return found

    def start_now(self, alloc: Allocation, end: float) -> None:
        self.meter.commit(alloc, end)
        for name in alloc.cpus:
            if name not in self.release:
                self.extra[name] = self._adds(name, alloc.cpu_freq_khz, alloc.node_watts)
            self.release[name] = max(self.release.get(name, self.now), end)
        self._sorted = None

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        self.holds.append((start, end, frozenset(alloc.cpus), alloc.cpu_freq_khz, alloc.node_watts))

    def _busy_extra(self, t: float) -> float:
        """Extra watts of the nodes whose running (or just started) jobs still hold them at t."""
        if self._sorted is None:
            pairs = sorted((r, self.extra.get(n, 0)) for n, r in self.release.items())
            times = np.array([p[0] for p in pairs], dtype=float)
            tail = np.cumsum([p[1] for p in pairs][::-1])[::-1] if pairs else np.zeros(0)
            self._sorted = (times, np.append(tail, 0.0))
        times, tail = self._sorted
        return float(tail[np.searchsorted(times, t, side="right")])

    def level(self, t: float, nodes: frozenset[str], khz: int | None = None,
              predicted: float | None = None) -> tuple[float, float]:
        """(the cluster's maximum power at t, the part the given nodes at ``khz`` add at t)."""
        held: dict[str, float] = {}
        for start, end, names, hold_khz, hold_watts in self.holds:
            if start <= t < end:
                for name in names:
                    held[name] = max(held.get(name, 0.0), self._adds(name, hold_khz, hold_watts))
        free_at = [n for n in set(held) | nodes if self.release.get(n, self.now) <= t]
        others = sum(held[n] for n in free_at if n in held)
        mine = sum(self._adds(n, khz, predicted) for n in free_at if n not in held)
        return self.static + self._busy_extra(t) + others, mine

    def check(self, job: JobRequest, alloc: Allocation, start: float) -> str | None:
        """None if the job fits under the cap and the planned caps over its whole run."""
        end = job_end(job, start)
        nodes = frozenset(alloc.cpus)
        snap = self.snap
        first = snap.limit_at(start)
        for t in sorted(self.moments(start, end, nodes)):
            level, mine = self.level(t, nodes, alloc.cpu_freq_khz, alloc.node_watts)
            if mine <= 0:
                continue  # nothing added: filling busy nodes always passes, as in the prototype
            reserved = sum(r.watts for r in snap.reservations
                           if r.name != job.reservation and r.start <= t < r.end)
            limit = snap.limit_at(t)
            reason = verdict(level + mine, mine, limit, reserved)
            if reason is not None:
                return states.R_POWER_RESERVED if reason == states.R_POWER and limit < first else reason
        return None

    def moments(self, start: float, end: float, nodes: frozenset[str]) -> set[float]:
        """The moments of [start, end) a check of a job on ``nodes`` looks at: the start, and where
        the power can rise or the cap fall: a held job's start, a power reservation's start, the
        schedule's change, one of the job's nodes given back by the running or held jobs on it."""
        snap = self.snap
        return {start, *(h[0] for h in self.holds if start < h[0] < end),
                *(r.start for r in snap.reservations if start < r.start < end),
                *(t for t, _cap in snap.ahead if start < t < end),
                *(t for n in nodes if start < (t := self.release.get(n, self.now)) < end),
                *(h[1] for h in self.holds if start < h[1] < end and not nodes.isdisjoint(h[2]))}

    def release_times(self) -> list[float]:
        """When power comes back: node releases, held jobs' ends, power reservations' ends and the
        schedule's changes of the cap."""
        times = {t for t in self.release.values() if t != math.inf}
        times.update(h[1] for h in self.holds)
        times.update(r.end for r in self.snap.reservations)
        times.update(t for t, _cap in self.snap.ahead)
        return sorted(t for t in times if t > self.now)

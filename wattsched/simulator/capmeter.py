"""The cap over virtual time and its meter: the cap in force (PowerCap, and the steps of a
PowerCapSchedule as the controller's tick carries them, wattsched.capschedule), the cluster's draw
against it, the most it was over and for how long, and the draw's peak."""

from __future__ import annotations

import math

from wattsched import capschedule

_EPSILON_W = 1e-6  # a draw "over" the cap by a rounding error is not


class CapMeter:
    """The cap in force and the draw against it (``draw`` is the cluster's, kept by
    simulator.clusterpower through :meth:`add`)."""

    def __init__(self, cap: float | None, max_watts: float):
        self.cap = cap
        self.steps: list[capschedule.CapStep] = []
        self.max_watts = max_watts  # every node at MaxWatts: what "60 %" of a schedule's step is of
        self.now = math.inf  # in watts: the cap in force (INFINITE: none)
        self.event = -math.inf  # when a CAP event is queued for
        self.idle = 0  # CAP events in a row with nothing else happening (bounded: a queue the cap never lets go)
        self.changes: list[tuple[float, float]] = []  # (time, cap in watts) as they came
        self._ahead: tuple[tuple[float, float], ...] = ()
        self.draw = self.since = self.peak_w = self.over_w = self.over_s = 0.0

    @property
    def capped(self) -> bool:
        """Whether a cap is or will be in force."""
        return self.cap is not None or bool(self.steps)

    def start(self, now: float, draw: float, schedule: str) -> None:
        """The draw at the first submission, and the site's schedule read as of then."""
        self.draw, self.since = draw, now
        if schedule:
            self.steps = capschedule.read_file(schedule, now)

    def add(self, now: float, watts: float) -> None:
        """The draw changes by ``watts`` at ``now``."""
        self._meter(now)
        self.draw += watts
        self.observe()

    def _meter(self, now: float) -> None:
        """Count the time the draw was over the cap in force, up to ``now``."""
        if self.draw > self.now + _EPSILON_W:
            self.over_s += now - self.since
        self.since = now

    def observe(self) -> None:
        """The draw's peak, and how far over the cap it is."""
        self.peak_w = max(self.peak_w, self.draw)
        if self.draw > self.now + _EPSILON_W:
            self.over_w = max(self.over_w, self.draw - self.now)

    def roll(self, now: float) -> bool:
        """The schedule at ``now``, as the controller's tick carries it: open steps whose time came
        become the cap, windows over are dropped. Whether the cap in force changed."""
        self.cap, self.steps = capschedule.due(self.cap, self.steps, now, self.max_watts)
        cap, self._ahead = capschedule.timeline(self.cap, self.steps, now, self.max_watts)
        self._meter(now)
        self.now = math.inf if cap is None else cap
        if self.changes and self.changes[-1][1] == self.now:
            return False
        self.changes.append((now, self.now))
        return True

    def next_change(self, now: float) -> float | None:
        """When a CAP event is due next (None: none, or one is queued for then already): the next
        change, or a step beyond the planner's horizon (it is looked at again when it comes)."""
        self.observe()
        ahead = self._ahead
        upcoming = ahead[0][0] if ahead else min((s.start for s in self.steps if s.start > now), default=None)
        if upcoming is None or upcoming == self.event or self.idle > max(1, len(ahead)):
            return None
        self.event = upcoming
        return upcoming

"""The cluster's power over the last day, for the dashboard: every POWER_LOG_STEP_S the metered
watts (the nodes' last readings), the modelled watts (what PowerCap counts) and the cap then.

Kept in memory (a day is 17,280 samples, about 1 MiB): after a restart the chart starts again,
while energy, which is what accounting needs, lives in the nodes' counters and the database.
A period longer than the chart has room for is averaged into at most ``points`` buckets.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wattsched import capadmission
from wattsched.controller import capsetting, snapshots

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

POWER_LOG_STEP_S = 5.0
DAY_S = 86400


@dataclass(slots=True)
class PowerLog:
    step_s: float = POWER_LOG_STEP_S
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=int(DAY_S / POWER_LOG_STEP_S)))

    def due(self, now: float) -> bool:
        return not self.samples or now - self.samples[-1][0] >= self.step_s

    def record(self, now: float, measured: float, modelled: float, cap: float | None) -> None:
        self.samples.append((now, measured, modelled, cap))

    def series(self, since: float, points: int = 720) -> list[tuple[float, float, float, float | None]]:
        """The samples after ``since``, averaged into buckets when there are more than ``points``.
        An infinite cap is None (JSON has no infinity; the page draws no line)."""
        chosen = [s for s in self.samples if s[0] >= since]
        size = max(1, math.ceil(len(chosen) / max(1, points)))
        result = []
        for start in range(0, len(chosen), size):
            bucket = chosen[start:start + size]
            caps = [c for *_rest, c in bucket if c is not None and not math.isinf(c)]
            result.append((bucket[-1][0], sum(b[1] for b in bucket) / len(bucket),
                           sum(b[2] for b in bucket) / len(bucket), min(caps) if caps else None))
        return result


def record_power(log: PowerLog, state: ClusterState, now: float) -> None:
    """One sample of the cluster's power for the chart (the controller calls it each timer tick)."""
    if not log.due(now):
        return
    measured = sum(n.current_watts for n in state.nodes.values() if n.energy_samples)
    modelled = capadmission.summary(snapshots.node_power(state), snapshots.power_states(state))["current_watts"]
    log.record(now, measured, modelled, capsetting.cap_in_force(state, now))

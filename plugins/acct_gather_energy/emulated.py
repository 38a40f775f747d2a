"""acct_gather_energy/emulated: a node power model for virtual nodes.

    P = IdleWatts + (MaxWatts - IdleWatts) * u

where u is the CPU utilization of the jobs' processes on the node (CPU-seconds per second over
the node's CPUs, in [0, 1]). With ``EnergyEmulatedLag=tau`` the reading follows the model
through a first-order response (a BMC that averages, like the ~70 s ramp seed 004 observed):
P_read(t) = P_read(t0) + (P(t) - P_read(t0)) * (1 - exp(-(t - t0) / tau)); with
``EnergyEmulatedNoise=x`` each reading is multiplied by a factor drawn from N(1, x), seeded by
the node name so a run can be repeated.
"""

from __future__ import annotations

import math
import random

from wattsched.config import Config, NodeConf


class EmulatedEnergy:
    kind = "power"  # readings are watts; the agent integrates them

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.watts = {n.name: (n.idle_watts or 0, n.max_watts or n.idle_watts or 0) for n in nodes}
        self.lag_s = config.energy_emulated_lag_s
        self.noise = config.energy_emulated_noise
        self._rng = {n.name: random.Random(n.name) for n in nodes}
        self._shown: dict[str, tuple[float, float]] = {}

    def model(self, node: str, utilization: float) -> float:
        idle, most = self.watts[node]
        return idle + (most - idle) * min(1.0, max(0.0, utilization))

    def read(self, node: str, now: float, utilization: float) -> float:
        target = self.model(node, utilization)
        if self.lag_s > 0:
            previous = self._shown.get(node)
            if previous is not None:
                shown, when = previous
                target = shown + (target - shown) * (1 - math.exp(-max(0.0, now - when) / self.lag_s))
            self._shown[node] = (target, now)
        if self.noise > 0:
            target *= max(0.0, self._rng[node].gauss(1.0, self.noise))
        return target

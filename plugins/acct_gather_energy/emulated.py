"""acct_gather_energy/emulated: a node power model for virtual nodes.

    P = IdleWatts + sum over the node's jobs of (W(f_j) - IdleWatts) * b_j

where b_j is the busy share of job j (CPU-seconds per second of its processes over the node's
CPUs, measured against the share f_j / f_max the job gets at its frequency: see noded.throttle)
and W(f) the watts of a busy node at frequency f (``CpuFreqWatts``, else MaxWatts scaled by
(f / f_max)^3: wattsched.cpufreq.busy_watts). The busy shares are capped at 1 in total.

With ``EnergyEmulatedLag=tau`` the reading follows the model through a first-order response (a
BMC that averages, like the ~70 s ramp Georgiou et al. 2014 observed): P_read(t) = P_read(t0) + (P(t) -
P_read(t0)) * (1 - exp(-(t - t0) / tau)); with ``EnergyEmulatedNoise=x`` each reading is
multiplied by a factor drawn from N(1, x), seeded by the node name so a run can be repeated.
The emulated BMC (wattsched.noded.bmc) applies the same lag and noise to the same model.

A node with GPUs adds their watts (GpuIdleWatts, or GpuMaxWatts for each GPU a running job holds:
noded.gpus).

A node whose chassis is off or switching (power saving, wattsched.switching) draws
PowerSaveWatts or its SwitchOnWatts / SwitchOffWatts instead.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from wattsched import cpufreq, switching
from wattsched.config import Config, NodeConf
from wattsched.noded import chassis

Load = Sequence[tuple[float, int, int]]  # per job: (busy share, kHz, highest kHz)


class Response:
    """The lag and noise of a sensor that shows a model's watts."""

    def __init__(self, lag_s: float, noise: float):
        self.lag_s, self.noise = lag_s, noise
        self._shown: dict[str, tuple[float, float]] = {}
        self._rng: dict[str, random.Random] = {}

    def shown(self, node: str, target: float, now: float) -> float:
        if self.lag_s > 0:
            previous = self._shown.get(node)
            if previous is not None:
                shown, when = previous
                target = shown + (target - shown) * (1 - math.exp(-max(0.0, now - when) / self.lag_s))
            self._shown[node] = (target, now)
        if self.noise > 0:
            rng = self._rng.setdefault(node, random.Random(node))
            target *= max(0.0, rng.gauss(1.0, self.noise))
        return target


def off_watts(node: NodeConf) -> float:
    """What a switched-off node draws: PowerSaveWatts (default IdleWatts, as the power cap counts it)."""
    return float(node.power_save_watts if node.power_save_watts is not None else node.idle_watts or 0)


class EmulatedEnergy:
    kind = "power"  # readings are watts; the agent integrates them
    interval_mean = True  # the busy shares are CPU time since the last poll: a reading is that interval's mean

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.nodes = {n.name: n for n in nodes}
        self.extra_watts: Callable[[str], float] | None = None  # a node's GPUs' watts (noded.gpus)
        self.response = Response(config.energy_emulated_lag_s, config.energy_emulated_noise)
        self.spool = config.slurmd_spool_dir

    def model(self, node: str, load: Load, now: float | None = None) -> float:
        conf = self.nodes[node]
        if now is not None:
            state = chassis.read(self.spool, node).state(now, conf.switching)
            fixed = switching.state_watts(state, conf.switching, off_watts(conf))
            if fixed is not None:
                return fixed
        idle = float(conf.idle_watts or 0)
        most = float(conf.max_watts or conf.idle_watts or 0)
        room, watts = 1.0, idle
        for busy, khz, f_max in load:
            share = min(room, max(0.0, busy))
            room -= share
            full = cpufreq.busy_watts(khz, f_max, idle, most, conf.cpu_freq_watts) if khz and f_max else most
            watts += (full - idle) * share
        return watts + (self.extra_watts(node) if self.extra_watts is not None else 0.0)

    def read(self, node: str, now: float, load: Load) -> float:
        return self.response.shown(node, self.model(node, load, now), now)

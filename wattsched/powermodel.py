"""The power model of a virtual node, shared by acct_gather_energy/emulated (the agent's readings)
and the emulated BMCs (wattsched.noded.bmc, what IPMI reads):

    P = IdleWatts + sum over the node's jobs of (W(f_j) - IdleWatts) * b_j

where b_j is the busy share of job j (CPU-seconds per second of its processes over the node's
CPUs, measured against the share f_j / f_max the job gets at its frequency: see noded.throttle)
and W(f) the watts of a busy node at frequency f (``CpuFreqWatts``, else MaxWatts scaled by
(f / f_max)^3: wattsched.cpufreq.busy_watts). The busy shares are capped at 1 in total. A node
with GPUs adds their watts (GpuIdleWatts, or GpuMaxWatts for each GPU a running job holds:
noded.gpus), which its agent passes as ``extra``.

A node whose chassis is off or switching (power saving, wattsched.switching) draws
PowerSaveWatts or its SwitchOnWatts / SwitchOffWatts instead.

A sensor shows the model through ``Response``: with ``EnergyEmulatedLag=tau`` the reading follows
it through a first-order response (a BMC that averages, like the ~70 s ramp Georgiou et al. 2014
observed): P_read(t) = P_read(t0) + (P(t) - P_read(t0)) * (1 - exp(-(t - t0) / tau)); with
``EnergyEmulatedNoise=x`` each reading is multiplied by a factor drawn from N(1, x), seeded by the
node name so a run can be repeated.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from wattsched import cpufreq, switching
from wattsched.config import NodeConf

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


def switched_watts(node: NodeConf, chassis_state: str) -> float | None:
    """What a node draws while its chassis is off or switching; None while it is on."""
    return switching.state_watts(chassis_state, node.switching, off_watts(node))


def node_watts(node: NodeConf, load: Load, chassis_state: str = switching.ON, extra: float = 0.0) -> float:
    """The model's watts for a node carrying ``load``, its GPUs drawing ``extra``."""
    fixed = switched_watts(node, chassis_state)
    if fixed is not None:
        return fixed
    idle = float(node.idle_watts or 0)
    most = float(node.max_watts or node.idle_watts or 0)
    room, watts = 1.0, idle
    for busy, khz, f_max in load:
        share = min(room, max(0.0, busy))
        room -= share
        full = cpufreq.busy_watts(khz, f_max, idle, most, node.cpu_freq_watts) if khz and f_max else most
        watts += (full - idle) * share
    return watts + extra


def limited_khz(node: NodeConf, khz: int, f_max: int, limit: float | None, load: float = 1.0) -> int:
    """The frequency a virtual node's CPUs run at under its power limit, its jobs keeping ``load``
    of its CPUs busy (1: all of them, all the time): as set when the node then draws no more than
    the limit, else the one at which it draws the limit exactly (RAPL holds an average, moving
    between its clock steps: the mean frequency is between them), and no lower than the node's
    lowest."""
    if limit is None or not khz or not f_max or load <= 0:
        return khz
    idle, most = float(node.idle_watts or 0), float(node.max_watts or node.idle_watts or 0)

    def draws(f: float) -> float:
        return idle + (cpufreq.busy_watts(int(f), f_max, idle, most, node.cpu_freq_watts) - idle) * load

    if draws(khz) <= limit:
        return khz
    low = float(min(cpufreq.ladder(node.cpu_freq_watts)))
    if low >= khz or draws(low) >= limit:
        return int(min(low, khz))
    high = float(khz)
    for _ in range(40):  # the watts grow with the frequency: halve the interval to the kHz
        middle = (low + high) / 2
        low, high = (middle, high) if draws(middle) <= limit else (low, middle)
    return int(low)

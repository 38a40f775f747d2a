"""acct_gather_energy/emulated: a virtual node's readings from the emulated power model
(wattsched.powermodel: its formula, lag and noise), as the emulated BMC shows the same model."""

from __future__ import annotations

from collections.abc import Callable

from wattsched import powermodel, switching
from wattsched.config import Config, NodeConf
from wattsched.powermodel import Load


class EmulatedEnergy:
    kind = "power"  # readings are watts; the agent integrates them
    interval_mean = True  # the busy shares are CPU time since the last poll: a reading is that interval's mean

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.nodes = {n.name: n for n in nodes}
        self.extra_watts: Callable[[str], float] | None = None  # a node's GPUs' watts (noded.gpus)
        # a node's chassis state at a time, as its agent reads it (noded.chassis); on without one
        self.chassis_state: Callable[[str, float], str] | None = None
        self.response = powermodel.Response(config.energy_emulated_lag_s, config.energy_emulated_noise)

    def model(self, node: str, load: Load, now: float | None = None) -> float:
        state = switching.ON
        if now is not None and self.chassis_state is not None:
            state = self.chassis_state(node, now)
        extra = self.extra_watts(node) if self.extra_watts is not None else 0.0
        return powermodel.node_watts(self.nodes[node], load, state, extra)

    def read(self, node: str, now: float, load: Load) -> float:
        return self.response.shown(node, self.model(node, load, now), now)

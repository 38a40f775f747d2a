"""acct_gather_energy/none: no energy sensor; nodes report no energy."""

from __future__ import annotations

from wattsched.config import Config, NodeConf


class NoEnergy:
    kind = "none"

    def __init__(self, config: Config, nodes: list[NodeConf]):
        del config, nodes

    def read(self, node: str, now: float, load: object) -> float:
        raise NotImplementedError("acct_gather_energy/none has no readings")

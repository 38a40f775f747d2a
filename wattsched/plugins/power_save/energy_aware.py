"""The energy-aware FIFO / backfill of Mämmelä et al. 2011 (E-FIFO, E-BFF, E-BBF): idle nodes are switched
off when the first job in the queue is estimated to start more than ``threshold`` seconds from
now (50 s in the seed), or when nothing is queued. Nodes come back when the scheduler allocates
them to a job."""

from __future__ import annotations

from collections.abc import Mapping

from wattsched.powersave import Decision, PowerSaveSnap, first_start, switchable_idle


class EnergyAware:
    def __init__(self, threshold: float = 50.0, **_ignored: object):
        self.threshold = threshold

    def decide(self, snap: PowerSaveSnap, memory: Mapping) -> Decision:
        if first_start(snap) - snap.now <= self.threshold:
            return Decision()
        return Decision(suspend=[n.name for n in switchable_idle(snap)])

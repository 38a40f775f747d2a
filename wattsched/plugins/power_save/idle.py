"""Slurm's idle timeout (SuspendTime), which is also the opportunistic shutdown of Poquet 2017:
a node idle for at least ``t_idle`` seconds is switched off."""

from __future__ import annotations

from collections.abc import Mapping

from wattsched.powersave import Decision, PowerSaveSnap, switchable_idle


class IdleTimeout:
    def __init__(self, t_idle: float = 600.0, **_ignored: object):
        self.t_idle = t_idle

    def decide(self, snap: PowerSaveSnap, memory: Mapping) -> Decision:
        return Decision(suspend=[n.name for n in switchable_idle(snap) if snap.now - n.idle_since >= self.t_idle])

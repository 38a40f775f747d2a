"""Reclaiming power under a cap (Hautreux 2013, Example 2): when the first job blocked by the power
cap (PowerNotAvail) would fit if some idle nodes drew PowerSaveWatts instead of IdleWatts,
switch off just enough of them, from the end of the node order so that the job keeps the
first ones. Nodes already switching off count as reclaimed. A node switched off this way is
used again only when the cap allows it: the scheduler's power admission sees it at
PowerSaveWatts and the job that would wake it at MaxWatts."""

from __future__ import annotations

import math
from collections.abc import Mapping

from wattsched import states
from wattsched.nodestates import PowerState
from wattsched.powersave import Decision, PowerSaveSnap


class Reclaim:
    def __init__(self, **_ignored: object):
        pass

    def decide(self, snap: PowerSaveSnap, memory: Mapping) -> Decision:
        power = snap.power
        blocked = next((j for j in snap.pending if j.reason == states.R_POWER), None)
        if power is None or blocked is None or power.cap == math.inf:
            return Decision()
        nodes = power.nodes
        current = sum(node.watts(power.states.get(name, PowerState.IDLE)) for name, node in nodes.items())
        idle = [n for n in snap.nodes if n.state == PowerState.IDLE and n.name in nodes]
        if len(idle) <= blocked.nodes:
            return Decision()
        # the job takes the first idle nodes in order; it adds what they need to get busy
        ordered = sorted(idle, key=lambda n: n.name)
        added = sum(nodes[n.name].max - nodes[n.name].idle for n in ordered[:blocked.nodes])
        on_the_way = sum(nodes[n.name].idle - nodes[n.name].save for n in snap.nodes
                         if n.state == PowerState.SWITCHING_OFF and n.name in nodes)
        missing = current + added - on_the_way - power.limit()
        if missing <= 0:
            return Decision()  # blocked by something the nodes cannot give back (or already reclaimed)
        chosen = []
        for node in reversed(ordered[blocked.nodes:]):
            saving = nodes[node.name].idle - nodes[node.name].save
            if node.excluded or saving <= 0 or nodes[node.name].always_max:
                continue
            chosen.append(node.name)
            missing -= saving
            if missing <= 0:
                return Decision(suspend=chosen)
        return Decision()  # switching them all off would not be enough: leave them on

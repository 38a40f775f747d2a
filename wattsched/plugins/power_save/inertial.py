"""The inertial shutdown of Poquet 2017: the number of usable nodes follows the system's
unresponsiveness, with inertia.

At every call the unresponsiveness is estimated as the time the usable nodes (on, or switching
on) need to work through the queue: sum over pending jobs of nodes x time limit, divided by the
usable nodes. Every ``period`` seconds, MU, the mean of those estimates since the last periodic
call, drives a two-state machine (initially *awakening*):

- MU >= ``mu_threshold``: awakening, and decide now;
- awakening and MU <= the previous MU: become sedating, no decision this time;
- sedating and MU > the previous MU: become awakening, no decision this time;
- otherwise decide now.

A decision switches nb = min(max(f(|S_e|), 1), |S_a|) nodes: on (off nodes) when awakening, off
(idle nodes) when sedating, where S_a are the nodes that can be switched that way and S_e the
nodes switched since the previous periodic call (none after a call without a decision); f is
the inertia function, ``double`` (2x, the seed's)
or ``plus1`` (x + 1)."""

from __future__ import annotations

from collections.abc import Mapping

from wattsched.nodestates import PowerState
from wattsched.powersave import Decision, PowerSaveSnap, PsNode, queue_load, switchable_idle

AWAKENING, SEDATING = "awakening", "sedating"
INERTIA = {"double": lambda x: 2 * x, "plus1": lambda x: x + 1}


_UNUSABLE = (PowerState.OFF, PowerState.SWITCHING_OFF, PowerState.DOWN)


class Inertial:
    def __init__(self, period: float = 300.0, mu_threshold: float = 500.0, inertia: str = "double",
                 **_ignored: object):
        if inertia not in INERTIA:
            raise ValueError(f"inertia '{inertia}' is not one of {', '.join(INERTIA)}")
        self.period, self.mu_threshold, self.f = period, mu_threshold, INERTIA[inertia]

    def decide(self, snap: PowerSaveSnap, memory: Mapping) -> Decision:
        usable = sum(1 for n in snap.nodes if n.state not in _UNUSABLE)
        estimate = queue_load(snap) / max(1, usable)
        mem = {"state": AWAKENING, "last_call": snap.now, "sum": 0.0, "count": 0, "prev_mu": None,
               "switched": 0, **memory}
        mem["sum"] += estimate
        mem["count"] += 1
        if snap.now - mem["last_call"] < self.period:
            return Decision(memory=mem)
        mu = mem["sum"] / mem["count"]
        prev = mem["prev_mu"]
        decide_now = True
        if mu >= self.mu_threshold:
            mem["state"] = AWAKENING
        elif prev is not None and mem["state"] == AWAKENING and mu <= prev:
            mem["state"], decide_now = SEDATING, False
        elif prev is not None and mem["state"] == SEDATING and mu > prev:
            mem["state"], decide_now = AWAKENING, False
        decision = Decision()
        if decide_now:
            pool: list[PsNode] = sorted((n for n in snap.nodes if n.state == PowerState.OFF), key=lambda n: n.name) \
                if mem["state"] == AWAKENING else switchable_idle(snap)
            nb = min(max(self.f(mem["switched"]), 1), len(pool))
            chosen = [n.name for n in pool[:nb]]
            if mem["state"] == AWAKENING:
                decision.resume = chosen
            else:
                decision.suspend = chosen
            mem["switched"] = nb
        else:
            # S_e is what was switched since the last periodic call: after a call without a
            # decision (every change of direction makes one), the inertia starts again from one
            # node, instead of switching twice the last decision's count the other way at once
            mem["switched"] = 0
        mem.update(last_call=snap.now, sum=0.0, count=0, prev_mu=mu)
        decision.memory = mem
        return decision


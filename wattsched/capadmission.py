"""Power cap admission: the cluster's maximum power from node states, and whether a job may start under
the cap and the planned caps (Hautreux 2013, section 4), as pure functions.

Each node declares IdleWatts, MaxWatts, PowerSaveWatts (default IdleWatts) and DownWatts (default
MaxWatts). The cluster's *current* maximum power sums, per node, the watts of its state: busy
(allocated or mixed) -> MaxWatts (or less: at a capped frequency, CpuFreqWatts; under
PowerCapAdmission=predicted, a job with nodes to itself at what its earlier runs drew, plus a
margin), idle -> IdleWatts, powered down -> PowerSaveWatts, down ->
DownWatts; a node with PowerCapPriority=0 always counts MaxWatts (and is always usable).
MinWatts has every node powered down; MaxWatts every node busy; AdjustedMaxWatts every node
busy except the powered-down and down ones, which keep their own watts.

A job may start on candidate nodes when the current maximum power with those nodes busy stays
within the cap, and within the cap minus every power reservation that overlaps its run, and
under every lower cap the schedule sets during its run (the *planned* caps; with
PowerCap=INFINITE the cap is the cluster's MaxWatts). A job of a power reservation may use that
reservation's watts. The cap's changes ahead (wattsched.capschedule) come as (time, cap) pairs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wattsched import states
from wattsched.nodestates import PowerState

INFINITE = math.inf
# the states the cap counts, looked up once: the cap sums every node's watts at every pass, and an
# enum member's lookup costs ~90 ns against ~10 ns for a module constant (measured)
_BUSY, _IDLE, _OFF, _DOWN = PowerState.BUSY, PowerState.IDLE, PowerState.OFF, PowerState.DOWN


@dataclass(frozen=True, slots=True)
class NodePower:
    """A node's watts by state; ``busy`` when it runs at a capped frequency now (else MaxWatts);
    ``freq_watts``: (kHz, watts while busy at that frequency), highest first (CpuFreqWatts)."""

    idle: int
    max: int
    save: int
    down: int
    always_max: bool = False
    busy: float | None = None
    freq_watts: tuple[tuple[int, int], ...] = ()

    def watts(self, state: PowerState) -> float:
        """Its watts in a state the cap counts (see cap_state): busy, idle, off or down."""
        if self.always_max:
            return self.max
        if state == _BUSY:
            return self.max if self.busy is None else self.busy
        if state == _IDLE:
            return self.idle
        if state == _OFF:
            return self.save
        if state == _DOWN:
            return self.down
        raise ValueError(f"the cap counts no node as {state!r} (see cap_state)")

    def busy_at(self, khz: int | None) -> int:
        """Watts while busy at ``khz`` (None: full speed, MaxWatts)."""
        if khz is None or self.always_max:
            return self.max
        return next((w for f, w in self.freq_watts if f == khz), self.max)

    def busy_for(self, khz: int | None, predicted: float | None) -> float:
        """Watts while busy at ``khz`` with a job its earlier runs predict at ``predicted`` watts a
        node (None: no prediction), never less than idle nor more than at that frequency."""
        full = self.busy_at(khz)
        if predicted is None or self.always_max:
            return full
        return min(full, max(self.idle, predicted))


@dataclass(frozen=True, slots=True)
class PowerResv:
    """Watts set aside over [start, end) for the jobs of one reservation."""

    name: str
    start: float
    end: float
    watts: int


@dataclass(frozen=True, slots=True)
class PowerSnap:
    """What admission needs: each node's watts and state, the cap and the power reservations."""

    nodes: Mapping[str, NodePower]
    states: Mapping[str, PowerState]  # each node as the cap counts it (cap_state)
    cap: float  # watts, or INFINITE: the cap in force now
    reservations: tuple[PowerResv, ...] = ()
    ahead: tuple[tuple[float, float], ...] = ()  # the cap's scheduled changes: (from when, cap), by time
    margin: float | None = None  # PowerCapAdmission=predicted: the margin over a job's prediction
    # PowerPlugin=power/balance: a job that does not fit at full power may start with its nodes
    # held by a limit to what fits (scheduling.ledgers.fit_power)
    balancing: bool = False
    max_watts: int = field(init=False)  # every node busy; summed once, admission asks for it often

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_watts", sum(n.max for n in self.nodes.values()))

    def limit(self) -> float:
        """The cap in watts: INFINITE means the cluster's MaxWatts."""
        return float(self.max_watts) if self.cap == INFINITE else self.cap

    def limit_at(self, t: float) -> float:
        """The cap in watts the schedule sets at ``t`` (from now on)."""
        cap = self.cap
        for when, value in self.ahead:
            if when > t:
                break
            cap = value
        return float(self.max_watts) if cap == INFINITE else cap

    def lowest(self, start: float, end: float) -> float:
        """The lowest cap in watts over [start, end)."""
        return min([self.limit_at(start), *(self.limit_at(t) for t, _cap in self.ahead if start < t < end)])


def predicted_node_watts(snap: PowerSnap, exp_watts: float, nodes_min: int, exclusive: bool) -> float | None:
    """What each node of a job is counted busy at, from its earlier runs' mean power (None: MaxWatts).
    Only with PowerCapAdmission=predicted, and only for a job that has nodes to itself (another
    job on its nodes could draw more): its mean watts spread over its fewest nodes (as many or
    fewer than its earlier runs had: never less a node than they drew), plus the margin."""
    if snap.margin is None or exp_watts <= 0 or not exclusive:
        return None
    return exp_watts / max(1, nodes_min) * (1 + snap.margin)


def cap_state(state: PowerState, held: bool) -> PowerState:
    """What the cap counts a node as, from its power state (wattsched.nodestates.power_state): a node
    switching counts by what it holds, busy if a job holds it (it will run) and idle otherwise,
    until it is off: the cap is never broken by a switch under way."""
    if state in (PowerState.SWITCHING_ON, PowerState.SWITCHING_OFF):
        return PowerState.BUSY if held else PowerState.IDLE
    return state


def summary(nodes: Mapping[str, NodePower], node_states: Mapping[str, PowerState]) -> dict[str, int]:
    """scontrol show powercap's figures (without the cap)."""
    current = adjusted = minimum = maximum = 0.0
    for name, node in nodes.items():
        state = node_states.get(name, PowerState.IDLE)
        current += node.watts(state)
        minimum += node.watts(PowerState.OFF)
        maximum += node.max
        adjusted += node.watts(state) if state in (PowerState.OFF, PowerState.DOWN) else node.max
    return {"min_watts": round(minimum), "current_watts": round(current), "adjusted_max_watts": round(adjusted),
            "max_watts": round(maximum)}


def extra_watts(snap: PowerSnap, busy_now: Iterable[str]) -> dict[str, float]:
    """Per node, the watts it adds when it goes from its state now to busy (0 if already busy)."""
    already = set(busy_now)
    return {name: 0 if name in already else node.max - node.watts(snap.states.get(name, PowerState.IDLE))
            for name, node in snap.nodes.items()}


def reserved_watts(snap: PowerSnap, start: float, end: float, own: str = "") -> int:
    """Watts of the power reservations overlapping [start, end], except the job's own."""
    return sum(r.watts for r in snap.reservations if r.name != own and r.start <= end and start <= r.end)


def verdict(total: float, added: float, limit: float, reserved: float) -> str | None:
    """Slurm's pending reason for a cluster at ``total`` watts once a job adds ``added``: over the
    cap (PowerNotAvail) or only over the cap minus ``reserved`` watts (PowerReserved); None: fine.
    A job that adds nothing is not refused by the cap itself (the cluster may be over a cap just
    lowered), but still by a reservation."""
    if total > limit and added > 0:
        return states.R_POWER
    if reserved and total > limit - reserved:
        return states.R_POWER_RESERVED
    return None


def admission(snap: PowerSnap, current: float, added: float, start: float, end: float,
              own_reservation: str = "") -> str | None:
    """The verdict for ``added`` watts on top of ``current`` under the cap, every power
    reservation overlapping [start, end] and the lowest cap scheduled over it (the prototype's
    plain admission, with the schedule's dips counted as power set aside)."""
    limit = snap.limit()
    dip = max(0.0, limit - snap.lowest(start, end)) if snap.ahead else 0.0
    return verdict(current + added, added, limit, reserved_watts(snap, start, end, own_reservation) + dip)

"""The moving power budget (PowerPlugin=power/balance): each busy node's hardware limit, moved
from the nodes that do not use theirs to the nodes that would use more, within the cap.

The budget is what the cap leaves the busy nodes: the cap now, less what every other node draws
in its state (idle, off, down, as the cap counts them) and the power reservations in force. Every
``balance_interval`` seconds each busy node is judged by its measured draw against its limit, with
the thresholds and rates of Slurm's power/cray_aries (PowerParameters, its names and defaults):

- a node that ran a job started in the last ``recent_job`` seconds, or that has no limit yet or
  no reading, is to be *raised* to an even share of what is left (its workload is new);
- a node whose last reading does not yet cover a whole interval under its limit *keeps* it (a
  reading that straddles a change measures the old limit: judged by it, a node just raised would
  look as if it did not use its new watts, and be lowered again);
- under ``lower_threshold`` % of its limit, it is *lowered* by the smaller of ``decrease_rate`` %
  of its span (MaxWatts - IdleWatts) and half of what it leaves unused;
- up to ``upper_threshold`` % of its limit, it *keeps* it;
- over that, it is to be *raised* by ``increase_rate`` % of its span, at most an even share of
  what is left.

The lowered and kept limits are taken from the budget first; when they already pass it, or leave
the nodes to be raised less than their floors, they are all cut evenly (none under its floor) by
what is missing. What remains is shared by the nodes to be raised, in name order, each taking its
due or an even share of the rest, whichever is less, re-evened after each. No limit is under a
node's IdleWatts (no hardware holds a node under what it draws idle) nor over its MaxWatts or the
CapWatts an administrator set; the sum of the limits stays within the budget unless even the
floors pass it.

Pure: a snapshot of the busy nodes and an explicit ``now`` in, the limits out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Slurm's PowerParameters for power/cray_aries: option -> default
DEFAULTS = {"balance_interval": 30, "lower_threshold": 90, "upper_threshold": 95, "decrease_rate": 50,
            "increase_rate": 20, "recent_job": 300}


@dataclass(frozen=True, slots=True)
class Params:
    balance_interval: int = DEFAULTS["balance_interval"]
    lower_threshold: int = DEFAULTS["lower_threshold"]
    upper_threshold: int = DEFAULTS["upper_threshold"]
    decrease_rate: int = DEFAULTS["decrease_rate"]
    increase_rate: int = DEFAULTS["increase_rate"]
    recent_job: int = DEFAULTS["recent_job"]


def parse(text: str) -> Params:
    """PowerParameters: ``name=N`` options, comma-separated (Slurm's names); others refused."""
    values: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        name = name.strip().lower()
        if name not in DEFAULTS:
            raise ValueError(f"unknown PowerParameters option '{name}' (known: {', '.join(DEFAULTS)})")
        if not value.strip().isdigit():
            raise ValueError(f"PowerParameters {name} needs a whole number, not '{value}'")
        values[name] = int(value)
    params = Params(**values)
    if not 0 < params.lower_threshold <= params.upper_threshold <= 100:
        raise ValueError("PowerParameters needs 0 < lower_threshold <= upper_threshold <= 100")
    if params.balance_interval < 1 or not 0 <= params.decrease_rate <= 100 or not 0 <= params.increase_rate <= 100:
        raise ValueError("PowerParameters needs balance_interval >= 1 and rates from 0 to 100")
    return params


@dataclass(frozen=True, slots=True)
class BusyNode:
    """A busy node as the balance sees it: its floor and top, its limit now, what it drew."""

    name: str
    floor: float  # IdleWatts
    top: float  # MaxWatts, or the administrator's CapWatts if lower
    limit: float | None  # the limit it is held to now (None: none yet)
    watts: float | None  # its measured power over the last interval (None: unknown)
    job_start: float  # when its newest job started
    settled: bool = True  # its last reading was taken wholly under its limit


def balance(budget: float, nodes: Mapping[str, BusyNode], params: Params, now: float) -> dict[str, float]:
    """Each busy node's new limit (see the module docstring)."""
    settled: dict[str, float] = {}  # lowered or kept
    raise_to: dict[str, float | None] = {}  # the nodes to raise: their due (None: an even share)
    for name in sorted(nodes):
        node = nodes[name]
        if now - node.job_start < params.recent_job or node.limit is None or node.watts is None:
            raise_to[name] = None
            continue
        span = max(0.0, node.top - node.floor)
        if not node.settled:
            settled[name] = _bounded(node.limit, node)
        elif node.watts < node.limit * params.lower_threshold / 100:
            lowered = node.limit - min(span * params.decrease_rate / 100, (node.limit - node.watts) / 2)
            settled[name] = _bounded(lowered, node)
        elif node.watts <= node.limit * params.upper_threshold / 100:
            settled[name] = _bounded(node.limit, node)
        else:
            raise_to[name] = node.limit + span * params.increase_rate / 100
    left = budget - sum(settled.values())
    needed = sum(nodes[name].floor for name in raise_to)
    if left < 0 or needed > left:
        _cut_evenly(settled, nodes, max(-left, needed - left))
        left = budget - sum(settled.values())
    limits = dict(settled)
    waiting = list(raise_to)
    for index, name in enumerate(waiting):
        share = max(0.0, left) / (len(waiting) - index)
        due = raise_to[name]
        given = _bounded(share if due is None else min(due, share), nodes[name])
        limits[name] = given
        left -= given
    return limits


def _cut_evenly(limits: dict[str, float], nodes: Mapping[str, BusyNode], missing: float) -> None:
    """Take ``missing`` watts from these limits, evenly, none under its node's floor (what one
    cannot give is asked of the others, in turns)."""
    names = [n for n in limits if limits[n] > nodes[n].floor]
    while missing > 1e-9 and names:
        each = missing / len(names)
        for name in list(names):
            taken = min(each, limits[name] - nodes[name].floor)
            limits[name] -= taken
            missing -= taken
            if limits[name] <= nodes[name].floor + 1e-9:
                names.remove(name)


def _bounded(watts: float, node: BusyNode) -> float:
    return max(node.floor, min(node.top, watts))

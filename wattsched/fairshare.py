"""FairShare and EnergyFairShare: decayed usage and the fair-share factors, as pure functions.

The Georgiou et al. 2015 (section III-B) is the specification:

- normalized shares, eq. (1): ``S = s / sum(s of siblings)``, multiplied down the account tree;
- raw usage, eq. (2): CPU-seconds (FairShare) or joules (EnergyFairShare), each second of use
  weighed by ``2^(-age / PriorityDecayHalfLife)`` (a half-life of 0 means no decay); only use
  since the last PriorityUsageResetPeriod boundary counts;
- normalized usage, eq. (3): raw usage divided by what the machine could have delivered over
  the same decayed time (CPUs x seconds; for energy, the nodes' MaxWatts x seconds);
- the factor, eq. (4): ``F = 2^(-U / S / d)`` with d = FairShareDampeningFactor, where U is the
  effective usage: a user's own normalized usage plus, as in Slurm's classic algorithm, a part
  of its parent account's that is not its own, in proportion to its shares.

Fair Tree (PriorityFlags=FAIR_TREE, Slurm's default since 19.05) is offered too: each level's
LevelFS = S / U among siblings ranks accounts and users depth first, and a user's factor is
its rank from the bottom divided by the number of users.

Nothing here reads the clock or the database: records and ``now`` come in, numbers go out, so
the controller and the simulator compute the same factors from the same history.
"""

from __future__ import annotations

import math
import time as time_mod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROOT = "root"
# Use older than this many half-lives weighs under 0.1 %: it is not read again.
HORIZON_HALF_LIVES = 10


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One job's use: ``cpus`` from ``start`` to ``end`` (None: still running) and its energy."""

    user: str
    account: str
    cpus: int
    start: float
    end: float | None
    energy_j: float = 0.0


@dataclass(frozen=True, slots=True)
class Assoc:
    """An account (``user`` empty) or a user under an account, with its raw shares."""

    account: str
    user: str = ""
    parent: str = ROOT
    shares: int = 1

    @property
    def key(self) -> tuple[str, str]:
        return self.account, self.user


@dataclass(slots=True)
class ShareRow:
    """sshare's figures for one association."""

    account: str
    user: str
    depth: int
    raw_shares: int
    norm_shares: float
    raw_usage: float = 0.0
    norm_usage: float = 0.0
    effective_usage: float = 0.0
    fairshare: float = 1.0
    level_fs: float = math.inf
    raw_energy: float = 0.0
    norm_energy: float = 0.0
    effective_energy: float = 0.0
    energy_fairshare: float = 1.0
    level_efs: float = math.inf
    children: list[ShareRow] = field(default_factory=list)


def decayed_seconds(start: float, end: float, now: float, half_life_s: float) -> float:
    """The integral of 2^(-(now - t) / half_life) over [start, end] (plain seconds without decay)."""
    if end <= start:
        return 0.0
    if half_life_s <= 0:
        return end - start
    rate = math.log(2) / half_life_s
    return (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate


def reset_boundary(period: str, now: float, origin: float) -> float:
    """The start of the current PriorityUsageResetPeriod (local time): use before it does not count.
    ``none`` counts everything since ``origin``; ``now`` too (the reset happened at ``origin``)."""
    if period in ("none", "now"):
        return origin
    t = time_mod.localtime(now)
    if period == "daily":
        start = (t.tm_year, t.tm_mon, t.tm_mday)
    elif period == "weekly":
        monday = time_mod.localtime(now - t.tm_wday * 86400)
        start = (monday.tm_year, monday.tm_mon, monday.tm_mday)
    elif period == "monthly":
        start = (t.tm_year, t.tm_mon, 1)
    elif period == "quarterly":
        start = (t.tm_year, (t.tm_mon - 1) // 3 * 3 + 1, 1)
    else:  # yearly
        start = (t.tm_year, 1, 1)
    return max(origin, time_mod.mktime((*start, 0, 0, 0, 0, 0, -1)))


def raw_usage(records: Iterable[UsageRecord], now: float, half_life_s: float,
              since: float) -> dict[tuple[str, str], tuple[float, float]]:
    """Decayed (CPU-seconds, joules) per (account, user), counting only use after ``since``.

    A job's energy is spread evenly over its run, so the part before ``since`` and the decay
    of each second apply to it as to its CPU time."""
    usage: dict[tuple[str, str], tuple[float, float]] = {}
    for rec in records:
        end = now if rec.end is None else min(rec.end, now)
        start = max(rec.start, since)
        if end <= start:
            continue
        weight = decayed_seconds(start, end, now, half_life_s)
        full = end - rec.start if rec.end is None else rec.end - rec.start
        energy = rec.energy_j * weight / full if full > 0 else 0.0
        cpu_s, joules = usage.get((rec.account, rec.user), (0.0, 0.0))
        usage[(rec.account, rec.user)] = (cpu_s + rec.cpus * weight, joules + energy)
    return usage


def usage_since(reset_period: str, half_life_s: float, now: float, origin: float) -> float:
    """From when use counts: the last PriorityUsageResetPeriod boundary, and no further back than
    the decay horizon."""
    since = reset_boundary(reset_period, now, origin)
    return max(since, now - HORIZON_HALF_LIVES * half_life_s) if half_life_s > 0 else since


def shares(assocs: Iterable[Assoc], records: Iterable[UsageRecord], now: float, since: float, half_life_s: float,
           cpus: int, max_watts: float, damping: float = 1.0, fair_tree: bool = False) -> list[ShareRow]:
    """The whole computation, from the jobs' use to every association's factors, for a machine of
    ``cpus`` CPUs whose nodes draw at most ``max_watts`` together."""
    usage = raw_usage(records, now, half_life_s, since)
    seconds = decayed_seconds(since, now, now, half_life_s)
    # Without MaxWatts there is no energy budget to compare with: normalize by all energy used.
    energy_capacity = max_watts * seconds if max_watts else sum(joules for _cpu, joules in usage.values())
    return tree_rows(assocs, usage, cpus * seconds, energy_capacity, damping, fair_tree)


def tree_rows(assocs: Iterable[Assoc], usage: Mapping[tuple[str, str], tuple[float, float]],
              cpu_capacity: float, energy_capacity: float, damping: float = 1.0,
              fair_tree: bool = False) -> list[ShareRow]:
    """Every association's shares, usage and factors, in sshare's depth-first order (root first)."""
    children: dict[str, list[Assoc]] = {}
    for assoc in assocs:
        parent = assoc.account if assoc.user else assoc.parent
        if assoc.account == ROOT and not assoc.user:
            continue
        children.setdefault(parent, []).append(assoc)
    root = ShareRow(ROOT, "", 0, 1, 1.0)
    _build(root, children, usage)
    _normalize(root, cpu_capacity, energy_capacity)
    _classic(root, damping)
    if fair_tree:
        _fair_tree(root)
    rows: list[ShareRow] = []
    _flatten(root, rows)
    return rows


def _build(row: ShareRow, children: Mapping[str, list[Assoc]], usage: Mapping) -> None:
    # users first, then sub-accounts, as sshare lists them
    kids = sorted(children.get(row.account, []) if not row.user else [], key=lambda a: (not a.user, a.user,
                                                                                          a.account))
    total = sum(max(0, k.shares) for k in kids) or 1
    for kid in kids:
        child = ShareRow(kid.account, kid.user, row.depth + 1, kid.shares, row.norm_shares * max(0, kid.shares) / total)
        if kid.user:
            child.raw_usage, child.raw_energy = usage.get(kid.key, (0.0, 0.0))
        else:
            _build(child, children, usage)
        row.children.append(child)
    if row.children:
        row.raw_usage = sum(c.raw_usage for c in row.children)
        row.raw_energy = sum(c.raw_energy for c in row.children)


def _normalize(row: ShareRow, cpu_capacity: float, energy_capacity: float) -> None:
    row.norm_usage = row.raw_usage / cpu_capacity if cpu_capacity > 0 else 0.0
    row.norm_energy = row.raw_energy / energy_capacity if energy_capacity > 0 else 0.0
    for child in row.children:
        _normalize(child, cpu_capacity, energy_capacity)


def _classic(row: ShareRow, damping: float, parent: ShareRow | None = None) -> None:
    """Effective usage (own plus a share-weighted part of the parent's) and F = 2^(-U/S/d)."""
    if parent is None or (parent.account == ROOT and not parent.user and parent.depth == 0):
        row.effective_usage, row.effective_energy = row.norm_usage, row.norm_energy
    else:
        level = sum(max(0, c.raw_shares) for c in parent.children) or 1
        part = max(0, row.raw_shares) / level
        row.effective_usage = row.norm_usage + (parent.effective_usage - row.norm_usage) * part
        row.effective_energy = row.norm_energy + (parent.effective_energy - row.norm_energy) * part
    row.fairshare = _factor(row.effective_usage, row.norm_shares, damping)
    row.energy_fairshare = _factor(row.effective_energy, row.norm_shares, damping)
    for child in row.children:
        _classic(child, damping, row)


def _factor(usage: float, shares: float, damping: float) -> float:
    if shares <= 0:
        return 0.0
    return 2.0 ** (-usage / shares / damping)


def _fair_tree(root: ShareRow) -> None:
    """LevelFS = S / U among siblings; users ranked depth first, highest LevelFS first."""
    ranked: dict[str, list[ShareRow]] = {"cpu": [], "energy": []}

    def walk(row: ShareRow, kind: str) -> None:
        kids = row.children
        level_shares = sum(max(0, c.raw_shares) for c in kids) or 1
        used = sum(c.raw_usage if kind == "cpu" else c.raw_energy for c in kids)
        for c in kids:
            share = max(0, c.raw_shares) / level_shares
            mine = (c.raw_usage if kind == "cpu" else c.raw_energy) / used if used > 0 else 0.0
            level = share / mine if mine > 0 else math.inf
            if kind == "cpu":
                c.level_fs = level
            else:
                c.level_efs = level
        for c in sorted(kids, key=lambda c: -(c.level_fs if kind == "cpu" else c.level_efs)):
            if c.user:
                ranked[kind].append(c)
            else:
                walk(c, kind)

    for kind in ranked:
        walk(root, kind)
        users = ranked[kind]
        for position, row in enumerate(users):
            value = (len(users) - position) / len(users)
            if kind == "cpu":
                row.fairshare = value
            else:
                row.energy_fairshare = value


def _flatten(row: ShareRow, out: list[ShareRow]) -> None:
    out.append(row)
    for child in row.children:
        _flatten(child, out)


def factors(rows: Iterable[ShareRow]) -> dict[tuple[str, str], tuple[float, float]]:
    """(FairShare, EnergyFairShare) per (account, user), for the priority plugin."""
    return {(r.account, r.user): (r.fairshare, r.energy_fairshare) for r in rows if r.user}

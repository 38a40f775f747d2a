"""Licenses: the cluster's counted resources that belong to no node (Slurm's local licenses).

slurm.conf's ``Licenses=fluent:30,ansys`` declares them; a job asks with ``-L fluent:2,ansys``
(sbatch, salloc, srun), holds its counts from its start until its nodes are clean, and waits with
reason ``Licenses`` while they are not free. Both lists follow Slurm's grammar: names separated
by ``,`` (or ``;``), each with an optional ``:count`` (or ``=count``, default 1), no blanks, a name
given twice counted once with the sum. A request naming a license the cluster lacks, or asking
for more than it has, is refused at submission.

:class:`Book` is the policy: what the licenses are, who holds them until when, and what the
backfill plan has kept for later jobs, over an explicit ``now``; nothing here reads a clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

# A job's (or the cluster's) licenses: (name, count) in the order first given, one entry per name
Counts = tuple[tuple[str, int], ...]

INVALID = "Invalid license specification"  # Slurm's ESLURM_INVALID_LICENSES
MAX_NAMES = 256  # names in one list: bounded before any work (the text's length is bounded too)
MAX_COUNT = 2**31 - 1  # Slurm keeps counts in 32 bits


class LicenseError(ValueError):
    """A license list that is not Slurm's grammar."""


_TOKEN = re.compile(r"([^\s:=]+)(?:[:=](\d{1,10}))?")


def parse(spec: str) -> Counts:
    """``name[:count],...`` as Slurm reads it, in both slurm.conf and a job's request."""
    counts: dict[str, int] = {}
    tokens = [t for t in re.split(r"[,;]", spec) if t]
    if len(tokens) > MAX_NAMES:
        raise LicenseError(f"more than {MAX_NAMES} licenses")
    for token in tokens:
        found = _TOKEN.fullmatch(token)
        count = int(found[2]) if found is not None and found[2] is not None else 1
        if found is None or count > MAX_COUNT:
            raise LicenseError(token)
        counts[found[1]] = counts.get(found[1], 0) + count
    return tuple(counts.items())


def text(counts: Counts) -> str:
    """Slurm's form of a list (license_list_to_string): ``name:count,...``; "" for none."""
    return ",".join(f"{name}:{count}" for name, count in counts)


def validate(requested: Counts, configured: Mapping[str, int]) -> None:
    """A job's request against the cluster's licenses: every name configured, no count above its
    total (Slurm checks both at submission and on update)."""
    for name, count in requested:
        total = configured.get(name)
        if total is None or count > total:
            raise LicenseError(name)


@dataclass(frozen=True, slots=True)
class Holding:
    """The licenses one allocated job holds, and when its time limit gives them back (None: never)."""

    counts: Counts
    end: float | None


@dataclass(frozen=True, slots=True)
class LicenseSnap:
    """The cluster's licenses as a pass sees them: each one's total, and the allocated jobs'
    holdings (only theirs: a pending job holds nothing)."""

    totals: Mapping[str, int]
    held: tuple[Holding, ...] = ()

    def used(self) -> dict[str, int]:
        """Each license's count held now (Slurm's Used)."""
        used = dict.fromkeys(self.totals, 0)
        for holding in self.held:
            for name, count in holding.counts:
                used[name] = used.get(name, 0) + count
        return used


class Book:
    """The licenses over time during one pass: held by running jobs until their time limits, by
    the jobs the pass starts, and by the jobs the backfill plan reserves for later. A job may take
    its counts over [start, end) if, at every moment of it, what is held plus its own stays within
    each total: so a job started now never takes what a higher-priority job was promised."""

    __slots__ = ("_holds", "now", "totals")

    def __init__(self, snap: LicenseSnap, now: float):
        self.totals, self.now = snap.totals, now
        # (from, until, counts); a running job past its limit gives its licenses back just after now
        self._holds: list[tuple[float, float, Counts]] = [
            (-math.inf, math.inf if h.end is None else max(h.end, now + 1), h.counts) for h in snap.held]

    def fits(self, counts: Counts, start: float, end: float) -> bool:
        """Whether ``counts`` are free over [start, end)."""
        holds = self._holds
        for name, want in counts:
            total = self.totals.get(name)
            if total is None or want > total:
                return False
            mine = [(s, e, c) for s, e, hold in holds if s < end and start < e
                    for n, c in hold if n == name]
            # what is held only rises where a hold begins: the start and those moments are the peaks
            moments = [start, *(s for s, _e, _c in mine if start < s)]
            if any(want + sum(c for s, e, c in mine if s <= t < e) > total for t in moments):
                return False
        return True

    def hold(self, counts: Counts, start: float, end: float) -> None:
        """``counts`` are taken over [start, end) (a job started, or reserved for later)."""
        if counts:
            self._holds.append((start, end, counts))

    def release_times(self, until: float) -> list[float]:
        """When some license comes back, after now and before ``until`` (a plan's moments to try)."""
        return sorted({e for _s, e, _c in self._holds if self.now < e <= until})


"""CPU time and resident memory of process groups, read from /proc in one pass."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(slots=True)
class GroupUsage:
    cpu_s: float = 0.0
    rss_kb: int = 0


def by_pgid() -> dict[int, GroupUsage]:
    """CPU seconds (user + system) and RSS of all processes, summed per process group."""
    totals: dict[int, GroupUsage] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        usage = totals.setdefault(int(fields[2]), GroupUsage())
        usage.cpu_s += (int(fields[11]) + int(fields[12])) / _TICKS
        usage.rss_kb += int(fields[21]) * _PAGE_KB
    return totals


def total(usage: dict[int, GroupUsage], pgids: set[int]) -> GroupUsage:
    found = [usage[p] for p in pgids if p in usage]
    return GroupUsage(sum(u.cpu_s for u in found), sum(u.rss_kb for u in found))

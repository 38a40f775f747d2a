"""CPU time and resident memory of jobs' processes, read from /proc.

A job's processes are found from their leaders (batch supervisor, step tasks) down the process
tree (``/proc/<pid>/task/<tid>/children``), which reads only the job's own processes; on a
kernel without that file, all of /proc is read once and summed by process group.
"""

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


CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(c) for c in handle.read().split())
    except OSError:
        pass
    return found


def tree(leaders: set[int]) -> GroupUsage:
    """CPU seconds and RSS of ``leaders`` and all their descendants."""
    usage = GroupUsage()
    seen: set[int] = set()
    stack = list(leaders)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        fields = _stat(pid)
        if fields is None:
            continue
        usage.cpu_s += (int(fields[11]) + int(fields[12])) / _TICKS
        usage.rss_kb += int(fields[21]) * _PAGE_KB
        stack.extend(_children(pid))
    return usage


class Reader:
    """Usage of several jobs read in one go: down their trees, or by one scan of /proc."""

    def __init__(self) -> None:
        self._groups: dict[int, GroupUsage] | None = None

    def usage(self, leaders: set[int]) -> GroupUsage:
        if CHILDREN:
            return tree(leaders)
        if self._groups is None:
            self._groups = by_pgid()
        return total(self._groups, leaders)

"""CPU time and resident memory of jobs' processes, read from /proc; and, for sstat, each task's.

A job's processes are found from their leaders (batch supervisor, step tasks) down the process
tree (``/proc/<pid>/task/<tid>/children``), which reads only the job's own processes; on a
kernel without that file, all of /proc is read once and summed by process group.

sstat's figures are per task, as Slurm's jobacct_gather keeps them: a process belongs to the task
its step daemon started it as, which its environment says (SLURM_STEP_ID, SLURM_PROCID; none:
the batch script). Only the job user's processes count (never a step daemon's, which is root's);
a process that rewrote its own environment can only move its usage among its own job's tasks.
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


ENVIRON_MAX = 1 << 20  # what is read of a process's environment (the kernel's exec limit is 2 MiB)


@dataclass(slots=True)
class TaskSample:
    """One task's processes on a node, now: CPU seconds, memory (resident and virtual, KiB), major
    page faults, and bytes read and written from storage (/proc/<pid>/io)."""

    pids: list[int]
    user_cpu_s: float = 0.0
    system_cpu_s: float = 0.0
    rss_kb: int = 0
    vsize_kb: int = 0
    pages: int = 0
    read_b: int = 0
    write_b: int = 0


def _task_of(pid: int) -> tuple[str, int]:
    """(step, rank) from the process's environment: ("batch", 0) without SLURM_STEP_ID."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            env = handle.read(ENVIRON_MAX).split(b"\0")
    except OSError:
        return "batch", 0
    found = dict(item.split(b"=", 1) for item in env if item.startswith((b"SLURM_STEP_ID=", b"SLURM_PROCID=")))
    step = found.get(b"SLURM_STEP_ID", b"batch").decode(errors="replace")[:16]
    rank = found.get(b"SLURM_PROCID", b"0")
    return step, int(rank) if rank.isdigit() and len(rank) < 10 else 0


def _io(pid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/io") as handle:
            fields = dict(line.split(": ", 1) for line in handle.read().splitlines() if ": " in line)
        return int(fields.get("read_bytes", 0)), int(fields.get("write_bytes", 0))
    except (OSError, ValueError):
        return 0, 0


def _members(leaders: set[int]) -> list[int]:
    """The leaders and all their descendants (or, without the children files, the processes of
    their process groups)."""
    if not CHILDREN:
        found = []
        for entry in os.listdir("/proc"):
            fields = _stat(int(entry)) if entry.isdigit() else None
            if fields is not None and int(fields[2]) in leaders:
                found.append(int(entry))
        return found
    seen: set[int] = set()
    stack = list(leaders)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(_children(pid))
    return sorted(seen)


def tasks(leaders: set[int], uid: int) -> dict[tuple[str, int], TaskSample]:
    """Each task's sample, by (step, rank), from the processes under ``leaders`` that ``uid`` owns."""
    found: dict[tuple[str, int], TaskSample] = {}
    for pid in _members(leaders):
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        fields = _stat(pid)
        if fields is None:
            continue
        sample = found.setdefault(_task_of(pid), TaskSample([]))
        sample.pids.append(pid)
        sample.user_cpu_s += int(fields[11]) / _TICKS
        sample.system_cpu_s += int(fields[12]) / _TICKS
        sample.pages += int(fields[9])
        sample.vsize_kb += int(fields[20]) // 1024
        sample.rss_kb += int(fields[21]) * _PAGE_KB
        read, written = _io(pid)
        sample.read_b += read
        sample.write_b += written
    return found

"""Hardware counters of a job's CPUs through the kernel's perf_event interface (perf_event_open(2)),
for the energy policies' signatures on real nodes: cycles, instructions, last-level cache misses
and, where the CPU counts them, cycles stalled in the back end.

A job whose CPUs are its own (the agent picked them: ConstrainCores, task/affinity) is counted
CPU-wide on those CPUs (pid -1, one counter per CPU and event), as root, which needs no cgroup
controller of any version and counts every process the job forks. The counts are scaled by the
time each counter was scheduled on the PMU (``read_format`` TOTAL_TIME_ENABLED and _RUNNING), as
perf does when the kernel multiplexes more events than the PMU has counters.

Opening an event the machine does not have (a VM without a virtual PMU: ENOENT, EOPNOTSUPP, ENODEV)
is no error: the job is simply not counted, and :func:`unavailable` says why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# perf_event_open's syscall number per architecture (asm/unistd.h)
_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}
PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING = 1, 2
PERF_FLAG_FD_CLOEXEC = 8
_READ = struct.Struct("QQQ")  # value, time enabled, time running
# event name -> (type, config): the kernel's generic events (linux/perf_event.h)
EVENTS: dict[str, tuple[int, int]] = {
    "cycles": (PERF_TYPE_HARDWARE, 0),
    "instructions": (PERF_TYPE_HARDWARE, 1),
    "cache-misses": (PERF_TYPE_HARDWARE, 3),
    "stalled-cycles-backend": (PERF_TYPE_HARDWARE, 8),
    "page-faults": (PERF_TYPE_SOFTWARE, 2),
    "context-switches": (PERF_TYPE_SOFTWARE, 3),
}
SIGNATURE_EVENTS = ("cycles", "instructions", "cache-misses", "stalled-cycles-backend")
_ABSENT = (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL)


class _Attr(ctypes.Structure):
    """struct perf_event_attr, as far as PERF_ATTR_SIZE_VER5 (112 bytes); the rest stays zero."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64),
                ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
                ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
                ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
                ("sample_max_stack", ctypes.c_uint16), ("reserved", ctypes.c_uint16)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _open(event: str, cpu: int) -> int:
    """A counter of ``event`` on ``cpu`` for every process (root), enabled; OSError if it cannot be."""
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: unknown on {platform.machine()}")
    kind, config = EVENTS[event]
    attr = _Attr(type=kind, size=ctypes.sizeof(_Attr), config=config,
                 read_format=PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING)
    fd = _libc.syscall(number, ctypes.byref(attr), -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"perf_event_open({event}, cpu {cpu}): {os.strerror(code)}")
    return int(fd)


def unavailable(events: Iterable[str] = SIGNATURE_EVENTS, cpu: int = 0) -> str | None:
    """Why this machine cannot count ``events`` (None: it can)."""
    for event in events:
        try:
            os.close(_open(event, cpu))
        except OSError as exc:
            return str(exc)
    return None


@dataclass(frozen=True, slots=True)
class Counts:
    """Events counted over an interval, scaled for multiplexing; an event the CPU lacks is absent."""

    values: Mapping[str, float]
    seconds: float


class JobCounters:
    """The counters of one job's CPUs: opened at the job's start, read at each meter poll, closed
    at its end. An event the machine lacks is left out (all of them: nothing is counted)."""

    def __init__(self, cpus: Iterable[int], events: Iterable[str] = SIGNATURE_EVENTS):
        self.fds: dict[str, list[int]] = {}
        self.missing: dict[str, str] = {}
        for event in events:
            opened: list[int] = []
            try:
                for cpu in cpus:
                    opened.append(_open(event, cpu))
            except OSError as exc:
                for fd in opened:
                    os.close(fd)
                if exc.errno not in _ABSENT and exc.errno not in (errno.EACCES, errno.EPERM, errno.ENOSYS):
                    raise
                self.missing[event] = str(exc)
                continue
            self.fds[event] = opened
        self._last: dict[str, float] = dict.fromkeys(self.fds, 0.0)
        self._last_time: dict[str, float] = dict.fromkeys(self.fds, 0.0)

    @property
    def counting(self) -> bool:
        return bool(self.fds)

    def totals(self) -> tuple[dict[str, float], float]:
        """Each event's scaled count since opening, summed over the CPUs, and the longest time any
        of them was enabled (seconds)."""
        values: dict[str, float] = {}
        enabled_s = 0.0
        for event, fds in self.fds.items():
            total = 0.0
            for fd in fds:
                value, enabled, running = _READ.unpack(os.read(fd, _READ.size))
                total += value * enabled / running if running else 0.0
                enabled_s = max(enabled_s, enabled / 1e9)
            values[event] = total
        return values, enabled_s

    def interval(self) -> Counts:
        """What was counted since the last call (since opening, the first time)."""
        values, enabled_s = self.totals()
        seconds = enabled_s - max(self._last_time.values(), default=0.0)
        delta = {event: value - self._last[event] for event, value in values.items()}
        self._last = values
        self._last_time = dict.fromkeys(values, enabled_s)
        return Counts(delta, max(seconds, 0.0))

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {}

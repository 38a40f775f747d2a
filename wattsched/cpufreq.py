"""CPU frequency requests and the emulated node's frequency models (pure).

``--cpu-freq=p1[-p2[:p3]]`` as Slurm reads it:

- ``p1`` alone, a frequency in kHz or ``low``/``medium``/``high``/``highm1``: the UserSpace
  governor at that speed;
- ``p1`` alone, a governor (Conservative, OnDemand, Performance, PowerSave, SchedUtil,
  UserSpace): that governor;
- ``p1-p2[:p3]``: scaling_min_freq = p1, scaling_max_freq = p2, and governor p3 if given
  (UserSpace is refused there: it would ignore the range).

A kHz value that is not one of the node's frequencies is rounded as the kernel rounds a write
to ``scaling_setspeed`` (CPUFREQ_RELATION_L): the lowest available frequency at or above it,
the highest one when it is above them all. ``medium`` is the middle entry of the sorted list.

Emulated nodes: a busy node draws the watts its ``CpuFreqWatts`` lists for a frequency
(linear between listed ones); without that list, ``IdleWatts + (MaxWatts - IdleWatts) *
(f / f_max)^3`` (dynamic power ~ f V^2 with V ~ f). Compute runs ``f_max / f`` times slower;
waiting does not, so a job's compute-bound fraction decides how its run time stretches.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

GOVERNORS = ("conservative", "ondemand", "performance", "powersave", "schedutil", "userspace")
WORDS = ("low", "medium", "high", "highm1")
DEFAULT_GOVERNORS = ("ondemand", "performance", "userspace")  # Slurm's CpuFreqGovernors default
# Frequencies of a virtual node whose CpuFreqWatts lists none (kHz, highest first).
DEFAULT_LADDER = (2400000, 2200000, 2000000, 1800000, 1600000, 1400000, 1200000)


class FreqError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class FreqRequest:
    """A parsed --cpu-freq: ``low``/``high`` are kHz strings or words; ``governor`` lower case."""

    low: str | None = None
    high: str | None = None
    governor: str | None = None

    @property
    def governor_needed(self) -> str:
        """The governor this request runs under (a single speed needs UserSpace)."""
        if self.governor:
            return self.governor
        return "userspace" if self.low and not self.high else ""


@dataclass(frozen=True, slots=True)
class FreqSetting:
    """What to write to one CPU's cpufreq folder (None: leave as is)."""

    governor: str | None = None
    setspeed: int | None = None
    min_khz: int | None = None
    max_khz: int | None = None


def _value(text: str) -> str:
    low = text.lower()
    if text.isdigit() or low in WORDS:
        return low
    raise FreqError(f"Invalid --cpu-freq argument: {text}")


def parse(spec: str) -> FreqRequest | None:
    """``--cpu-freq`` (or CpuFreqDef) -> a request; None for an empty spec."""
    if not spec:
        return None
    body, colon, governor = spec.partition(":")
    if colon and (not governor or governor.lower() not in GOVERNORS):
        raise FreqError(f"Invalid --cpu-freq argument: {spec}")
    parts = body.split("-") if body else []
    if len(parts) == 1 and parts[0].lower() in GOVERNORS and not colon:
        return FreqRequest(governor=parts[0].lower())
    if not parts or len(parts) > 2 or not all(parts):
        raise FreqError(f"Invalid --cpu-freq argument: {spec}")
    values = [_value(p) for p in parts]
    if len(values) == 1:
        if colon:
            raise FreqError(f"Invalid --cpu-freq argument: {spec}")  # a governor needs a range
        return FreqRequest(low=values[0])
    if governor.lower() == "userspace":
        raise FreqError(f"Invalid --cpu-freq argument: {spec} (UserSpace takes a single frequency)")
    return FreqRequest(low=values[0], high=values[1], governor=governor.lower() or None)


def check(spec: str, allowed_governors: Sequence[str]) -> FreqRequest | None:
    """Parse and refuse governors the site does not allow (CpuFreqGovernors)."""
    request = parse(spec)
    if request is not None and request.governor_needed and request.governor_needed not in allowed_governors:
        raise FreqError(f"Invalid --cpu-freq argument: {spec} (governor {request.governor_needed} "
                        f"is not in CpuFreqGovernors)")
    return request


def pick(word_or_khz: str, available: Sequence[int]) -> int:
    """A value of a request on a node with these frequencies (any order)."""
    freqs = sorted(available)
    if not freqs:
        raise FreqError("the node has no frequency table")
    if word_or_khz == "low":
        return freqs[0]
    if word_or_khz == "high":
        return freqs[-1]
    if word_or_khz == "highm1":
        return freqs[-2] if len(freqs) > 1 else freqs[-1]
    if word_or_khz == "medium":
        return freqs[(len(freqs) - 1) // 2]
    target = int(word_or_khz)
    return next((f for f in freqs if f >= target), freqs[-1])


def resolve(request: FreqRequest, available: Sequence[int]) -> FreqSetting:
    """The sysfs writes that carry out ``request`` on a CPU with these frequencies."""
    if request.low is None:
        return FreqSetting(governor=request.governor)
    if request.high is None:
        return FreqSetting(governor="userspace", setspeed=pick(request.low, available))
    low, high = pick(request.low, available), pick(request.high, available)
    if low > high:
        raise FreqError(f"Invalid --cpu-freq argument: {request.low}-{request.high} (minimum above maximum)")
    return FreqSetting(governor=request.governor, min_khz=low, max_khz=high)


def ladder(freq_watts: Sequence[tuple[int, int]]) -> list[int]:
    """A node's frequencies: its CpuFreqWatts entries, else the default ladder."""
    return [khz for khz, _w in freq_watts] or list(DEFAULT_LADDER)


def effective_khz(governor: str, setspeed: int | None, min_khz: int, max_khz: int) -> int:
    """The frequency a busy CPU runs at under these settings (what the kernel would choose)."""
    if governor == "userspace" and setspeed:
        return max(min_khz, min(max_khz, setspeed))
    if governor == "powersave":
        return min_khz
    return max_khz  # performance, and the dynamic governors under load


def busy_watts(khz: int, f_max: int, idle: float, most: float, table: Sequence[tuple[int, int]] = ()) -> float:
    """Watts of a fully busy node at ``khz`` (see the module docstring)."""
    if table:
        points = sorted(table)
        if khz <= points[0][0]:
            return float(points[0][1])
        for (f0, w0), (f1, w1) in itertools.pairwise(points):
            if khz <= f1:
                return w0 + (w1 - w0) * (khz - f0) / (f1 - f0)
        return float(points[-1][1])
    return idle + (most - idle) * (khz / f_max) ** 3 if f_max else most


def runtime_factor(khz: int, f_max: int, compute_fraction: float) -> float:
    """How much longer a job runs at ``khz``: ``beta * f_max / f + (1 - beta)``."""
    return compute_fraction * f_max / khz + (1 - compute_fraction) if khz else 1.0

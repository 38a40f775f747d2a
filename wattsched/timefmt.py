"""Slurm's time formats: durations (``-t``), absolute times (``--begin``) and displays.

Durations are kept in whole minutes (Slurm rounds seconds up); ``None`` means
UNLIMITED. Timestamps are epoch seconds; shown in local time as ``YYYY-MM-DDTHH:MM:SS``.
"""

from __future__ import annotations

import math
import time

UNLIMITED_WORDS = frozenset({"infinite", "unlimited", "-1"})
# The longest time limit: Slurm keeps minutes in 32 bits (all ones meaning INFINITE); we keep them in
# the accounting databases' signed 32-bit columns, so a limit beyond this one is refused.
MAX_DURATION_MIN = 2**31 - 1


class TimeFormatError(ValueError):
    """A duration or time that Slurm's grammar does not accept."""


def parse_duration_min(text: str) -> int | None:
    """Parse a time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; INFINITE/UNLIMITED -> None."""
    import re  # in the parsers only: squeue and sinfo print times without importing re (~2 ms)

    value = text.strip()
    if value.lower() in UNLIMITED_WORDS:
        return None
    match = re.fullmatch(r"(?:(\d{1,10})-)?(\d{1,12})(?::(\d{1,12}))?(?::(\d{1,12}))?", value)
    if not match:
        raise TimeFormatError(f"Invalid time limit specification '{text}'")
    days_s, first, second, third = match.groups()
    days = int(days_s or 0)
    if days_s is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
    elif third is not None:  # H:M:S
        hours, minutes, seconds = int(first), int(second), int(third)
    elif second is not None:  # M:S
        hours, minutes, seconds = 0, int(first), int(second)
    else:  # M
        hours, minutes, seconds = 0, int(first), 0
    total_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if math.ceil(total_s / 60) > MAX_DURATION_MIN:
        raise TimeFormatError(f"Invalid time limit specification '{text}': longer than {MAX_DURATION_MIN} minutes")
    return math.ceil(total_s / 60)


def secs_to_str(seconds: int | float | None) -> str:
    """squeue's TIME style: M:SS, H:MM:SS or D-HH:MM:SS."""
    if seconds is None:
        return "UNLIMITED"
    secs = max(0, int(seconds))
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def elapsed_str(seconds: int | float | None) -> str:
    """sacct's Elapsed style: HH:MM:SS or D-HH:MM:SS."""
    secs = max(0, int(seconds or 0))
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def limit_str(minutes: int | None) -> str:
    """A time limit for squeue/scontrol: UNLIMITED or the TIME style."""
    return "UNLIMITED" if minutes is None else secs_to_str(minutes * 60)


def ts_str(epoch: float | None, unknown: str = "Unknown") -> str:
    """A timestamp as Slurm prints it, in local time."""
    if not epoch:
        return unknown
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


_NAMED_HOURS = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
_UNIT_SECONDS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}


_LAST_EPOCH = 253402300799.0  # 9999-12-31T23:59:59Z: a time past it is no time (a bound on the input)


def parse_time(text: str, now: float) -> float:
    """Parse a Slurm absolute time (--begin, StartTime, sacct -S) relative to ``now``; one before
    the epoch or past the year 9999 is refused."""
    try:
        when = _parse_time(text, now)
    except (OverflowError, ValueError) as exc:  # mktime's own limits
        raise TimeFormatError(f"Invalid time specification '{text}'") from exc
    if not 0 <= when <= _LAST_EPOCH:
        raise TimeFormatError(f"Invalid time specification '{text}'")
    return when


def _parse_time(text: str, now: float) -> float:
    """Parse a Slurm absolute time (--begin, StartTime, sacct -S) relative to ``now``.

    Accepts now[+-N[units]], today, tomorrow, midnight, noon, elevenses, fika, teatime,
    HH:MM[:SS] [AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], MM/DD[/YY]-HH:MM[:SS] and
    YYYY-MM-DD[THH:MM[:SS]]. A bare time of day already past means tomorrow.
    """
    import re

    value = text.strip().lower()
    rel = re.fullmatch(r"now(?:([+-])(\d+)([a-z]*))?", value)
    if rel:
        if not rel.group(1):
            return now
        unit = rel.group(3)
        if unit not in _UNIT_SECONDS:
            raise TimeFormatError(f"Invalid time specification '{text}'")
        delta = int(rel.group(2)) * _UNIT_SECONDS[unit]
        return now + delta if rel.group(1) == "+" else now - delta
    local = time.localtime(now)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    if value == "today":
        return midnight
    if value == "tomorrow":
        return _add_days(midnight, 1)
    if value in _NAMED_HOURS:
        when = midnight + _NAMED_HOURS[value] * 3600
        return when if when > now else _add_days(when, 1)
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?", value)
    if clock:
        hour = int(clock.group(1)) % 12 + (12 if clock.group(4) == "pm" else 0) if clock.group(4) \
            else int(clock.group(1))
        when = midnight + hour * 3600 + int(clock.group(2)) * 60 + int(clock.group(3) or 0)
        return when if when > now else _add_days(when, 1)
    iso = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:t(\d{1,2}):(\d{2})(?::(\d{2}))?)?", value)
    if iso:
        y, mo, d, h, mi, s = (int(g) if g else 0 for g in iso.groups())
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    date = re.fullmatch(r"(\d{2})[/.]?(\d{2})(?:[/.]?(\d{2}))?(?:-(\d{1,2}):(\d{2})(?::(\d{2}))?)?", value)
    if date:
        mo, d = int(date.group(1)), int(date.group(2))
        y = 2000 + int(date.group(3)) if date.group(3) else local.tm_year
        h, mi, s = (int(g) if g else 0 for g in date.groups()[3:])
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    raise TimeFormatError(f"Invalid time specification '{text}'")


def _add_days(epoch: float, days: int) -> float:
    t = time.localtime(epoch)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday + days, t.tm_hour, t.tm_min, t.tm_sec, 0, 0, -1))


def parse_mem_mb(text: str) -> int:
    """Parse --mem style sizes: a number with optional K/M/G/T suffix; default unit MB."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)[bB]?\s*", text)
    if not match:
        raise TimeFormatError(f"Invalid memory specification '{text}'")
    factor = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[match.group(2).lower()]
    return math.ceil(float(match.group(1)) * factor)

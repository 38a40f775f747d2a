"""The power cap over time (ours: Slurm's cap is one number changed by hand). A schedule of steps
changes the cap ahead of time: a demand-response event ("at most 60 % from 18:00 to 20:00"), a
cheaper night, a change that stays ("1500 W from Monday on").

A step sets the cap to a value (watts, a share of the cluster's MaxWatts, or INFINITE) from its
start: until its end (a window: afterwards the cap in force before it returns), or for good (an
open step: when its time comes, it becomes the cap, as ``scontrol update powercap=`` would). A
window may repeat DAILY or WEEKLY. Where windows overlap, the lowest cap holds; an open step
replaces the cap it finds, windows stay below it.

Requests use scontrol's grammar, ``PowerCap=VALUE@START [EndTime=T | Duration=D] [Flags=DAILY]``,
with Slurm's time formats (``18:00``, ``now+30minutes``, ``2026-11-27T18:00``); a schedule file
(PowerCapSchedule) holds one request per line.

Pure: the steps, the cap and ``now`` in; the cap's timeline (what wattsched.capadmission plans against)
and the steps still to come out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from wattsched import timefmt
from wattsched.confvalues import parse_power_cap

INFINITE = math.inf
_EVERY_S = {"DAILY": 86400, "WEEKLY": 7 * 86400}
_FOREVER_S = 365 * 86400  # Duration=UNLIMITED: Slurm's one year, as for reservations
HORIZON_S = 8 * 86400  # how far ahead the planner sees the schedule: a WEEKLY window and a day
_KEYS = ("powercap", "starttime", "endtime", "duration", "flags")
MAX_STEPS = 1000  # bounded before any work: every scheduling pass walks the timeline


class CapScheduleError(ValueError):
    """A schedule request refused; the message says why."""


@dataclass(frozen=True, slots=True)
class CapStep:
    """One entry: from ``start`` the cap is ``watts``, or ``share`` of the cluster's MaxWatts when
    that is set; until ``end`` (INFINITE: an open step, for good); every ``every`` seconds (0:
    once). ``step_id`` names it: a number for one set at run time, ``conf:LINE`` for a line of
    the PowerCapSchedule file; ``text`` is the value as it was given (60%, 1500, INFINITE)."""

    step_id: str
    start: float
    end: float
    watts: float
    share: float | None = None
    every: int = 0
    text: str = ""

    @property
    def open(self) -> bool:
        return self.end == INFINITE

    def cap(self, max_watts: float) -> float:
        """Its cap in watts (INFINITE: none) for a cluster of ``max_watts``."""
        return self.share * max_watts if self.share is not None else self.watts

    def flags(self) -> str:
        return next((name for name, every in _EVERY_S.items() if every == self.every), "")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> CapStep:
        return cls(**data)


def parse_value(text: str) -> tuple[float, float | None]:
    """(watts, share): ``1500`` -> (1500, None); ``60%`` -> (INFINITE, 0.6); ``INFINITE``."""
    value = text.strip()
    match = re.fullmatch(r"(\d{1,3}(?:\.\d{1,3})?)\s*%", value)
    if match:
        share = float(match.group(1)) / 100
        if not 0 < share <= 1:
            raise CapScheduleError(f"Invalid power cap: {text} (a share is above 0 % and at most 100 %)")
        return INFINITE, share
    try:
        return parse_power_cap(value), None
    except ValueError as exc:
        raise CapScheduleError(f"Invalid power cap: {text}") from exc


def parse_request(pairs: Mapping[str, str], step_id: str, now: float) -> CapStep:
    """A step from scontrol's keys (lower case): ``powercap`` = VALUE@START, and EndTime,
    Duration, Flags (DAILY or WEEKLY); times are parsed against ``now``."""
    unknown = sorted(set(pairs) - set(_KEYS))
    if unknown:
        raise CapScheduleError(f"Update of this parameter is not supported: {unknown[0]}")
    value, at, start_text = pairs.get("powercap", "").partition("@")
    start_text = start_text or pairs.get("starttime", "")
    if not at and not pairs.get("starttime"):
        raise CapScheduleError("A scheduled power cap needs a start: PowerCap=VALUE@START")
    watts, share = parse_value(value)
    flags = [f.strip().upper() for f in pairs.get("flags", "").split(",") if f.strip()]
    if any(f not in _EVERY_S for f in flags) or len(flags) > 1:
        raise CapScheduleError(f"Invalid power cap flag: {pairs.get('flags', '')} (DAILY or WEEKLY)")
    try:
        start = timefmt.parse_time(start_text, now)
        if pairs.get("duration"):
            minutes = timefmt.parse_duration_min(pairs["duration"])
            end = start + (minutes * 60 if minutes is not None else _FOREVER_S)
        elif pairs.get("endtime"):
            end = timefmt.parse_time(pairs["endtime"], now)
        else:
            end = INFINITE
    except timefmt.TimeFormatError as exc:
        raise CapScheduleError("Invalid time specified") from exc
    if end <= start:
        raise CapScheduleError("Invalid time specified: the end is not after the start")
    every = _EVERY_S[flags[0]] if flags else 0
    if every and end == INFINITE:
        raise CapScheduleError(f"Flags={flags[0]} needs an EndTime or a Duration")
    if every and end - start >= every:
        raise CapScheduleError(f"A {flags[0]} power cap window must be shorter than its period")
    if end != INFINITE and end <= now:
        raise CapScheduleError("Invalid time specified: the window has already ended")
    return CapStep(step_id, start, end, watts, share, every, value.strip().upper())


def parse_file(text: str, now: float) -> list[CapStep]:
    """The PowerCapSchedule file: one request per line (``PowerCap=60%@18:00 Duration=2:00:00
    Flags=DAILY``), ``#`` comments; relative times are relative to when it is read."""
    steps = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        pairs: dict[str, str] = {}
        for word in words:
            key, eq, value = word.partition("=")
            if not eq:
                raise CapScheduleError(f"line {number}: '{word}' is not KEY=VALUE")
            pairs[key.lower()] = value
        try:
            steps.append(parse_request(pairs, f"conf:{number}", now))
        except CapScheduleError as exc:
            raise CapScheduleError(f"line {number}: {exc}") from exc
        if len(steps) > MAX_STEPS:
            raise CapScheduleError(f"more than {MAX_STEPS} steps")
    return steps


def read_file(path: str, now: float) -> list[CapStep]:
    """The steps of a schedule file read at ``now``. An open step whose time has passed was carried
    out when it came, and is not again."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise CapScheduleError(f"cannot read {path}: {exc}") from exc
    return [s for s in parse_file(text, now) if not (s.open and s.start <= now)]


def _windows(step: CapStep, since: float, until: float) -> Iterable[tuple[float, float]]:
    """The step's occurrences that overlap [since, until]."""
    if not step.every:
        if step.start <= until and step.end > since:
            yield step.start, step.end
        return
    length = step.end - step.start
    skipped = max(0, math.floor((since - step.end) / step.every) + 1) if step.end <= since else 0
    start = step.start + skipped * step.every
    while start <= until:
        if start + length > since:
            yield start, start + length
        start += step.every


def timeline(cap: float | None, steps: Sequence[CapStep], now: float, max_watts: float,
             horizon_s: float = HORIZON_S) -> tuple[float | None, tuple[tuple[float, float], ...]]:
    """The cap in force at ``now`` (None: capping off, and no step in force) and its changes up to
    ``now + horizon_s``, as (time, cap) from that time on; INFINITE stands for no cap."""
    until = now + horizon_s
    opens = sorted((s.start, s.step_id, s.cap(max_watts)) for s in steps if s.open and s.start <= until)
    windows = [(a, b, s.cap(max_watts)) for s in steps if not s.open for a, b in _windows(s, now, until)]

    def at(t: float) -> float | None:
        base = cap
        for start, _id, value in opens:
            if start > t:
                break
            base = value
        lowest = min((v for a, b, v in windows if a <= t < b), default=None)
        if lowest is None:
            return base
        return lowest if base is None else min(base, lowest)

    moments = sorted({t for t in (*(o[0] for o in opens), *(w[0] for w in windows), *(w[1] for w in windows))
                      if now < t <= until})
    now_cap = at(now)
    changes: list[tuple[float, float]] = []
    last = now_cap
    for t in moments:
        value = at(t)
        if value != last:
            changes.append((t, INFINITE if value is None else value))
            last = value
    return now_cap, tuple(changes)


def due(cap: float | None, steps: Sequence[CapStep], now: float, max_watts: float) \
        -> tuple[float | None, list[CapStep]]:
    """What the schedule leaves at ``now``: the cap, replaced by the open steps whose time has come
    (the latest wins), and the steps still to act (a repeating window rolls on to its next
    occurrence once one ends)."""
    started = sorted((s for s in steps if s.open and s.start <= now), key=lambda s: s.start)
    if started:
        cap = started[-1].cap(max_watts)
    left: list[CapStep] = []
    for step in steps:
        if step.open:
            if step.start > now:
                left.append(step)
        elif step.end > now:
            left.append(step)
        elif step.every:
            periods = math.floor((now - step.end) / step.every) + 1
            left.append(replace(step, start=step.start + periods * step.every, end=step.end + periods * step.every))
    return cap, left

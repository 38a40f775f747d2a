"""The grid's carbon intensity over time (ours): a series of (time, gCO2e per kWh), from a file or
a URL (CarbonIntensity), gives each job its emissions and, optionally, a priority factor that
favours flexible work in greener hours.

Formats: CSV lines ``TIME,INTENSITY`` (a header line and ``#`` comments allowed), or the JSON of
the Electricity Maps API (``{"history": [{"datetime": ..., "carbonIntensity": ...}]}``, or
``"forecast"``), or a JSON list of such objects. TIME is epoch seconds or ISO 8601 (``Z`` or an
offset; a time without one is UTC).

The intensity is a step function: each point holds until the next; before the first point the
first holds, after the last the last. A job's emissions are its energy times the time-weighted
mean intensity over its run (its power is taken as even over the run). A moment's greenness is
where its intensity sits between the highest and the lowest of the day around it (1: the
greenest, 0: the dirtiest).

Pure: text in, a series out; no clock, no network.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

MAX_POINTS = 200_000  # a year of five-minute points: the input is bounded before any work
MAX_BYTES = 16 << 20
JOULES_PER_KWH = 3.6e6
DAY_S = 86400.0


class CarbonError(ValueError):
    """A series that cannot be read; the message says where."""


@dataclass(frozen=True, slots=True)
class Series:
    """Intensities (gCO2e/kWh) from each time on, by time."""

    times: tuple[float, ...]
    values: tuple[float, ...]

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        return self.values[max(i, 0)]

    def mean(self, start: float, end: float) -> float:
        """The time-weighted mean over [start, end] (the value at ``start`` for an instant)."""
        if end <= start:
            return self.at(start)
        total, t = 0.0, start
        i = bisect.bisect_right(self.times, start)
        while t < end:
            following = self.times[i] if i < len(self.times) else math.inf
            stop = min(end, following)
            total += self.at(t) * (stop - t)
            t, i = stop, i + 1
        return total / (end - start)

    def emissions_g(self, joules: float, start: float, end: float) -> float:
        """Grams of CO2e for ``joules`` drawn evenly over [start, end]."""
        return joules / JOULES_PER_KWH * self.mean(start, end)

    def greenness(self, t: float, span_s: float = DAY_S) -> float:
        """Where the intensity at ``t`` sits in the span around it: 1 the lowest, 0 the highest
        (0 when the span is flat: no hour is greener than another)."""
        lo_i = bisect.bisect_right(self.times, t - span_s / 2) - 1
        hi_i = bisect.bisect_right(self.times, t + span_s / 2)
        window = self.values[max(lo_i, 0):max(hi_i, 1)]
        low, high = min(window), max(window)
        return 0.0 if high <= low else (high - self.at(t)) / (high - low)


def _time(value: object, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CarbonError(f"{where}: '{text[:40]}' is not a time (epoch seconds or ISO 8601)") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _intensity(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise CarbonError(f"{where}: '{str(value)[:40]}' is not an intensity (gCO2e/kWh)") from exc
    if not 0 <= number < 1e5:
        raise CarbonError(f"{where}: {number} gCO2e/kWh is out of range")
    return number


def _series(points: Iterable[tuple[float, float]]) -> Series:
    ordered = sorted(points)
    if not ordered:
        raise CarbonError("no point in the series")
    times = [t for t, _v in ordered]
    if any(b == a for a, b in itertools.pairwise(times)):
        raise CarbonError("a time appears twice in the series")
    return Series(tuple(times), tuple(v for _t, v in ordered))


def parse(text: str) -> Series:
    """A series from CSV or JSON text (see the module's docstring)."""
    if len(text) > MAX_BYTES:
        raise CarbonError(f"more than {MAX_BYTES} bytes")
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _parse_json(stripped)
    points: list[tuple[float, float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2:
            raise CarbonError(f"line {number}: expected TIME,INTENSITY")
        if not points and not _numberish(fields[1]):
            continue  # a header line
        points.append((_time(fields[0], f"line {number}"), _intensity(fields[1], f"line {number}")))
        if len(points) > MAX_POINTS:
            raise CarbonError(f"more than {MAX_POINTS} points")
    return _series(points)


def _numberish(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_json(text: str) -> Series:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CarbonError(f"not JSON: {exc}") from exc
    items: Sequence[object]
    if isinstance(data, dict):
        found = data.get("history", data.get("forecast", data.get("data")))
        if not isinstance(found, list):
            raise CarbonError("JSON: expected a 'history' or 'forecast' list")
        items = found
    elif isinstance(data, list):
        items = data
    else:
        raise CarbonError("JSON: expected an object or a list")
    if len(items) > MAX_POINTS:
        raise CarbonError(f"more than {MAX_POINTS} points")
    points = []
    for index, item in enumerate(items):
        where = f"item {index}"
        if not isinstance(item, dict):
            raise CarbonError(f"{where}: expected an object")
        when = item.get("datetime", item.get("time"))
        value = item.get("carbonIntensity", item.get("carbon_intensity", item.get("intensity")))
        if when is None or value is None:
            raise CarbonError(f"{where}: needs a datetime (or time) and a carbonIntensity")
        points.append((_time(when, where), _intensity(value, where)))
    return _series(points)

"""Predictions from past runs (pure): a job's expected run time, mean power and energy, from the
completed runs of the same job before it.

The same job is the same user, name, script (or command line) and size: the key is the SHA-256 of
those, cut to 16 hex digits, set at submission and kept in accounting. The prediction is the mean
of the last RUNS_KEPT completed runs that have an energy: their run time, their energy, and the
mean power that is the ratio of the two sums (a long run weighs more than a short one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RUNS_KEPT = 5


def job_key(user: str, name: str, script: str, nodes: int, cpus: int) -> str:
    text = "\0".join((user, name, script, str(nodes), str(cpus)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Run:
    elapsed_s: float
    joules: float


@dataclass(frozen=True, slots=True)
class Prediction:
    elapsed_s: float
    joules: float
    watts: float
    runs: int


def predict(runs: Sequence[Run]) -> Prediction | None:
    """The expectation from ``runs`` (None without any run that lasted)."""
    runs = [r for r in runs if r.elapsed_s > 0]
    if not runs:
        return None
    seconds, joules = sum(r.elapsed_s for r in runs), sum(r.joules for r in runs)
    return Prediction(seconds / len(runs), joules / len(runs), joules / seconds, len(runs))


def from_history(rows: Iterable[tuple[str, float, float]]) -> dict[str, Prediction]:
    """Each key's prediction from (key, run time, joules) rows of completed runs, newest first."""
    kept: dict[str, list[Run]] = {}
    for key, elapsed, joules in rows:
        runs = kept.setdefault(key, [])
        if len(runs) < RUNS_KEPT:
            runs.append(Run(elapsed, joules))
    return {key: p for key, runs in kept.items() if (p := predict(runs)) is not None}

"""Job and step energy from the nodes' energy counters (Georgiou et al. 2014, eq. 2): for each node of a job,
EN(end) - EN(start), read off the node's counter samples by linear interpolation, and summed
over the job's nodes.

A node shared by several jobs is not charged in full to each (Slurm's weakness). Between two
samples, its energy is split in two parts: the idle part (IdleWatts x the interval, at most
the energy measured) is split among the jobs on the node by their allocated CPUs; the rest,
the dynamic part, by the CPU time each job's processes used in that interval (by CPUs when
none used any, or when the node declares no IdleWatts). A job alone on its node gets all of
it. Pure functions of the samples and the jobs' intervals.

GPUs: each job's GPU energy on the node (the rise of its GPUs' counters, noded.gpus) is its
alone. Where the node's counter includes the GPUs (a BMC's reading, the emulated model) a shared
node's energy in an interval is first cut into each job's GPU part, in the proportion its GPU
energy bears to the node's over that sample interval, and only the rest is split as above;
where it does not (RAPL), each job's GPU energy is added to its share.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Samples = Sequence[tuple[float, float]]  # (time, joules), in time order
JobCpu = Sequence[Mapping[int, float]]  # per sample: job id -> CPU seconds of its processes on the node


@dataclass(frozen=True, slots=True)
class Occupant:
    start: float
    end: float
    cpus: int
    job_id: int = 0


@dataclass(slots=True)
class NodeHistory:
    samples: Samples
    job_cpu: JobCpu = ()
    idle_watts: float | None = None
    occupants: Sequence[Occupant] = field(default_factory=tuple)
    job_gpu: JobCpu = ()  # per sample: job id -> its GPUs' joules on the node so far
    gpus_apart: bool = False  # the counter leaves the GPUs out (RAPL)


def counter_at(samples: Samples, t: float) -> float | None:
    """The node's counter at ``t`` (None if no sample at or after ``t`` has arrived yet)."""
    if not samples or t > samples[-1][0]:
        return None
    index = bisect.bisect_left(samples, (t, float("-inf")))
    if index == 0:
        return samples[0][1]
    (t0, j0), (t1, j1) = samples[index - 1], samples[index]
    return j0 if t1 <= t0 else j0 + (j1 - j0) * (t - t0) / (t1 - t0)


def _cpu_deltas(history: NodeHistory, t: float, per_job: JobCpu | None = None) -> dict[int, float]:
    """Each job's CPU seconds (or, given ``per_job``, that figure) over the sample interval that holds ``t``."""
    series = history.job_cpu if per_job is None else per_job
    index = bisect.bisect_right(history.samples, (t, float("inf")))
    if index == 0 or index >= len(history.samples) or len(series) != len(history.samples):
        return {}
    before, after = series[index - 1], series[index]
    return {job: max(0.0, value - before.get(job, 0.0)) for job, value in after.items()}


def _gpu_fractions(history: NodeHistory, t: float) -> tuple[dict[int, float], float]:
    """Each job's GPU energy over the sample interval that holds ``t``, as a fraction of that
    interval's length (joules per second) and, where the counter includes GPUs, of the node's
    energy then (capped at all of it together); and the interval's length."""
    deltas = _cpu_deltas(history, t, history.job_gpu)
    if not deltas:
        return {}, 0.0
    index = bisect.bisect_right(history.samples, (t, float("inf")))
    (t0, j0), (t1, j1) = history.samples[index - 1], history.samples[index]
    if history.gpus_apart:
        return deltas, t1 - t0
    total = sum(deltas.values())
    scale = 1 / max(total, j1 - j0) if total > 0 else 0.0
    return {job: value * scale for job, value in deltas.items()}, t1 - t0


def node_energy(history: NodeHistory, start: float, end: float, cpus: int, job_id: int = 0) -> float | None:
    """The job's part of one node's energy over [start, end]."""
    samples = history.samples
    if counter_at(samples, end) is None:
        return None
    cuts = [start, *(t for t, _j in samples if start < t < end), end]
    total = 0.0
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            continue
        middle = (a + b) / 2
        present = [o for o in history.occupants if o.start <= middle < o.end]
        at_a, at_b = counter_at(samples, a), counter_at(samples, b)
        assert at_a is not None and at_b is not None  # a < b <= end, and the samples cover end
        energy = at_b - at_a
        sharing = sum(o.cpus for o in present) or cpus
        if history.job_gpu:
            gpu, length = _gpu_fractions(history, middle)
            if history.gpus_apart:  # joules per sample interval, scaled to this part of it
                total += gpu.get(job_id, 0.0) * (b - a) / length if length > 0 else 0.0
            elif len(present) > 1 and gpu:
                mine = energy * gpu.get(job_id, 0.0)
                energy -= energy * sum(gpu.get(o.job_id, 0.0) for o in present)
                total += mine
        if len(present) <= 1 or history.idle_watts is None:
            total += energy * cpus / sharing
            continue
        idle = min(energy, history.idle_watts * (b - a))
        deltas = _cpu_deltas(history, middle)
        used = sum(deltas.get(o.job_id, 0.0) for o in present)
        dynamic_share = deltas.get(job_id, 0.0) / used if used > 0 else cpus / sharing
        total += idle * cpus / sharing + (energy - idle) * dynamic_share
    return total


def job_energy(histories: Mapping[str, NodeHistory], start: float, end: float, cpus: Mapping[str, int],
               job_id: int = 0) -> float | None:
    """The job's (or a step's) energy in joules, or None while a node's samples do not yet
    cover its end."""
    total = 0.0
    for node, node_cpus in cpus.items():
        history = histories.get(node)
        part = node_energy(history, start, end, node_cpus, job_id) if history is not None else None
        if part is None:
            return None
        total += part
    return total


def covered_until(histories: Mapping[str, NodeHistory], nodes: Sequence[str]) -> float:
    """The latest time every one of ``nodes`` has a sample for (0 when one has none)."""
    ends = [histories[n].samples[-1][0] if n in histories and histories[n].samples else 0.0 for n in nodes]
    return min(ends, default=0.0)


def metered_span(nodes: Iterable) -> tuple[float, float] | None:
    """The period every metered node's kept samples cover (None: no node is metered)."""
    metered = [node.energy_samples for node in nodes if node.energy_samples]
    if not metered:
        return None
    return max(s[0][0] for s in metered), min(s[-1][0] for s in metered)


def cluster_joules(nodes: Iterable, start: float, end: float) -> float | None:
    """The metered nodes' energy over [start, end] from their counter samples (None when some
    metered node's samples, kept for an hour, do not cover the period)."""
    total = 0.0
    for node in nodes:
        if not node.energy_samples:
            continue
        first, last = counter_at(node.energy_samples, start), counter_at(node.energy_samples, end)
        if first is None or last is None or start < node.energy_samples[0][0]:
            return None
        total += last - first
    return total


@dataclass(slots=True)
class EnergyTotals:
    """Joules of the jobs whose energy became final since the controller started, by who ran
    them (the metrics' counters)."""

    by_user: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_account: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_partition: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, user: str, account: str, partition: str, joules: float | None) -> None:
        if joules:
            self.by_user[user] += joules
            self.by_account[account] += joules
            self.by_partition[partition] += joules

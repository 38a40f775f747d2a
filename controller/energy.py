"""Job energy from the nodes' energy counters (seed 004, eq. 2): for each node of a job,
EN(end) - EN(start), read off the node's counter samples by linear interpolation, and summed
over the job's nodes.

A node shared by several jobs is not charged in full to each (Slurm's weakness): between two
samples its energy is split among the jobs running on it in proportion to their allocated CPUs
(the documented rule; splitting the dynamic part by each job's CPU time is for later). Pure
functions of the samples and the jobs' intervals.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence

Samples = Sequence[tuple[float, float]]  # (time, joules), in time order


def counter_at(samples: Samples, t: float) -> float | None:
    """The node's counter at ``t`` (None if no sample at or after ``t`` has arrived yet)."""
    if not samples or t > samples[-1][0]:
        return None
    index = bisect.bisect_left(samples, (t, float("-inf")))
    if index == 0:
        return samples[0][1]
    (t0, j0), (t1, j1) = samples[index - 1], samples[index]
    return j0 if t1 <= t0 else j0 + (j1 - j0) * (t - t0) / (t1 - t0)


def node_energy(samples: Samples, start: float, end: float, cpus: int,
                occupants: Sequence[tuple[float, float, int]]) -> float | None:
    """The job's part of one node's energy over [start, end]; ``occupants`` are all jobs on the
    node (the job included) as (start, end, cpus)."""
    if counter_at(samples, end) is None:
        return None
    cuts = [start, *(t for t, _j in samples if start < t < end), end]
    total = 0.0
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            continue
        middle = (a + b) / 2
        sharing = sum(c for s, e, c in occupants if s <= middle < e) or cpus
        total += (counter_at(samples, b) - counter_at(samples, a)) * cpus / sharing
    return total


def job_energy(samples: Mapping[str, Samples], start: float, end: float, cpus: Mapping[str, int],
               occupants: Mapping[str, Sequence[tuple[float, float, int]]]) -> float | None:
    """The job's energy in joules, or None while a node's samples do not yet cover its end."""
    total = 0.0
    for node, node_cpus in cpus.items():
        part = node_energy(samples.get(node, ()), start, end, node_cpus, occupants.get(node, ()))
        if part is None:
            return None
        total += part
    return total

"""A job's energy from its nodes' readings: the nodes' histories with their occupants, a
running job's energy so far (sstat, fair share), and an ended job's (and its steps') energy
once every node's readings cover its end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from wattsched.controller import energysplit
from wattsched.model import Job, Step

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")


def node_histories(state: ClusterState, nodes: Iterable[str], now: float) -> dict[str, energysplit.NodeHistory]:
    """The energy history of ``nodes`` with the jobs that ran on them (for the split)."""
    wanted = {n for n in nodes if n in state.nodes}
    occupants: dict[str, list[energysplit.Occupant]] = {n: [] for n in wanted}
    for other in state.jobs.values():  # one pass over the jobs for every node being settled
        if other.start_time:
            for n in wanted.intersection(other.alloc.alloc_cpus):
                occupants[n].append(energysplit.Occupant(other.start_time, other.end_time or now,
                                                         other.alloc.alloc_cpus[n], other.job_id))
    # RAPL meters CPU packages and DRAM alone: GPUs' energy is then added to their jobs' shares
    gpus_apart = state.config.acct_gather_energy_type.endswith("/rapl")
    return {n: energysplit.NodeHistory(state.nodes[n].energy_samples, state.nodes[n].job_cpu_samples,
                                       state.nodes[n].idle_watts, occupants[n], state.nodes[n].job_gpu_samples,
                                       gpus_apart) for n in wanted}


def energy_until(state: ClusterState, job: Job, now: float,
                  histories: Mapping[str, energysplit.NodeHistory] | None = None) -> tuple[float | None, float]:
    """A started job's energy up to its nodes' latest common reading (or its end), and that time
    (``histories``: of its nodes at least, when the caller has them already)."""
    if histories is None:
        histories = node_histories(state, job.alloc.alloc_cpus, now)
    until = energysplit.covered_until(histories, list(job.alloc.alloc_cpus))
    if job.end_time:
        until = min(until, job.end_time)
    joules = energysplit.job_energy(histories, job.start_time, until, job.alloc.alloc_cpus, job.job_id) \
        if job.start_time and until > job.start_time else None
    return joules, until


def step_energy_so_far(state: ClusterState, job: Job, step: Step, now: float) -> float | None:
    """sstat: a running step's energy up to its nodes' latest common reading (its part of each node
    as its job's, as an ended step's is figured)."""
    histories = node_histories(state, step.nodes, now)
    until = energysplit.covered_until(histories, list(step.nodes))
    if not step.start_time or until <= step.start_time:
        return None
    cpus = job.alloc.alloc_cpus
    share = {n: cpus.get(n, 1) for n in step.nodes}
    return energysplit.job_energy(histories, step.start_time, until, share, job.job_id)


def energies_so_far(state: ClusterState, jobs: list[Job], now: float) -> dict[int, float]:
    """What fair share counts of running (or settling) jobs' energy: 0 before any reading. The
    nodes' histories are gathered once for them all (a pass over every job per node set)."""
    histories = node_histories(state, {n for job in jobs for n in job.alloc.alloc_cpus}, now)
    return {job.job_id: energy_until(state, job, now, histories)[0] or 0.0 for job in jobs}


def energy_settle_s(state: ClusterState) -> float:
    """How long an ended job waits for a reading past its end: the agents read at once when
    a job ends, so this is only reached by a node whose meter stopped answering."""
    return 10.0 + 2 * max(state.config.acct_gather_node_freq_s, state.config.energy_ipmi_frequency_s or 0)


def account_energy(state: ClusterState, now: float) -> list[Job]:
    """Give ended jobs (and their steps) their energy once every node's samples cover their
    end; after energy_settle_s() a job goes without energy (a node that stopped reporting).
    Returns the jobs whose energy is settled now: those only waiting for it may end
    (jobend.end_settled)."""
    ready, settled = [], []
    for job_id in list(state.energy_due):
        job = state.jobs.get(job_id)
        if job is None or now - job.end_time > energy_settle_s(state):
            state.energy_due.discard(job_id)
            if job is not None:
                log.warning("job ended without its energy: no reading past its end",
                            extra={"job_id": job_id, "nodes": ",".join(job.alloc.alloc_cpus)})
                energy_settled(state, job)
                settled.append(job)
        elif all(n in state.nodes and state.nodes[n].energy_samples
                 and state.nodes[n].energy_samples[-1][0] >= job.end_time for n in job.alloc.alloc_cpus):
            ready.append(job)
    if not ready:
        return settled
    histories = node_histories(state, {n for job in ready for n in job.alloc.alloc_cpus}, now)
    for job in ready:
        joules = energysplit.job_energy(histories, job.start_time, job.end_time, job.alloc.alloc_cpus, job.job_id)
        if joules is None:
            continue
        job.energy.consumed_energy_j = round(joules)
        for step in job.steps:
            if step.start_time and step.end_time:
                part = energysplit.job_energy(histories, step.start_time, step.end_time,
                                              {n: job.alloc.alloc_cpus.get(n, 1) for n in step.nodes}, job.job_id)
                step.consumed_energy_j = round(part) if part is not None else None
        state.energy_due.discard(job.job_id)
        energy_settled(state, job)
        settled.append(job)
    return settled


def energy_settled(state: ClusterState, job: Job) -> None:
    job.energy_pending = False
    series = state.carbon.series if state.carbon is not None else None
    if series is not None and job.energy.consumed_energy_j and job.end_time > job.start_time:
        job.energy.co2e_g = series.emissions_g(job.energy.consumed_energy_j, job.start_time, job.end_time)
    state.energy_totals.add(job.user, job.account, job.partition, job.energy.consumed_energy_j)
    state.touch(job, request_changed=False)


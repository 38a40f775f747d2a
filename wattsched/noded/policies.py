"""The agent's side of the energy policies: after every poll of the meter, each job's signature
on each of our nodes, and for a job under min_energy or min_time the frequency its policy
chooses from it (wattsched.energypolicy), applied at once.

A signature needs the share of the job's cycles stalled on memory. Virtual nodes take it from
the job's application model (energypolicy.APP_ENV, the share m of its time at the highest
frequency spent waiting for memory): at f the stalled share is m / (m + (1 - m) f_max / f), the
CPI is EMULATED_CPI / (1 - stalled share), and the memory bandwidth m * EMULATED_GBS times the
job's speed (its throttle, noded.throttle, follows the same model). Real nodes read the job's CPUs'
hardware counters (noded.perfcounters: cycles, instructions, last-level misses, back-end stalls)
and take the signature from them (energypolicy.counted_signature); a node without a PMU (most VMs)
measures its jobs (watts, busy share) but no policy moves their frequency, as the agent logs once.

The watts of a signature are the job's share of its node's: the idle watts in proportion to its
CPUs, the rest in proportion to its busy share among the node's jobs (as the controller splits
a shared node's energy). A sample counts only when the job's frequency did not change since the
previous poll (the interval it covers ran at one frequency); the policy decides on the first such
sample and again when the job changes phase.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from wattsched import cpufreq, energypolicy
from wattsched.config import NodeConf
from wattsched.energypolicy import Decision, NodePower, Settings, Signature
from wattsched.noded import perfcounters
from wattsched.noded.allocations import NodeJob

log = logging.getLogger("wattsched.noded")
EMULATED_CPI = 0.8  # an emulated core's cycles per instruction while it does not wait for memory
EMULATED_GBS = 10.0  # an emulated node's memory traffic when memory-bound at its highest frequency


def speed(job: NodeJob, khz: int, f_max: int) -> float:
    """The share of the CPU a virtual node's job gets at ``khz``: its application model's progress."""
    if not khz or not f_max:
        return 1.0
    return 1.0 / cpufreq.runtime_factor(khz, f_max, 1.0 - job.memory_bound)


def emulated_signature(job: NodeJob, khz: int, f_max: int, watts: float, busy: float) -> Signature:
    m = job.memory_bound
    compute = (1 - m) * f_max / khz
    stalled = min(energypolicy.MAX_STALL, m / (m + compute)) if m + compute > 0 else 0.0
    return Signature(khz=khz, memory_share=stalled, watts=watts, busy=busy, cpi=EMULATED_CPI / (1 - stalled),
                     gbs=m * EMULATED_GBS * speed(job, khz, f_max) * min(1.0, busy))


@dataclass(frozen=True, slots=True)
class Sample:
    """What one poll measured of a job on a node."""

    khz: int
    f_max: int
    busy: float  # its busy share of the node
    node_busy: float  # all the node's jobs' busy shares
    node_watts: float


class Policies:
    def __init__(self, nodes: Mapping[str, NodeConf], emulated: bool, confined: bool = False):
        self.nodes, self.emulated, self.confined = nodes, emulated, confined
        self.latest: dict[tuple[str, int], Signature] = {}
        self._khz_seen: dict[tuple[str, int], int] = {}
        self.counters: dict[tuple[str, int], perfcounters.JobCounters] = {}
        # why real jobs go uncounted: their CPUs are not theirs alone, or the host has no PMU
        self.uncounted = "" if emulated else \
            "jobs are not confined to their CPUs (ConstrainCores, TaskPlugin=task/affinity)" if not confined else \
            (perfcounters.unavailable() or "")
        if self.uncounted:
            log.warning("jobs' hardware counters are not read: energy policies only measure on this host",
                        extra={"reason": self.uncounted})

    def power(self, node: str) -> NodePower:
        conf = self.nodes[node]
        idle = float(conf.idle_watts or 0)
        return NodePower(idle, float(conf.max_watts or idle), conf.cpu_freq_watts)

    def ladder(self, node: str) -> list[int]:
        return cpufreq.ladder(self.nodes[node].cpu_freq_watts)

    def settings(self, job: NodeJob) -> Settings:
        return Settings(job.energy_policy, job.energy_setting, job.energy_start_khz)

    def first_khz(self, job: NodeJob, top: int) -> int:
        """The frequency a job starts at under its policy, below a ceiling of ``top``."""
        return energypolicy.start_khz(self.settings(job), self.ladder(job.node), top)

    def started(self, job: NodeJob, khz: int) -> None:
        """The job runs at ``khz`` from its start: its first interval is steady if it is still there.
        On a real node with counters, its CPUs are counted from now."""
        key = (job.node, job.job_id)
        self._khz_seen[key] = khz
        if not self.emulated and not self.uncounted and job.cpu_ids and key not in self.counters:
            self.counters[key] = perfcounters.JobCounters(job.cpu_ids)

    def signature(self, job: NodeJob, sample: Sample) -> Signature | None:
        """The job's signature over the last interval, if it ran at one frequency and we can tell."""
        key = (job.node, job.job_id)
        steady = self._khz_seen.get(key) == sample.khz
        self._khz_seen[key] = sample.khz
        counters = self.counters.get(key)
        counts = counters.interval() if counters is not None else None  # read every poll: the next interval
        if not steady or not sample.khz or not sample.f_max or sample.busy <= 0:
            return None
        conf = self.nodes[job.node]
        idle = float(conf.idle_watts or 0)
        share = sample.busy / sample.node_busy if sample.node_busy > 0 else 1.0
        watts = idle * min(1.0, job.cpus / max(1, conf.cpus)) + max(0.0, sample.node_watts - idle) * share
        if self.emulated:
            sig: Signature | None = emulated_signature(job, sample.khz, sample.f_max, watts, min(1.0, sample.busy))
        elif counts is not None:
            sig = energypolicy.counted_signature(counts.values, counts.seconds, sample.khz, watts,
                                                 min(1.0, sample.busy))
        else:
            return None
        if sig is not None:
            self.latest[key] = sig
        return sig

    def decide(self, job: NodeJob, sample: Sample) -> Decision | None:
        """A new frequency for the job, when its policy wants one now (None: keep what it has)."""
        sig = self.signature(job, sample)
        if sig is None or job.energy_policy == "monitoring":
            return None
        if job.policy_khz and not energypolicy.phase_changed(job.decided_bound, sig, sample.f_max):
            return None  # decided, and the job has not changed phase since
        decision = energypolicy.decide(self.settings(job), sig, self.ladder(job.node), job.top_khz or sample.f_max,
                                       self.power(job.node), sample.f_max)
        job.policy_khz, job.decided_bound = decision.khz, sig.bound_at(sample.f_max)
        job.time_factor, job.energy_factor = decision.time_factor, decision.energy_factor
        return decision

    def forget(self, node: str, job_id: int) -> None:
        self.latest.pop((node, job_id), None)
        self._khz_seen.pop((node, job_id), None)
        counters = self.counters.pop((node, job_id), None)
        if counters is not None:
            counters.close()

    def usage_fields(self, job: NodeJob) -> dict[str, float | int]:
        """What JobUsage reports of the job's signature and policy on its node."""
        sig = self.latest.get((job.node, job.job_id))
        fields: dict[str, float | int] = {}
        if sig is not None:
            f_max = max(self.ladder(job.node))
            fields = {"cpi": round(sig.cpi, 4), "gbs": round(sig.gbs, 4), "memory_bound": round(sig.bound_at(f_max), 4)}
        return fields | self.policy_fields(job)

    @staticmethod
    def policy_fields(job: NodeJob) -> dict[str, float | int]:
        """What JobUsage reports of the job's policy's latest choice (nothing before its first)."""
        if not job.policy_khz:
            return {}
        return {"policy_khz": job.policy_khz, "time_factor": round(job.time_factor, 4),
                "energy_factor": round(job.energy_factor, 4)}

"""priority/multifactor: job priority as Slurm's weighted sum of factors, plus energy.

    priority = site + W_age*age + W_size*jobsize + W_partition*partition + W_qos*qos
               + W_fairshare*fairshare + W_energy*energyfairshare + W_carbon*carbon - nice

Every factor is in [0, 1]; the sum is truncated to an integer (at least 1), as in Slurm.

- age: time since the job became eligible over PriorityMaxAge (capped at 1);
- jobsize: the job's share of the machine's CPUs (PriorityFavorSmall=YES: one minus it);
- partition: the partition's PriorityJobFactor over the largest one;
- qos: the job's QOS's Priority over the largest Priority of any QOS (0 without accounting);
- fairshare / energy: the (account, user) association's FairShare and EnergyFairShare factors,
  computed by :mod:`wattsched.fairshare` from decayed CPU-seconds and joules; with both weights
  set (the seed's FS+EFS policy), each is first divided by its largest value among the pending
  jobs, so that both span [0, 1];
- carbon (ours): how flexible the job is times how green this hour is. A job is flexible by its
  --deadline: the slack it leaves (deadline - now - time limit) over a day, capped at 1 (no
  deadline: 0). The hour's greenness is where the grid's carbon intensity now sits between the
  highest and the lowest of the day around it (wattsched.carbon; 0 without a series). So work
  that can wait runs ahead of the rest in the greener hours, and falls back to its other
  factors in the dirtier ones.

``scontrol update job Priority=N`` fixes a job's priority (site factor); a held job has 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from wattsched.config import Config
from wattsched.scheduling.records import JobRequest, Snapshot


@dataclass(frozen=True, slots=True)
class Factors:
    """One pending job's factors (each in [0, 1]) and its priority, as sprio shows them."""

    job_id: int
    user: str
    partition: str
    priority: int
    site: int
    age: float
    fairshare: float
    job_size: float
    partition_factor: float
    qos: float
    energy: float
    nice: int
    account: str = ""
    qos_name: str = ""
    carbon: float = 0.0


@dataclass(frozen=True, slots=True)
class Weights:
    age: int = 0
    job_size: int = 0
    partition: int = 0
    fairshare: int = 0
    qos: int = 0
    energy: int = 0
    max_age_s: float = 7 * 86400.0
    favor_small: bool = False
    carbon: int = 0

    @classmethod
    def from_config(cls, config: Config) -> Weights:
        return cls(config.priority_weight_age, config.priority_weight_job_size, config.priority_weight_partition,
                   config.priority_weight_fairshare, config.priority_weight_qos, config.priority_weight_energy,
                   config.priority_max_age_min * 60.0, config.priority_favor_small, config.priority_weight_carbon)


class MultifactorPriority:
    """Weighted factors; see the module's documentation."""

    static = False  # age and fair share change with time and usage

    def __init__(self, config: Config | None = None):
        self.weights = Weights.from_config(config) if config is not None else Weights()

    def priorities(self, snapshot: Snapshot) -> dict[int, int]:
        # a held job's priority is 0 whatever its factors, so the pass computes none for it: a queue
        # of 2,000 held jobs (sbatch -H) took 13 ms a pass, most of it here
        factors = self.breakdown(snapshot, held=False)
        return {job.job_id: 0 if job.hold else factors[job.job_id].priority for job in snapshot.pending}

    def breakdown(self, snapshot: Snapshot, held: bool = True) -> dict[int, Factors]:
        """Each pending job's factors (``held``: held jobs' too, as sprio shows them)."""
        w = self.weights
        total_cpus = sum(n.cpus for n in snapshot.nodes) or 1
        top_partition = max((p.priority_job_factor for p in snapshot.partitions.values()), default=1) or 1
        # per association, not per job: a queue holds far fewer of them than jobs
        shares = {pair: snapshot.fairshare.get(pair, (0.0, 0.0))
                  for pair in {(job.account, job.user) for job in snapshot.pending}}
        qos_table = snapshot.accounts.qos if snapshot.accounts is not None else {}
        top_qos = max((q.priority for q in qos_table.values()), default=0) or 1
        fs_scale = efs_scale = 1.0
        if w.fairshare and w.energy:  # FS+EFS: each factor normalized to its current maximum
            fs_scale = 1 / (max((fs for fs, _e in shares.values()), default=0.0) or 1.0)
            efs_scale = 1 / (max((efs for _f, efs in shares.values()), default=0.0) or 1.0)
        result = {}
        for job in snapshot.pending:
            if job.hold and not held:
                continue
            fs, efs = shares[job.account, job.user]
            part = snapshot.partitions.get(job.partition)
            age = min(1.0, max(0.0, snapshot.now - _eligible(job)) / w.max_age_s) if w.max_age_s > 0 else 1.0
            share = min(1.0, job.min_cpus / total_cpus)
            size = 1.0 - share if w.favor_small else share
            part_factor = (part.priority_job_factor if part else 0) / top_partition
            energy = efs * efs_scale
            fs = fs * fs_scale
            qos = qos_table.get(job.qos)
            qos_factor = qos.priority / top_qos if qos is not None else 0.0
            carbon = flexibility(job, snapshot.now) * snapshot.greenness
            if job.hold:
                priority, site = 0, 0
            elif job.admin_priority is not None:
                priority = site = job.admin_priority
            else:
                total = (w.age * age + w.job_size * size + w.partition * part_factor + w.fairshare * fs
                         + w.qos * qos_factor + w.energy * energy + w.carbon * carbon)
                priority, site = max(1, int(total) - job.nice), 0
            result[job.job_id] = Factors(job.job_id, job.user, job.partition, priority, site, age, fs, size,
                                         part_factor, qos_factor, energy, job.nice, job.account, job.qos, carbon)
        return result


FLEXIBLE_S = 86400.0  # a day of slack makes a job fully flexible


def flexibility(job: JobRequest, now: float) -> float:
    """How long the job could wait and still end before its --deadline, over a day (0 to 1)."""
    if not job.deadline:
        return 0.0
    limit_s = (job.time_limit_min if job.time_limit_min is not None else 1) * 60
    return min(1.0, max(0.0, (job.deadline - now - limit_s) / FLEXIBLE_S))


def _eligible(job: JobRequest) -> float:
    return max(job.submit_time, job.begin_time)

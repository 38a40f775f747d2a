"""Preemption (PreemptType=preempt/qos or preempt/partition_prio): which running jobs a pending
job that finds no nodes may take them from, as Slurm's plugins choose them. Pure: the snapshot and ``now`` in, the
preemptees out; the shell cancels, requeues or suspends them by their PreemptMode, and the
preemptor starts once their nodes are free.

- A running job may be preempted by a pending one when (preempt/qos) its QOS is in the pending
  job's QOS's Preempt list, or (preempt/partition_prio) its partition's PriorityTier is lower
  than the pending job's; when it has run at least its PreemptExemptTime (its QOS's, else the
  cluster's); and when its mode is not OFF: its QOS's PreemptMode (preempt/qos) or its
  partition's (preempt/partition_prio), else the cluster's.
- Candidates are taken lowest QOS priority first, then the most recently started first (it
  loses the least work; then the highest job id), until the pending job fits; of those, only
  the ones on the nodes it is given are preempted. Jobs already being preempted are counted
  first, at no cost, so a preemptor waiting for its preemptees to end never takes more. A job
  to be suspended gives back its CPUs and GPUs, never its memory (its processes keep it), so
  it makes no room for a job that needs whole nodes.
- A requeued victim waits until its preemptor has started (the shells keep it out of the queue
  till then), or it would take its place back at once.
- Pending jobs are looked at in priority order, each taking only jobs no earlier one took, up
  to a bounded number per pass (a pass costs the same however long the queue).
- The backfill planner asks the same question (:class:`Seizer`): a pending job that fits once
  jobs it may preempt are gone is planned to start now on those nodes, as Slurm's will-run test
  with preemptee candidates does, so nothing of lower priority is backfilled onto them meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from wattsched import states
from wattsched.limits import Qos
from wattsched.memos import NodeMemo
from wattsched.scheduling.candidates import Candidates
from wattsched.scheduling.cycle import tier
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import (
    Allocation,
    Decisions,
    JobRequest,
    NodeSnap,
    PartitionSnap,
    PreemptSettings,
    RunningJob,
    Snapshot,
)

# pending jobs looked at for preemption in one pass (Slurm looks at every job its schedulers reach)
MAX_PREEMPTORS = 32
OFF, CANCEL, REQUEUE, SUSPEND = "OFF", "CANCEL", "REQUEUE", "SUSPEND"


def mode_of(qos: Qos | None, settings: PreemptSettings, partition: PartitionSnap | None = None) -> str:
    """A running job's PreemptMode: with preempt/partition_prio its partition's, else its QOS's
    (unless that says "cluster"), else the cluster's; GANG and WITHIN are qualifiers."""
    if settings.by_partition:
        text = partition.preempt_mode if partition is not None and partition.preempt_mode else settings.mode
    else:
        text = qos.preempt_mode if qos is not None and qos.preempt_mode.lower() != "cluster" else settings.mode
    modes = [m for m in text.upper().split(",") if m not in ("GANG", "WITHIN")]
    return modes[0] if modes else OFF


def exempt_until(job: RunningJob, qos: Qos | None, settings: PreemptSettings) -> float:
    exempt = qos.preempt_exempt_time * 60.0 if qos is not None and qos.preempt_exempt_time is not None \
        else settings.exempt_s
    return job.start + exempt


def may_preempt(pending: JobRequest, job: RunningJob, table: Mapping[str, Qos],
                partitions: Mapping[str, PartitionSnap], settings: PreemptSettings, now: float) -> bool:
    qos = table.get(job.qos)
    if settings.by_partition:
        mine, theirs = partitions.get(pending.partition), partitions.get(job.partition)
        allowed = mine is not None and theirs is not None and theirs.priority_tier < mine.priority_tier
    else:
        preemptor = table.get(pending.qos)
        allowed = preemptor is not None and job.qos in preemptor.preempt
    return allowed and mode_of(qos, settings, partitions.get(job.partition)) != OFF \
        and now >= exempt_until(job, qos, settings)


class Seizer:
    """The preemptors of one pass: which running jobs each may take, none taken twice."""

    def __init__(self, snapshot: Snapshot, select: SelectPlugin) -> None:
        accounts = snapshot.accounts
        self.snapshot, self.select, self.settings = snapshot, select, snapshot.preempt
        self.table: Mapping[str, Qos] = accounts.qos if accounts is not None else {}
        self.lowest = min((p.priority_tier for p in snapshot.partitions.values()), default=1)
        self.taken: dict[int, int] = {}  # victim -> the pending job it makes room for

    @property
    def on(self) -> bool:
        return self.settings.on and self.snapshot.accounts is not None and bool(self.snapshot.running)

    def may_want(self, job: JobRequest) -> bool:
        """Whether the job may preempt anyone at all (its QOS preempts some, or its tier is above the lowest)."""
        if self.settings.by_partition:
            return tier(self.snapshot.partitions, job) > self.lowest
        qos = self.table.get(job.qos)
        return qos is not None and bool(qos.preempt)

    def seize(self, job: JobRequest, nodes: list[NodeSnap], free: Mapping[str, tuple[int, int]],
              gpus: Mapping[str, Mapping[str, int]] | None) -> Allocation | None:
        """Where the job fits on ``nodes`` (with ``free`` CPUs and memory, and ``gpus``) once the
        fewest running jobs it may preempt (in preemption order) are gone; those are taken for it."""
        snap = self.snapshot
        pool = [r for r in snap.running if r.job_id not in self.taken and not r.suspended and
                (r.ending or may_preempt(job, r, self.table, snap.partitions, self.settings, snap.now))]
        suspended = {r.job_id for r in pool if not r.ending and
                     mode_of(self.table.get(r.qos), self.settings, snap.partitions.get(r.partition)) == SUSPEND}
        found = _victims(job, pool, self.table, snap, nodes, free, gpus, self.select, suspended)
        if found is None:
            return None
        victims, alloc = found
        for victim in victims:
            self.taken[victim] = job.job_id
        return alloc


def preemptees(snapshot: Snapshot, decisions: Decisions, select: SelectPlugin) -> dict[int, int]:
    """The running jobs to preempt, each with the pending job it makes room for: the pass's
    ``decisions`` say which pending jobs found no nodes (Resources) and their priorities."""
    seizer = Seizer(snapshot, select)
    if not seizer.on:
        return {}
    prio, parts = decisions.priorities, snapshot.partitions
    wanting = sorted((job for job in snapshot.pending if decisions.reasons.get(job.job_id) == states.R_RESOURCES
                      and seizer.may_want(job)),
                     key=lambda j: (-tier(parts, j), -prio.get(j.job_id, 0), j.submit_time, j.job_id))[:MAX_PREEMPTORS]
    candidates = Candidates(snapshot, NodeMemo())
    for job in wanting:
        nodes = candidates.for_job(job, None)
        seizer.seize(job, nodes, {n.name: (n.free_cpus, n.free_mem_mb) for n in nodes},
                     {n.name: dict(n.free_gpus) for n in nodes if n.gpus} if job.gpus else None)
    ending = {r.job_id for r in snapshot.running if r.ending}
    return {victim: by for victim, by in seizer.taken.items() if victim not in ending}


def _victims(job: JobRequest, pool: list[RunningJob], table: Mapping[str, Qos], snapshot: Snapshot,
             nodes: list[NodeSnap], free_now: Mapping[str, tuple[int, int]],
             free_gpus: Mapping[str, Mapping[str, int]] | None, select: SelectPlugin,
             suspended: AbstractSet[int]) -> tuple[list[int], Allocation] | None:
    """The fewest of ``pool`` (in preemption order) whose nodes, given back, let the job fit, and where.
    A job to be ``suspended`` gives back its CPUs and GPUs only: its memory stays held."""
    if not pool:
        return None
    parts = snapshot.partitions
    pool.sort(key=lambda r: (not r.ending, parts[r.partition].priority_tier if r.partition in parts else 1,
                             table[r.qos].priority if r.qos in table else 0, -r.start, -r.job_id))
    free = {n.name: free_now[n.name] for n in nodes}
    gpus = {name: dict(kinds) for name, kinds in free_gpus.items()} if free_gpus is not None else None
    added: list[RunningJob] = []
    for victim in pool:
        if not any(name in free for name in victim.cpus):
            continue
        added.append(victim)
        for name, cpus in victim.cpus.items():
            if name in free:
                free_cpus, free_mem = free[name]
                free[name] = (free_cpus + cpus,
                              free_mem + (0 if victim.job_id in suspended else victim.mem_mb.get(name, 0)))
        if gpus is not None:
            for name, kinds in victim.gpus.items():
                if name in gpus:
                    for kind, count in kinds.items():
                        gpus[name][kind] = gpus[name].get(kind, 0) + count
        usable = [n for n in nodes if free[n.name][0] > 0]
        alloc: Allocation | None = select.select(job, usable, free, snapshot.def_mem_per_cpu_mb, gpus)
        if alloc is not None:
            return [v.job_id for v in added if not alloc.cpus.keys().isdisjoint(v.cpus)], alloc
    return None

"""The nodes a job may use: its partition's, without those of reservations in its way, with its
features, ordered as selection wants them (nodes that are on first, then by Weight and name);
and the verdicts built on them: why an eligible job found no nodes, whether it could ever run."""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from wattsched import states
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, ResvSnap, Snapshot, job_end

if TYPE_CHECKING:
    from wattsched.memos import NodeMemo
    from wattsched.scheduling.plugins import NodeIndex, SelectPlugin


def blocking_reservations(job: JobRequest, snapshot: Snapshot, start: float, end: float) -> list[ResvSnap]:
    """The reservations whose nodes the job may not use over [start, end): those overlapping it
    that it is not a member of."""
    return [r for r in snapshot.reservations.values() if r.name != job.reservation and r.overlaps(start, end)]


class Candidates:
    """The nodes a job may use: the ones that are on first (see POWERED_ON), lowest Weight first,
    then by name order; built once per request shape (and, with a :class:`NodeMemo`, kept across
    passes while the nodes' fixed attributes stay), since a 5,000-node partition is too long to
    filter again for every job.

    A job in a reservation may use only that reservation's nodes, and only within its window,
    unless the reservation has the FLEX flag (then it may also start early, overrun and use
    other free nodes). Nobody else may use a reservation's nodes during its window."""

    def __init__(self, snapshot: Snapshot, memo: NodeMemo):
        self.snapshot = snapshot
        self.memo = memo
        self.memo.refresh(snapshot)
        self.by_name = self.memo.by_name

    def for_job(self, job: JobRequest, usable: Collection[str] | None, start: float | None = None) -> list[NodeSnap]:
        """Nodes for ``job`` starting at ``start`` (default now); with ``usable``, only those in it
        (the nodes with a free CPU)."""
        snapshot = self.snapshot
        start = snapshot.now if start is None else start
        blocking: tuple[str, ...] = ()
        if snapshot.reservations:
            end = job_end(job, start)
            blocking = tuple(sorted(r.name for r in blocking_reservations(job, snapshot, start, end)))
            resv = snapshot.reservations.get(job.reservation) if job.reservation else None
            if resv is not None and "FLEX" not in resv.flags and (start < resv.start or end > resv.end):
                return []
        key = (job.partition, job.reservation, job.exc_nodes, job.features, blocking)
        built = self.memo.lists.get(key)
        if built is None:
            names = self._build(job, blocking)
            built = self.memo.lists[key] = (names, {name: p for p, name in enumerate(names)})
        names, position = built
        by_name = self.by_name
        if usable is None:
            return [by_name[name] for name in names]
        if len(usable) * 8 < len(names):  # a busy machine: pick the few usable nodes out by position
            return [by_name[name] for _p, name in sorted((position[n], n) for n in usable if n in position)]
        return [by_name[name] for name in names if name in usable]

    def index(self, job: JobRequest, kind: str,
              build: Callable[[list[NodeSnap], Mapping[str, tuple[int, int]]], NodeIndex]) -> NodeIndex | None:
        """The select plugin's ``kind`` of index over the job's candidate list, built on first use
        from the nodes in list order and their free resources, then kept current by the memo. Only
        for jobs whose candidates are their partition's nodes as they stand now (no reservation
        anywhere, no excluded nodes, no features): None for the others."""
        if self.snapshot.reservations or job.reservation or job.exc_nodes or job.features:
            return None
        key = (job.partition, "", (), (), ())
        found = self.memo.indexes.get((key, kind))
        if found is None:
            built = self.memo.lists.get(key)
            if built is None:
                names = self._build(job, ())
                built = self.memo.lists[key] = (names, {name: p for p, name in enumerate(names)})
            free = collections.ChainMap(self.memo.planned, self.memo.free)  # with this pass's starts
            found = self.memo.indexes[(key, kind)] = build([self.by_name[n] for n in built[0]], free)
        return found

    def _build(self, job: JobRequest, blocking: tuple[str, ...]) -> list[str]:
        snapshot = self.snapshot
        excluded = set(job.exc_nodes)
        for name in blocking:
            excluded |= snapshot.reservations[name].nodes
        resv = snapshot.reservations.get(job.reservation) if job.reservation else None
        allowed = resv.nodes if resv is not None and "FLEX" not in resv.flags else None
        wanted = set(job.features)
        by_name = self.by_name
        result = [node for name in snapshot.partitions[job.partition].nodes
                  if (node := by_name.get(name)) is not None and node.schedulable]
        if excluded or allowed is not None or wanted:
            result = [n for n in result if n.name not in excluded and (allowed is None or n.name in allowed)
                      and (not wanted or wanted <= n.features)]
        # stable: name order within equal weight, the nodes that are on before the others
        if len({(n.wake, n.weight) for n in result}) > 1:
            result.sort(key=lambda n: (n.wake, n.weight))
        return [n.name for n in result]




def unplaced_reason(job: JobRequest, snapshot: Snapshot, by_name: Mapping[str, NodeSnap]) -> str:
    """Slurm's reason for an eligible job that found no nodes: a named node is unavailable, a
    maintenance reservation is in the way, or simply Resources."""
    blocking = blocking_reservations(job, snapshot, snapshot.now, job_end(job, snapshot.now))
    reserved = {n for r in blocking for n in r.nodes}
    if any(n not in by_name or not by_name[n].schedulable or n in reserved for n in job.req_nodes):
        return states.R_NODE_NOT_AVAIL
    part = snapshot.partitions[job.partition]
    if any("MAINT" in r.flags and not r.nodes.isdisjoint(part.nodes) for r in blocking):
        return states.R_MAINT
    return states.R_RESOURCES


def feasible(job: JobRequest, partition: PartitionSnap, nodes: Mapping[str, NodeSnap], select: SelectPlugin,
             def_mem_per_cpu_mb: int) -> bool:
    """Whether the job could ever run in the partition, were all its nodes idle and up."""
    excluded = set(job.exc_nodes)
    wanted = set(job.features)
    pool = [nodes[n] for n in partition.nodes if n in nodes and n not in excluded
            and (not wanted or wanted <= nodes[n].features)]
    if any(n not in partition.nodes for n in job.req_nodes):
        return False
    pool = [NodeSnap(n.name, n.cpus, n.cpus, n.real_memory_mb, n.real_memory_mb, n.weight, n.features, True,
                     gpus=n.gpus, free_gpus=n.gpus, tmp_disk_mb=n.tmp_disk_mb) for n in pool]
    pool.sort(key=lambda n: n.weight)
    free = {n.name: (n.cpus, n.real_memory_mb) for n in pool}
    gpus = {n.name: dict(n.gpus) for n in pool if n.gpus} if job.gpus else None
    return select.select(job, pool, free, def_mem_per_cpu_mb, gpus) is not None

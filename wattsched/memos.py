"""The memos a shell keeps from one scheduling pass to the next, so that a pass costs what changed
rather than the size of the queue and the machine: the queue's priorities, order and reasons
(QueueMemo), the nodes as schedulers look them up with their candidate lists (NodeMemo), and what
both read to follow a shell's snapshots (Seen, job_changes over the snapshot's Changes). Pure
memos: what they give is what the snapshot says, and a pass without them decides the same.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from types import MappingProxyType
from typing import TypeVar

import numpy as np

from wattsched.scheduling.cycle import tier
from wattsched.scheduling.eligibility import ineligibility
from wattsched.scheduling.plugins import NodeIndex, PriorityPlugin
from wattsched.scheduling.records import (
    Changes,
    Delta,
    JobRequest,
    NodeDelta,
    NodeSnap,
    PartitionSnap,
    ResvSnap,
    RunningJob,
    Snapshot,
)

_Job = TypeVar("_Job", JobRequest, RunningJob)


class Seen:
    """Which snapshot of which series a memo last read a collection of."""

    __slots__ = ("seq", "series")

    def __init__(self) -> None:
        self.series = self.seq = -1

    def follows(self, changes: Changes | None, delta: Delta | NodeDelta | None) -> bool:
        """Whether ``delta`` starts where this memo stopped (and so may be applied)."""
        return changes is not None and delta is not None and changes.series == self.series and \
            delta.since == self.seq

    def read(self, changes: Changes | None) -> None:
        self.series, self.seq = (changes.series, changes.seq) if changes is not None else (-1, -1)


def job_changes(known: set[_Job], jobs: Collection[_Job], delta: Delta[_Job] | None) \
        -> tuple[AbstractSet[_Job], AbstractSet[_Job]]:
    """The jobs gone from ``known`` and those new in ``jobs``, with ``known`` brought up to date:
    from ``delta`` when it follows what ``known`` holds, else by comparing them as sets."""
    if delta is not None:
        known -= delta.gone
        known |= delta.new
        return delta.gone, delta.new
    current = set(jobs)
    gone, new = known - current, current - known
    known.clear()
    known |= current
    return gone, new


class QueueMemo:
    """The queue as the previous pass left it: each pending job's priority, its place in priority
    order and the reasons of the ineligible ones. Only the jobs that arrived or left since are
    worked on: given the snapshot's :class:`Changes` a pass costs what changed, not the length of
    the queue; without, the queues are compared as sets.

    Used only with a priority plugin whose priorities depend on the job alone (``static``, as
    priority/basic). Requests are matched by identity, so a shell that replaces a job's request
    after an update simply ranks that job again. Eligibility is kept for jobs whose verdict
    depends on the job and the partitions alone; jobs with a begin time, a dependency or a
    reservation are checked at every pass, and everything is checked again when the snapshot
    brings other partitions. A pure memo: the decisions are those of a pass without it."""

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, partitions: Mapping[str, PartitionSnap] | None) -> None:
        self.partitions = partitions
        self.seen = Seen()
        self.jobs: set[JobRequest] = set()
        self.order: list[JobRequest] = []
        self.priorities: dict[int, int] = {}
        self.ineligible: dict[int, str] = {}
        self.varying: set[JobRequest] = set()  # checked at every pass

    def update(self, snapshot: Snapshot, priority: PriorityPlugin) \
            -> tuple[Mapping[int, int], list[JobRequest], Mapping[int, str]]:
        """The priorities, the priority order and the ineligible jobs' reasons of ``snapshot``'s
        queue (read-only: they are the memo's own, until the next pass)."""
        changes = snapshot.changes
        if snapshot.partitions is not self.partitions:
            self._reset(snapshot.partitions)
        delta = changes.pending if changes is not None else None
        gone, new = job_changes(self.jobs, snapshot.pending, delta if self.seen.follows(changes, delta) else None)
        self.seen.read(changes)
        if gone:
            order, key = self.order, self._key
            for job in gone:  # found by its rank (job ids make ranks unique): queues run to thousands
                del order[bisect.bisect_left(order, key(job), key=key)]
            self.varying -= gone
            for job in gone:
                del self.priorities[job.job_id]
                self.ineligible.pop(job.job_id, None)
        if new:
            self._add(snapshot, priority, new)
        for job in self.varying:
            self._check(job, snapshot)
        return MappingProxyType(self.priorities), self.order, self.ineligible

    def _key(self, job: JobRequest) -> tuple[int, int, float, int]:
        """A job's rank in the order: its partition's PriorityTier, then its priority."""
        return -tier(self.partitions or {}, job), -self.priorities[job.job_id], job.submit_time, job.job_id

    def _check(self, job: JobRequest, snapshot: Snapshot) -> None:
        reason = ineligibility(job, snapshot)
        if reason is None:
            self.ineligible.pop(job.job_id, None)
        else:
            self.ineligible[job.job_id] = reason

    def _add(self, snapshot: Snapshot, priority: PriorityPlugin, new: AbstractSet[JobRequest]) -> None:
        self.priorities.update(priority.priorities(replace(snapshot, pending=tuple(new))))
        key = self._key
        arrivals = sorted(new, key=key)
        order = self.order
        if order and key(arrivals[0]) < key(order[-1]):
            for job in arrivals:
                bisect.insort(order, job, key=key)
        else:  # the usual case: the newcomers rank below everyone already waiting
            order.extend(arrivals)
        for job in arrivals:
            self._check(job, snapshot)
            if job.begin_time or job.dependency or job.reservation:
                self.varying.add(job)


class NodeMemo:
    """The snapshot's nodes as schedulers look them up, kept from pass to pass: by name, their
    free CPUs and memory (as a mapping and as arrays in node order), the names with a free CPU,
    the machine's free CPUs in all, and the candidate lists of :class:`Candidates`. A shell keeps
    a node's NodeSnap while the node is unchanged, so only the nodes whose snapshot is not the last
    pass's are looked at again; candidate lists are kept while nodes change in nothing but their
    free resources (and partitions and reservations are the same). A pure memo: what it gives is
    what the snapshot says."""

    def __init__(self) -> None:
        self.nodes: tuple[NodeSnap, ...] = ()
        self.seen = Seen()
        self.partitions: Mapping[str, PartitionSnap] = {}
        self.reservations: Mapping[str, ResvSnap] = {}
        self.lists: dict[tuple, tuple[list[str], dict[str, int]]] = {}
        self.indexes: dict[tuple, NodeIndex] = {}  # by candidate list and the plugin's kind of index
        self._rebuild(())

    def refresh(self, snapshot: Snapshot) -> None:
        # the indexes first forget what the last pass planned: they say what a snapshot says
        for name in self.planned:
            for index in self.indexes.values():
                index.update(self.by_name[name], self.free[name])
        self.planned.clear()
        if snapshot.partitions != self.partitions or snapshot.reservations != self.reservations:
            self.partitions, self.reservations = snapshot.partitions, snapshot.reservations
            self.lists, self.indexes = {}, {}
        nodes, old, changes = snapshot.nodes, self.nodes, snapshot.changes
        delta = changes.nodes if changes is not None else None
        follows = self.seen.follows(changes, delta)
        self.seen.read(changes)
        if nodes is old:
            return
        self.nodes = nodes
        if len(nodes) != len(old):
            self._rebuild(nodes)
            return
        if follows:
            assert delta is not None
            changed: Iterable[int] = delta.changed
        else:
            changed = itertools.compress(itertools.count(), map(operator.is_not, old, nodes))
        for i in changed:
            before, node = old[i], nodes[i]
            if node.name != before.name:
                self._rebuild(nodes)
                return
            if not _same_fixed(node, before):
                self.lists, self.indexes = {}, {}
            self._set(i, node)

    def _rebuild(self, nodes: tuple[NodeSnap, ...]) -> None:
        self.names: list[str] = [n.name for n in nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.by_name: dict[str, NodeSnap] = dict(zip(self.names, nodes, strict=True))
        self.free: dict[str, tuple[int, int]] = {n.name: (n.free_cpus, n.free_mem_mb) for n in nodes}
        self.with_cpus: set[str] = {n.name for n in nodes if n.free_cpus > 0}
        self.cpus = np.array([n.free_cpus for n in nodes], dtype=np.int64)
        self.mem = np.array([n.free_mem_mb for n in nodes], dtype=np.int64)
        self.total_free = sum(max(0, n.free_cpus) for n in nodes)  # an over-allocated node frees nothing
        self.total_cpus = sum(n.free_cpus for n in nodes)  # the sum of ``cpus``, negative ones too
        self.with_gpus: set[str] = {n.name for n in nodes if n.gpus}
        self.lists, self.indexes = {}, {}
        self.planned: dict[str, tuple[int, int]] = {}  # what this pass's starts leave free, until the next refresh

    def taken(self, name: str, free: tuple[int, int]) -> None:
        """A pass planned a start on the node: the indexes (those built later in the pass too)
        follow until the next refresh."""
        self.planned[name] = free
        for index in self.indexes.values():
            index.update(self.by_name[name], free)

    def _set(self, i: int, node: NodeSnap) -> None:
        name = node.name
        self.by_name[name] = node
        self.total_free += max(0, node.free_cpus) - max(0, self.free[name][0])
        self.total_cpus += node.free_cpus - self.free[name][0]
        self.free[name] = (node.free_cpus, node.free_mem_mb)
        self.cpus[i], self.mem[i] = node.free_cpus, node.free_mem_mb
        if node.free_cpus > 0:
            self.with_cpus.add(name)
        else:
            self.with_cpus.discard(name)
        if node.gpus:
            self.with_gpus.add(name)
        else:
            self.with_gpus.discard(name)
        for index in self.indexes.values():
            index.update(node, self.free[name])


def _same_fixed(node: NodeSnap, other: NodeSnap) -> bool:
    """Whether the two agree on what decides whether and in which order a node is a candidate."""
    return node.schedulable == other.schedulable and node.wake == other.wake and \
        node.cpus == other.cpus and node.real_memory_mb == other.real_memory_mb and node.weight == other.weight \
        and node.features == other.features and node.gpus == other.gpus



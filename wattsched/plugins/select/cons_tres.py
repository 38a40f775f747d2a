"""select/cons_tres: CPUs and memory as consumable resources on shared nodes.

Contiguous best fit: among the runs of consecutive usable nodes (``node07, node08, ...``, of one
power state and one Weight; the nodes that are on first, then lowest Weight), the smallest run
that can hold the job is used from its start, so allocations are compact hostlists and large free
runs stay whole for large jobs; when no single run can, first fit over all usable nodes in that
order. A node can take ``free CPUs // cpus-per-task`` tasks, capped by ``--ntasks-per-node`` and
by its free memory; nodes named with ``-w`` come first and must all be used. Tasks are laid out
in blocks: every chosen node gets one task, then nodes are filled in order. ``--exclusive`` takes
whole idle nodes. Memory per node is ``--mem``, or ``--mem-per-cpu`` (else DefMemPerCPU) times
the node's allocated CPUs; 0 means memory is not tracked for the job. A job that asks for GPUs
uses only nodes with enough free GPUs of its type: per node (``--gres``, ``--gpus-per-node``,
``--gpus`` spread over its nodes) or per task (``--gpus-per-task``, which caps a node's tasks at
its free GPUs over the GPUs a task takes); the GPUs are counted type by type as
:func:`wattsched.gres.take` does.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from wattsched import gres
from wattsched.scheduling.candidates import Candidates
from wattsched.scheduling.records import Allocation, JobRequest, NodeSnap

_MANY = 1 << 30
_second = operator.itemgetter(1)
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


class ConsTresSelect:
    """Consumable CPUs and memory, contiguous best fit."""

    whole_nodes = False

    def quick_select(self, job: JobRequest, candidates: Candidates, def_mem_per_cpu_mb: int) -> Allocation | None:
        """select() for the common shape, through :class:`FreeRuns`: a task per CPU, no memory
        asked for or defaulted, no node list, count cap or tasks-per-node limit."""
        if job.req_nodes or job.nodes_max or job.ntasks_per_node or job.mem_per_node_mb or job.mem_per_cpu_mb \
                or def_mem_per_cpu_mb or job.cpus_per_task > 1 or job.gpus or job.min_cpus_per_node or job.tmp_mb:
            return None
        exclusive = job.exclusive or self.whole_nodes
        kind = _WHOLE if exclusive else _CPUS
        runs = candidates.index(job, kind, lambda nodes, free: FreeRuns(nodes, free, exclusive))
        if not isinstance(runs, FreeRuns) or not runs.ordered:
            return None
        chosen = runs.best(job.ntasks, max(1, job.nodes_min))
        return _layout(job, chosen, 1, 0, exclusive) if chosen is not None else None

    def select(self, job: JobRequest, candidates: list[NodeSnap], free: Mapping[str, tuple[int, int]],
               def_mem_per_cpu_mb: int, gpus: Mapping[str, Mapping[str, int]] | None = None) -> Allocation | None:
        exclusive = job.exclusive or self.whole_nodes
        cpt = max(1, job.cpus_per_task)
        per_cpu_mem = job.mem_per_cpu_mb or (0 if job.mem_per_node_mb else def_mem_per_cpu_mb)
        wants = job.gpus if job.gpus else None  # (GpuRequest's truth is a call: tested once, not per node)
        gpus = gpus or {}
        need = gres.per_node_need(wants, job.nodes_min) if wants else 0

        def cap(node: NodeSnap) -> int:
            """How many of the job's tasks the node can take."""
            free_cpus, free_mem = free[node.name]
            if exclusive and (free_cpus < node.cpus or free_mem < node.real_memory_mb):
                return 0
            if free_cpus < job.min_cpus_per_node or node.tmp_disk_mb < job.tmp_mb:  # --mincpus, --tmp
                return 0
            tasks = (node.cpus if exclusive else free_cpus) // cpt
            if job.ntasks_per_node:
                tasks = min(tasks, job.ntasks_per_node)
            if job.mem_per_node_mb and job.mem_per_node_mb > (node.real_memory_mb if exclusive else free_mem):
                return 0
            if per_cpu_mem:
                tasks = min(tasks, free_mem // (per_cpu_mem * cpt))
            if wants:
                on_node = gres.available(gpus.get(node.name, {}), wants.kind)
                if on_node < need:
                    return 0
                if wants.per_task:
                    tasks = min(tasks, on_node // wants.per_task)
            return tasks

        if job.req_nodes:
            chosen = self._with_required(job, candidates, cap)
        else:
            # what cap() comes to without a call per node, where only CPUs (and, for whole nodes,
            # memory) count: the common requests, whose selection is most of a backfill pass
            if job.ntasks_per_node or job.mem_per_node_mb or per_cpu_mem or wants or job.min_cpus_per_node \
                    or job.tmp_mb:
                usable = [(n, c) for n in candidates if (c := cap(n)) >= 1]
            elif exclusive:
                usable = [(n, c) for n in candidates if (f := free[n.name])[0] >= n.cpus
                          and f[1] >= n.real_memory_mb and (c := n.cpus // cpt) >= 1]
            else:
                usable = [(n, c) for n in candidates if (c := free[n.name][0] // cpt) >= 1]
            if len(usable) < job.nodes_min or sum(map(_second, usable)) < job.ntasks:
                return None  # not even all of them together
            chosen = self._best_run(job, usable)
        if chosen is None:
            return None
        alloc = _layout(job, chosen, cpt, per_cpu_mem, exclusive)
        if not wants:
            return alloc
        shares = gres.spread(wants.per_job, len(chosen)) if wants.per_job else None
        taken = {}
        for position, (node, _cap) in enumerate(chosen):
            tasks = alloc.tasks[node.name]
            count = tasks * wants.per_task if wants.per_task else shares[position] if shares else need
            order = [kind for kind, _count in node.gpus]
            taken[node.name] = gres.take(gpus.get(node.name, {}), order, wants.kind, count)
        return replace(alloc, gpus=taken)

    @staticmethod
    def _take(job: JobRequest, usable: Iterable[tuple[NodeSnap, int]]) -> list[tuple[NodeSnap, int]] | None:
        """Nodes in order until the job's node count and tasks are covered (None: they are not).
        A node range (-N MIN-MAX) takes as many nodes as there are, up to MAX, as Slurm's does ("as
        many nodes as possible within the range ... without delaying the initiation of the job"),
        and, where the tasks are counted (-n), no more nodes than tasks."""
        nodes_min, ntasks, nodes_max = job.nodes_min, job.ntasks, job.nodes_max or _MANY
        grow = job.nodes_max > job.nodes_min
        limit = min(nodes_max, ntasks) if grow and job.ntasks_set else nodes_max
        chosen: list[tuple[NodeSnap, int]] = []
        capacity = 0
        for pair in usable:
            chosen.append(pair)
            capacity += pair[1]
            if len(chosen) >= limit or (not grow and len(chosen) >= nodes_min and capacity >= ntasks):
                break
        if len(chosen) < nodes_min or capacity < ntasks:
            return None
        return chosen

    def _best_run(self, job: JobRequest, usable: list[tuple[NodeSnap, int]]) -> list[tuple[NodeSnap, int]] | None:
        """The smallest run of consecutive nodes (by name, of one power state and Weight) that can
        hold the job, so that allocations are compact hostlists and large free runs stay whole; first fit over
        all usable nodes when no single run can."""
        nodes_min, ntasks, nodes_max = job.nodes_min, job.ntasks, job.nodes_max or _MANY
        ranks = _RANKS
        best: tuple[int, int, int, int] | None = None  # (wake, weight, capacity, start index)
        run_start = run_len = run_capacity = weight = wake = 0
        follows = _NEVER  # the rank of the node that would continue the run
        for index, (node, tasks) in enumerate(itertools.chain(usable, (_STOP,))):
            rank = ranks.get(node.name)
            if rank is None:
                rank = _rank(node.name)
            if rank != follows or node.weight != weight or node.wake != wake:  # the run before this node is over
                if index and run_len >= nodes_min and run_capacity >= ntasks:
                    candidate = (wake, weight, run_capacity, run_start)
                    if best is None or candidate < best:
                        best = candidate
                        if run_capacity == ntasks:  # an exact fit: nothing can do better
                            break
                run_start, run_len, run_capacity, weight, wake = index, 0, 0, node.weight, node.wake
            if run_len < nodes_max:
                run_capacity += tasks
            run_len += 1
            follows = rank + 1 if rank >= 0 else _NEVER
        if best is not None:
            return self._take(job, itertools.islice(usable, best[3], None))
        return self._take(job, usable)

    def _with_required(self, job: JobRequest, candidates: list[NodeSnap],
                       cap: Callable[[NodeSnap], int]) -> list[tuple[NodeSnap, int]] | None:
        """-w: every named node, then others in order."""
        required = set(job.req_nodes)
        head = [n for n in candidates if n.name in required]
        if len(head) < len(required) or any(cap(n) < 1 for n in head):
            return None
        rest = ((n, c) for n in candidates if n.name not in required and (c := cap(n)) >= 1)
        chosen = self._take(job, [*((n, cap(n)) for n in head), *rest])
        if chosen is None or len(chosen) < len(head):
            return None
        return chosen


_CPUS, _WHOLE = "cons_tres:cpus", "cons_tres:whole"  # the two kinds of FreeRuns


class FreeRuns:
    """The runs _best_run looks for, kept as the nodes' free CPUs change, so that placing a job
    of the common shape costs a few bisections instead of a scan of every idle node (a 25,000-node
    partition scanned for each of 100,000 jobs is what made large simulations crawl).

    Over one candidate list (power state, Weight, name order), a node's capacity is its free CPUs
    (a task per CPU), or with ``exclusive`` all its CPUs when it is wholly free, else 0. A run is a
    maximal stretch of list positions of capacity > 0 whose names number consecutively and whose
    nodes share power state and Weight. ``keys`` holds (wake, weight, capacity, start) of every
    run, sorted: the best run for n tasks on at least m nodes is the first key of the lowest
    (wake, weight) group with capacity >= n and length >= m, exactly _best_run's choice."""

    def __init__(self, nodes: list[NodeSnap], free: Mapping[str, tuple[int, int]], exclusive: bool):
        self.nodes, self.exclusive = nodes, exclusive
        self.position = {n.name: p for p, n in enumerate(nodes)}
        self.group = [(n.wake, n.weight) for n in nodes]
        self.groups = sorted(set(self.group))
        known = [_RANKS.get(n.name) for n in nodes]
        ranks = [r if r is not None else _rank(n.name) for r, n in zip(known, nodes, strict=True)]
        # joins[p]: position p may continue a run that reaches p - 1
        self.joins = [p > 0 and ranks[p - 1] >= 0 and ranks[p] == ranks[p - 1] + 1
                      and self.group[p] == self.group[p - 1] for p in range(len(nodes))]
        # _best_run skips unusable nodes, so in a list out of name order (a partition's own order)
        # a run may continue past them (n5, n13, n6); where names only rise within each group,
        # nothing can lie between two consecutive names and the runs here are its runs
        self.ordered = all(ranks[p] > ranks[p - 1] for p in range(1, len(nodes)) if self.group[p] == self.group[p - 1])
        self.cap = [self._capacity(n, free[n.name]) for n in nodes]
        self.starts: list[int] = []  # sorted
        self.end: dict[int, int] = {}  # run start -> one past its last position
        self.total: dict[int, int] = {}  # run start -> its capacity
        self.keys: list[tuple[int, int, int, int]] = []
        start = None
        for p, c in enumerate(self.cap):
            if start is not None and (not c or not self.joins[p]):
                self._add(start, p, sum(self.cap[start:p]))
                start = None
            if c and start is None:
                start = p
        if start is not None:
            self._add(start, len(nodes), sum(self.cap[start:]))

    def _capacity(self, node: NodeSnap, free: tuple[int, int]) -> int:
        if self.exclusive:
            return node.cpus if free[0] >= node.cpus and free[1] >= node.real_memory_mb else 0
        return max(0, free[0])

    def _key(self, start: int) -> tuple[int, int, int, int]:
        wake, weight = self.group[start]
        return wake, weight, self.total[start], start

    def _add(self, start: int, end: int, total: int) -> None:
        bisect.insort(self.starts, start)
        self.end[start], self.total[start] = end, total
        bisect.insort(self.keys, self._key(start))

    def _remove(self, start: int) -> tuple[int, int]:
        del self.keys[bisect.bisect_left(self.keys, self._key(start))]
        del self.starts[bisect.bisect_left(self.starts, start)]
        return self.end.pop(start), self.total.pop(start)

    def _run_of(self, p: int) -> int:
        return self.starts[bisect.bisect_right(self.starts, p) - 1]

    def update(self, node: NodeSnap, free: tuple[int, int]) -> None:
        p = self.position.get(node.name)
        if p is None:
            return
        old, new = self.cap[p], self._capacity(node, free)
        if old == new:
            return
        self.cap[p] = new
        if old and new:  # the run stays, its capacity changes
            start = self._run_of(p)
            end, total = self._remove(start)
            self._add(start, end, total + new - old)
        elif old:  # the run splits around p: the shorter side is summed
            start = self._run_of(p)
            end, total = self._remove(start)
            if p - start <= end - p - 1:
                left = sum(self.cap[start:p])
                right = total - old - left
            else:
                right = sum(self.cap[p + 1:end])
                left = total - old - right
            if p > start:
                self._add(start, p, left)
            if end > p + 1:
                self._add(p + 1, end, right)
        else:  # p becomes usable: it joins its neighbours' runs
            start, end, total = p, p + 1, new
            if p > 0 and self.joins[p] and self.cap[p - 1]:
                start = self._run_of(p - 1)
                _end, left = self._remove(start)
                total += left
            if end < len(self.cap) and self.joins[end] and self.cap[end]:
                end, right = self._remove(end)
                total += right
            self._add(start, end, total)

    def best(self, ntasks: int, nodes_min: int) -> list[tuple[NodeSnap, int]] | None:
        """The nodes _take() would take from the best run, with their capacities (None: no run holds it)."""
        keys = self.keys
        for wake, weight in self.groups:
            i = bisect.bisect_left(keys, (wake, weight, ntasks, -1))
            while i < len(keys) and keys[i][0] == wake and keys[i][1] == weight:
                start = keys[i][3]
                if self.end[start] - start >= nodes_min:
                    chosen: list[tuple[NodeSnap, int]] = []
                    capacity, p = 0, start
                    while len(chosen) < nodes_min or capacity < ntasks:
                        chosen.append((self.nodes[p], self.cap[p]))
                        capacity += self.cap[p]
                        p += 1
                    return chosen
                i += 1
        return None


_SPAN = 1 << 64  # ranks: a name's prefix times this, plus its number
_NEVER = -2  # no rank is this
_RANKS: dict[str, int] = {}
_PREFIXES: dict[str, int] = {}
_STOP = (NodeSnap("", 0, 0, 0, 0), 0)  # after the last node: ends the last run, continues none


def _rank(name: str) -> int:
    """``node07`` -> a number one below ``node08``'s: consecutive numbers of one prefix make a run
    (-1: a name without a number, which continues no run)."""
    match = _NUMBERED.match(name)
    number = int(match.group(2)) if match else -1
    if match is None or number >= _SPAN - 1:
        rank = -1
    else:
        rank = _PREFIXES.setdefault(match.group(1), len(_PREFIXES)) * _SPAN + number
    _RANKS[name] = rank
    return rank


def _layout(job: JobRequest, chosen: list[tuple[NodeSnap, int]], cpt: int, per_cpu_mem: int,
            exclusive: bool) -> Allocation:
    tasks = {node.name: 1 for node, _cap in chosen}
    left = job.ntasks - len(chosen)
    if job.nodes_min > 1:
        # A node count was asked for: spread the tasks evenly, as Slurm's block layout does.
        while left > 0:
            for node, cap in chosen:
                if left and tasks[node.name] < cap:
                    tasks[node.name] += 1
                    left -= 1
    for node, cap in chosen:
        if left <= 0:
            break
        extra = min(cap - tasks[node.name], left)
        tasks[node.name] += extra
        left -= extra
    if exclusive:
        cpus = {node.name: node.cpus for node, _cap in chosen}
    else:
        cpus = {name: max(count * cpt, job.min_cpus_per_node) for name, count in tasks.items()}
    if job.mem_per_node_mb:
        mem = dict.fromkeys(cpus, job.mem_per_node_mb)
    elif exclusive and not per_cpu_mem:
        mem = {node.name: node.real_memory_mb for node, _cap in chosen}
    else:
        mem = {name: per_cpu_mem * count for name, count in cpus.items()}
    return Allocation(cpus=cpus, tasks=tasks, mem_mb=mem)

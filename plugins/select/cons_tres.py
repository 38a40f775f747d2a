"""select/cons_tres: CPUs and memory as consumable resources on shared nodes.

Contiguous best fit: among the runs of consecutive usable nodes (``node07, node08, ...``, of one
power state and one Weight; the nodes that are on first, then lowest Weight), the smallest run
that can hold the job is used from its start, so allocations are compact hostlists and large free
runs stay whole for large jobs; when no single run can, first fit over all usable nodes in that
order. A node can take ``free CPUs // cpus-per-task`` tasks, capped by ``--ntasks-per-node`` and
by its free memory; nodes named with ``-w`` come first and must all be used. Tasks are laid out
in blocks: every chosen node gets one task, then nodes are filled in order. ``--exclusive`` takes
whole idle nodes. Memory per node is ``--mem``, or ``--mem-per-cpu`` (else DefMemPerCPU) times
the node's allocated CPUs; 0 means memory is not tracked for the job.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping

from wattsched.scheduling import Allocation, JobRequest, NodeSnap

_MANY = 1 << 30
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


class ConsTresSelect:
    """Consumable CPUs and memory, contiguous best fit."""

    whole_nodes = False

    def select(self, job: JobRequest, candidates: list[NodeSnap], free: Mapping[str, tuple[int, int]],
               def_mem_per_cpu_mb: int) -> Allocation | None:
        exclusive = job.exclusive or self.whole_nodes
        cpt = max(1, job.cpus_per_task)
        per_cpu_mem = job.mem_per_cpu_mb or (0 if job.mem_per_node_mb else def_mem_per_cpu_mb)

        def cap(node: NodeSnap) -> int:
            """How many of the job's tasks the node can take."""
            free_cpus, free_mem = free[node.name]
            if exclusive and (free_cpus < node.cpus or free_mem < node.real_memory_mb):
                return 0
            tasks = (node.cpus if exclusive else free_cpus) // cpt
            if job.ntasks_per_node:
                tasks = min(tasks, job.ntasks_per_node)
            if job.mem_per_node_mb and job.mem_per_node_mb > (node.real_memory_mb if exclusive else free_mem):
                return 0
            if per_cpu_mem:
                tasks = min(tasks, free_mem // (per_cpu_mem * cpt))
            return tasks

        if job.req_nodes:
            chosen = self._with_required(job, candidates, cap)
        else:
            if exclusive or job.ntasks_per_node or job.mem_per_node_mb or per_cpu_mem:
                usable = [(n, c) for n in candidates if (c := cap(n)) >= 1]
            else:  # CPUs alone: what cap() comes to, without a call per node
                usable = [(n, c) for n in candidates if (c := free[n.name][0] // cpt) >= 1]
            if len(usable) < job.nodes_min or sum(c for _n, c in usable) < job.ntasks:
                return None  # not even all of them together
            chosen = self._best_run(job, usable)
        if chosen is None:
            return None
        return _layout(job, chosen, cpt, per_cpu_mem, exclusive)

    @staticmethod
    def _take(job: JobRequest, usable: Iterable[tuple[NodeSnap, int]]) -> list[tuple[NodeSnap, int]] | None:
        """Nodes in order until the job's node count and tasks are covered (None: they are not)."""
        nodes_min, ntasks, nodes_max = job.nodes_min, job.ntasks, job.nodes_max or _MANY
        chosen: list[tuple[NodeSnap, int]] = []
        capacity = 0
        for pair in usable:
            chosen.append(pair)
            capacity += pair[1]
            if (len(chosen) >= nodes_min and capacity >= ntasks) or len(chosen) >= nodes_max:
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
    if number < 0 or number >= _SPAN - 1:
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
        cpus = {name: count * cpt for name, count in tasks.items()}
    if job.mem_per_node_mb:
        mem = dict.fromkeys(cpus, job.mem_per_node_mb)
    elif exclusive and not per_cpu_mem:
        mem = {node.name: node.real_memory_mb for node, _cap in chosen}
    else:
        mem = {name: per_cpu_mem * count for name, count in cpus.items()}
    return Allocation(cpus=cpus, tasks=tasks, mem_mb=mem)

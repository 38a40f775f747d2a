"""select/cons_tres: CPUs and memory as consumable resources on shared nodes.

Contiguous best fit: among the runs of consecutive usable nodes (``node07, node08, ...``, of one
Weight, lowest Weight first), the smallest run that can hold the job is used from its start, so
allocations are compact hostlists and large free runs stay whole for large jobs; when no single
run can, first fit over all usable nodes in Weight and name order. A node can take ``free CPUs
// cpus-per-task`` tasks, capped by ``--ntasks-per-node`` and by its free memory; nodes named
with ``-w`` come first and must all be used. Tasks are laid out in blocks: every chosen node
gets one task, then nodes are filled in order. ``--exclusive`` takes whole idle nodes. Memory
per node is ``--mem``, or ``--mem-per-cpu`` (else DefMemPerCPU) times the node's allocated CPUs;
0 means memory is not tracked for the job.
"""

from __future__ import annotations

import functools
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
        nodes_max = job.nodes_max or _MANY
        chosen: list[tuple[NodeSnap, int]] = []
        capacity = 0
        for node, tasks in usable:
            chosen.append((node, tasks))
            capacity += tasks
            if (len(chosen) >= job.nodes_min and capacity >= job.ntasks) or len(chosen) >= nodes_max:
                break
        if len(chosen) < job.nodes_min or capacity < job.ntasks:
            return None
        return chosen

    def _best_run(self, job: JobRequest, usable: list[tuple[NodeSnap, int]]) -> list[tuple[NodeSnap, int]] | None:
        """The smallest run of consecutive nodes (by name, of one Weight) that can hold the job,
        so that allocations are compact hostlists and large free runs stay whole; first fit over
        all usable nodes when no single run can."""
        nodes_max = job.nodes_max or _MANY
        best: tuple[int, int, int] | None = None  # (weight, capacity, start index)
        run_start = run_len = run_capacity = 0
        previous: tuple[str, int, int] | None = None
        for index, (node, tasks) in enumerate([*usable, (None, 0)]):
            key = (*_split(node.name), node.weight) if node is not None else None
            if previous is not None and (key is None or key[0] != previous[0] or key[1] != previous[1] + 1
                                         or key[2] != previous[2] or previous[1] < 0):
                if run_len >= job.nodes_min and run_capacity >= job.ntasks:
                    candidate = (previous[2], run_capacity, run_start)
                    if best is None or candidate < best:
                        best = candidate
                        if run_capacity == job.ntasks:  # an exact fit: nothing can do better
                            break
                run_start, run_len, run_capacity = index, 0, 0
            if run_len < nodes_max:
                run_capacity += tasks
            run_len += 1
            previous = key
        if best is not None:
            return self._take(job, usable[best[2]:])
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


@functools.lru_cache(maxsize=65536)
def _split(name: str) -> tuple[str, int]:
    """``node07`` -> ("node", 7): consecutive numbers of one prefix make a run."""
    match = _NUMBERED.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)




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
    cpus = {}
    mem = {}
    for node, _cap in chosen:
        cpus[node.name] = node.cpus if exclusive else tasks[node.name] * cpt
        if job.mem_per_node_mb:
            mem[node.name] = job.mem_per_node_mb
        else:
            mem[node.name] = node.real_memory_mb if exclusive and not per_cpu_mem else per_cpu_mem * cpus[node.name]
    return Allocation(cpus=cpus, tasks=tasks, mem_mb=mem)

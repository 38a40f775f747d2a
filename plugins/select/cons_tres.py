"""select/cons_tres: CPUs and memory as consumable resources on shared nodes.

First fit over the candidate nodes (lowest Weight first, then name order, which keeps
allocations compact hostlists). A node can take ``free CPUs // cpus-per-task`` tasks, capped
by ``--ntasks-per-node`` and by its free memory; nodes named with ``-w`` come first and must
all be used. Tasks are laid out in blocks: every chosen node gets one task, then nodes are
filled in order. ``--exclusive`` takes whole idle nodes. Memory per node is ``--mem``, or
``--mem-per-cpu`` (else DefMemPerCPU) times the node's allocated CPUs; 0 means memory is not
tracked for the job.
"""

from __future__ import annotations

from collections.abc import Mapping

from wattsched.scheduling import Allocation, JobRequest, NodeSnap

_MANY = 1 << 30


class ConsTresSelect:
    """Consumable CPUs and memory, first fit."""

    whole_nodes = False

    def select(self, job: JobRequest, candidates: list[NodeSnap], free: Mapping[str, tuple[int, int]],
               def_mem_per_cpu_mb: int) -> Allocation | None:
        exclusive = job.exclusive or self.whole_nodes
        cpt = max(1, job.cpus_per_task)
        per_cpu_mem = job.mem_per_cpu_mb or (0 if job.mem_per_node_mb else def_mem_per_cpu_mb)
        nodes_max = job.nodes_max or _MANY
        required = set(job.req_nodes)
        if required:
            head = [n for n in candidates if n.name in required]
            if len(head) < len(required):
                return None
            ordered = head + [n for n in candidates if n.name not in required]
        else:
            ordered = candidates
        chosen: list[tuple[NodeSnap, int]] = []
        capacity = 0
        for node in ordered:
            free_cpus, free_mem = free[node.name]
            if exclusive and (free_cpus < node.cpus or free_mem < node.real_memory_mb):
                cap = 0
            else:
                cap = (node.cpus if exclusive else free_cpus) // cpt
            if job.ntasks_per_node:
                cap = min(cap, job.ntasks_per_node)
            if job.mem_per_node_mb and job.mem_per_node_mb > (node.real_memory_mb if exclusive else free_mem):
                cap = 0
            elif per_cpu_mem:
                cap = min(cap, free_mem // (per_cpu_mem * cpt))
            if cap < 1:
                if node.name in required:
                    return None
                continue
            chosen.append((node, cap))
            capacity += cap
            if len(chosen) >= job.nodes_min and capacity >= job.ntasks and len(chosen) >= len(required):
                break
            if len(chosen) >= nodes_max:
                break
        if len(chosen) < job.nodes_min or capacity < job.ntasks or len(chosen) > nodes_max:
            return None
        return _layout(job, chosen, cpt, per_cpu_mem, exclusive)


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

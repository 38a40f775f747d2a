"""What a job holds on its nodes' books (CPUs, memory, GPUs by number): taken when it starts or when
a saved state is restored, given back when its nodes are clean or it is requeued; its CPUs alone
lent while preemption or scontrol suspend keeps it suspended."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wattsched.model import Job

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


def lent(job: Job) -> bool:
    """Whether the job is suspended with its CPUs given back (it keeps its memory and GPUs)."""
    return job.preempt_suspended or job.suspend_released


def hold(state: ClusterState, job: Job, sign: int, only_cpus: bool = False) -> None:
    """Take (+1) or give back (-1) what the job holds on its nodes; ``only_cpus``: its CPUs alone
    (a suspended job, by preemption or scontrol suspend, gives its CPUs back and keeps its memory)."""
    with_cpus = True
    if sign < 0 and lent(job) and not only_cpus:  # its CPUs went back when it was suspended
        job.preempt_suspended = job.suspend_released = with_cpus = False
    for name, cpus in job.alloc.alloc_cpus.items():
        node = state.nodes.get(name)
        if node is None:
            continue
        if with_cpus:
            node.alloc_cpus = max(0, node.alloc_cpus + sign * cpus)
        # busy since the last power tick, which starts its idle time again if it is free by then (Slurm's
        # last_busy): a job that starts and ends between two ticks must not leave it looking idle since
        # before it ran
        node.idle_since = 0.0
        if only_cpus:
            node.refresh_base_state()
            continue
        node.alloc_mem_mb = max(0, node.alloc_mem_mb + sign * job.alloc.alloc_mem_mb)
        for index in job.alloc.alloc_gpus.get(name, ()):
            if sign > 0:
                node.alloc_gpus[index] = job.job_id
            elif node.alloc_gpus.get(index) == job.job_id:
                del node.alloc_gpus[index]
        node.refresh_base_state()

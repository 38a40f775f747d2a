"""Job steps and interactive allocations: srun's step placement and credential, the steps'
ends as srun and the node agents report them, and salloc's release.
"""

from __future__ import annotations

import os
import secrets
import signal as signal_mod
from typing import TYPE_CHECKING, Any

from wattsched import auth, states
from wattsched.api import JobEvent, StepComplete, StepCreate
from wattsched.auth import Identity
from wattsched.controller import jobend, jobenergy, jobs, permissions
from wattsched.controller.actions import Action, Refused, Signal
from wattsched.model import Job, Step
from wattsched.usage import merge as merge_usage

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

BCAST_LIFESPAN_S = 3600  # how long an sbcast credential opens agents' doors (a large file takes a while)
# the signal number Slurm records for a step its memory limit ended (sacct's ExitCode 0:125)


def create_step(state: ClusterState, job: Job, req: StepCreate, who: Identity,
                now: float) -> tuple[Step, dict[str, list[int]]]:
    permissions.check_owner(state, job, who)
    require_running(job)
    layout = step_layout(job, req, state.config.max_tasks_per_node)
    step_id = job.next_step_id
    job.next_step_id += 1
    step = Step(step_id=str(step_id), name=req.name or job.name, nodes=list(layout),
                ntasks=sum(len(t) for t in layout.values()),
                cpus=sum(job.alloc.alloc_cpus[n] for n in layout), start_time=now,
                node_cpus={} if req.overlap else {n: min(job.alloc.alloc_cpus[n], len(t) * req.cpus_per_task)
                                                  for n, t in layout.items()},
                layout=layout)
    job.steps.append(step)
    state.touch(job)
    return step, layout


def attach(state: ClusterState, job: Job, step_id: str, who: Identity) -> tuple[Step, str]:
    """sattach: a running srun step of the caller's (or, for an administrator, anyone's) job and a
    credential for its agents, which then stream its tasks' output and take input for them."""
    permissions.check_owner(state, job, who)
    step = job.find_step(step_id)
    if step is None or step.state != states.RUNNING or not step.layout:
        raise Refused(f"Job step {job.job_id}.{step_id} not found or not running", 404)
    return step, step_credential(state, job, step, step.layout)


NO_ALLOCATION_JOB_IDS = (0xFFFF0000, 0xFFFFFFFD)  # Slurm's MIN_NOALLOC_JOBID..MAX_NOALLOC_JOBID


def no_allocation(state: ClusterState, nodelist: list[str], ntasks: int | None, who: Identity,
                  now: float) -> tuple[int, dict[str, list[int]], str]:
    """srun -Z: a step of no job on the nodes named, for root (or the controller's own user, Slurm's
    SlurmUser) alone, as Slurm's slurmd allows it: an id in Slurm's range for such steps, the tasks
    laid out as Slurm's does (a block of ceil(ntasks/nodes) per node), and a credential the agents
    honour without an allocation. Nothing is recorded or accounted."""
    if who.uid not in (0, os.geteuid()):
        raise Refused("Access/permission denied", 403)
    nodes = list(dict.fromkeys(nodelist))
    unknown = [n for n in nodes if n not in state.nodes or not state.nodes[n].agent_url]
    if unknown:
        raise Refused(f"Invalid node name specified: {unknown[0]}", 404)
    count = ntasks or len(nodes)
    per_node = -(-count // len(nodes))
    layout = {n: list(range(i * per_node, min(count, (i + 1) * per_node))) for i, n in enumerate(nodes)}
    layout = {n: tasks for n, tasks in layout.items() if tasks}
    low, high = NO_ALLOCATION_JOB_IDS
    job_id = low + secrets.randbelow(high - low + 1)
    credential = auth.sign(state.key, {"job": job_id, "step": 0, "uid": who.uid, "layout": layout,
                                       "noalloc": True, "exp": int(now + 86400)})
    return job_id, layout, credential


STAT_LIFESPAN_S = 60  # sstat's leave to read a job's tasks on its nodes


def stat_grant(state: ClusterState, job: Job, step_id: str, all_steps: bool, who: Identity,
               now: float) -> tuple[list[dict[str, Any]], str]:
    """sstat: the running steps asked for (``step_id``; else every one with ``all_steps``; else, as
    Slurm's, the first srun step), where their nodes' agents are and what the controller knows of
    them, with a short-lived credential for the agents, who then give the tasks' figures."""
    permissions.check_owner(state, job, who)
    running = [s for s in job.steps if s.state == states.RUNNING and s.nodes]
    if step_id:
        chosen = [s for s in running if s.step_id == step_id]
    elif all_steps:
        chosen = running
    else:
        chosen = [s for s in running if s.step_id.isdigit()][:1]
    rows = [{"job_id": job.job_id, "display_id": f"{job.display_id}.{step.step_id}", "step_id": step.step_id,
             "ntasks": step.ntasks, "nodes": [{"node": n, "agent_url": state.nodes[n].agent_url}
                                              for n in step.nodes if n in state.nodes],
             "consumed_energy_j": jobenergy.step_energy_so_far(state, job, step, now),
             "cpu_freq": job.request.cpu_freq, "cpu_freq_khz": job.capping.cpu_freq_khz,
             "ave_cpu_freq_khz": job.energy.ave_cpu_freq_khz}
            for step in chosen]
    credential = auth.sign(state.key, {"job": job.job_id, "stat": [s.step_id for s in chosen],
                                       "nodes": sorted({n for s in chosen for n in s.nodes}), "uid": job.uid,
                                       "exp": int(now + STAT_LIFESPAN_S)})
    return rows, credential


def require_running(job: Job) -> None:
    """Steps and broadcasts are for running jobs: Slurm's words for the others."""
    if job.state != states.RUNNING:
        raise Refused("Job/step already completing or completed" if job.state in states.FINISHED or
                      job.state == states.COMPLETING else "Job is pending execution", 409)


def step_credential(state: ClusterState, job: Job, step: Step, layout: dict[str, list[int]]) -> str:
    lifespan = (job.time_limit_min or 60 * 24 * 365) * 60 + 600
    return auth.sign(state.key, {"job": job.job_id, "step": int(step.step_id), "uid": job.uid,
                                "layout": layout, "exp": int(step.start_time + lifespan)})


def bcast_credential(state: ClusterState, job: Job, nodelist: list[str], who: Identity, now: float) -> str:
    """sbcast's leave to write, as the job's user, to ``nodelist`` (the job's nodes, or some of
    them) while it runs; short-lived, as the broadcast is."""
    permissions.check_owner(state, job, who)
    require_running(job)
    outside = [n for n in nodelist if n not in job.alloc.alloc_cpus]
    if outside:
        raise Refused(f"Not all nodes in --nodelist/-w '{','.join(nodelist)}' are in job {job.job_id}.", 400)
    return auth.sign(state.key, {"job": job.job_id, "bcast": nodelist, "uid": job.uid,
                                "exp": int(now + BCAST_LIFESPAN_S)})


def cancel_step(state: ClusterState, job: Job, step_id: str, who: Identity, sig: int | None) -> list[Action]:
    """scancel JOB.STEP: the step's tasks killed on its nodes (it ends CANCELLED) or, with
    --signal, signalled; the job and its other steps go on."""
    permissions.check_owner(state, job, who)
    step = job.find_step(step_id) if step_id.isdigit() else None
    if step is None:
        raise Refused("Invalid job id specified", 404)
    if step.state != states.RUNNING or job.state != states.RUNNING:
        raise Refused("Job/step already completing or completed", 409)
    if sig is None or sig == signal_mod.SIGKILL:
        step.cancelled = True
        state.touch(job)
        sig = signal_mod.SIGKILL
    return [Signal(job.job_id, list(step.nodes), sig, step_id=int(step_id))]


def complete_step(state: ClusterState, job: Job, step_id: str, done: StepComplete, who: Identity, now: float) -> None:
    permissions.check_owner(state, job, who)
    step = job.find_step(step_id)
    if step is None:
        raise Refused("Invalid job step id specified", 404)
    if step.state != states.RUNNING:
        return
    step_over(state, job, step, done.exit_code, done.term_signal, now)


def step_over(state: ClusterState, job: Job, step: Step, exit_code: int, term_signal: int, now: float) -> None:
    step.state = states.COMPLETED if exit_code == 0 and not term_signal else states.FAILED
    if step.cancelled:
        step.state = states.CANCELLED
    if step.oom_killed:
        step.state = states.OUT_OF_MEMORY
    if job.cancelled_by is not None or job.timed_out:
        step.state = states.CANCELLED
    step.exit_code, step.term_signal, step.end_time = exit_code, term_signal, now
    state.touch(job)


def step_ended(state: ClusterState, event: JobEvent, now: float) -> None:
    """A node's tasks of an srun step ended: keep their usage (whether srun lived to report
    the end or not); once every node of the step has reported, the step is over."""
    job = state.jobs.get(event.job_id)
    step = job.find_step(event.step_id) if job is not None else None
    if job is None or step is None or event.node not in step.nodes:
        return
    step.tasks = merge_usage(step.tasks, [t.model_dump() for t in event.tasks])
    if event.oom_killed:
        step.oom_killed = True
        event = event.model_copy(update={"exit_code": 0, "term_signal": jobend.OOM_SIGNAL})
    if event.node not in step.ended_nodes:
        step.ended_nodes.append(event.node)
        step.exit_code, step.term_signal = max(step.exit_code, event.exit_code), \
            max(step.term_signal, event.term_signal)
    if step.state == states.RUNNING and set(step.ended_nodes) >= set(step.nodes):
        step_over(state, job, step, step.exit_code, step.term_signal, now)
    else:
        state.touch(job)


def complete_allocation(state: ClusterState, job: Job, exit_code: int, term_signal: int, who: Identity,
                        now: float) -> list[Action]:
    permissions.check_owner(state, job, who)
    if not job.request.interactive:
        raise Refused("Only interactive allocations can be released this way", 400)
    if job.state == states.PENDING:
        return jobs.cancel(state, [job], who, None, False, now)
    if job.state != states.RUNNING:
        return []
    final = states.COMPLETED if exit_code == 0 and not term_signal else states.FAILED
    if job.cancelled_by is not None:
        final = states.CANCELLED
    return jobend.end(state, job, final, exit_code, term_signal, now, job.node_list)


def step_nodes(job: Job, req: StepCreate) -> list[str]:
    """The allocation's nodes a step may use, in the order it takes them: those srun -w names first
    (each must be the job's), then the others; none that srun -x names."""
    nodes = list(job.alloc.alloc_cpus)
    unknown = [n for n in req.nodelist if n not in job.alloc.alloc_cpus]
    if unknown:
        raise Refused("Requested node configuration is not available")
    named, excluded = set(req.nodelist), set(req.exclude) - set(req.nodelist)
    return [n for n in nodes if n in named] + [n for n in nodes if n not in named and n not in excluded]


def arbitrary_layout(job: Job, hosts: list[str], max_tasks_per_node: int) -> dict[str, list[int]]:
    """Task i on ``hosts[i]``, each of them the job's; the nodes in the allocation's order."""
    if any(host not in job.alloc.alloc_cpus for host in hosts):
        raise Refused("Requested node configuration is not available")
    tasks: dict[str, list[int]] = {}
    for task, host in enumerate(hosts):
        tasks.setdefault(host, []).append(task)
    if any(len(ids) > max_tasks_per_node for ids in tasks.values()):
        raise Refused("Requested node configuration is not available")
    return {node: tasks[node] for node in job.alloc.alloc_cpus if node in tasks}


def step_layout(job: Job, req: StepCreate, max_tasks_per_node: int) -> dict[str, list[int]]:
    """Place a step's tasks on the allocation: each where srun -m arbitrary says, or block by each
    node's CPUs, task ids in node order; at most MaxTasksPerNode tasks on a node, checked before any
    placing. Steps running at once do not share CPUs (unless --overlap), as Slurm's: a step that
    would fit the job but not beside the steps running now is refused as busy (srun waits and asks
    again); one that could never fit is placed over the job's CPUs round robin, as --overcommit."""
    if req.arbitrary:
        return arbitrary_layout(job, req.arbitrary, max_tasks_per_node)
    nodes = step_nodes(job, req)
    if (req.ntasks is not None and req.ntasks > max_tasks_per_node * len(nodes)) or \
            req.ntasks_per_node > max_tasks_per_node:
        raise Refused("Requested node configuration is not available")
    if req.nodes is not None and (req.nodes > len(nodes) or req.nodes < len(req.nodelist)):
        raise Refused("Requested node configuration is not available")
    held = {} if req.overlap else held_cpus(job)
    free = {n: job.alloc.alloc_cpus[n] - held.get(n, 0) for n in nodes}
    counts = _task_counts(job, req, nodes, free)
    if counts is None:
        if _task_counts(job, req, nodes, job.alloc.alloc_cpus) is not None:
            raise Refused("Requested nodes are busy", 409)
        counts = _task_counts(job, req, nodes, job.alloc.alloc_cpus, overcommit=True)
        assert counts is not None  # (round robin always places every task)
    layout: dict[str, list[int]] = {}
    task = 0
    for n, count in counts.items():
        layout[n] = list(range(task, task + count))
        task += count
    return layout


def held_cpus(job: Job) -> dict[str, int]:
    """The CPUs the job's running steps hold on each of its nodes."""
    held: dict[str, int] = {}
    for step in job.steps:
        if step.state == states.RUNNING:
            for node, cpus in step.node_cpus.items():
                held[node] = held.get(node, 0) + cpus
    return held


def _task_counts(job: Job, req: StepCreate, candidates: list[str], cpus: dict[str, int],
                 overcommit: bool = False) -> dict[str, int] | None:
    """How many of the step's tasks go on each node, given the CPUs usable on each (``cpus``); None
    when they do not fit (with ``overcommit``, the tasks left over go round robin instead)."""
    cpt = req.cpus_per_task
    named = set(req.nodelist)
    usable = candidates if overcommit else [n for n in candidates if cpus[n] >= cpt or n in named]
    if any(cpus[n] < cpt for n in usable if not overcommit):
        return None  # a node srun -w names has no room
    if req.nodes is not None:
        if len(usable) < req.nodes:
            return None
        nodes = usable[:req.nodes]
    elif req.nodelist:
        nodes = usable[:len(named)]
    else:
        nodes = usable
    if not nodes:
        return None
    if req.ntasks is None:
        if req.nodes is None and not req.ntasks_per_node and cpt == 1:
            if len(usable) < len(candidates):  # the job's own layout needs every node it may use
                return None
            counts = {n: job.alloc.tasks_per_node.get(n, 1) for n in nodes}
        else:
            per = req.ntasks_per_node or max(1, min(job.alloc.alloc_cpus[n] for n in nodes) // cpt)
            counts = dict.fromkeys(nodes, per)
        fits = all(counts[n] * cpt <= cpus[n] for n in nodes)
        return counts if fits or overcommit else None
    if req.ntasks < len(nodes):
        nodes = nodes[:req.ntasks]
    counts = dict.fromkeys(nodes, 1)
    left = req.ntasks - len(nodes)
    caps = {n: max(1, req.ntasks_per_node or cpus[n] // cpt) for n in nodes}
    for n in nodes:
        extra = min(left, caps[n] - 1)
        counts[n] += extra
        left -= extra
    if left and not overcommit:
        return None
    index = 0
    while left > 0:  # oversubscribed: round robin, as srun --overcommit would
        counts[nodes[index % len(nodes)]] += 1
        left -= 1
        index += 1
    return counts

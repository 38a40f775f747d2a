"""The jobs' and steps' routes of the controller's API (v1): submit (and --test-only, --immediate),
list, cancel, update, suspend, requeue, steps, salloc's environment and release, sstat.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from wattsched import arrayfold, states
from wattsched.api import (
    AllocationComplete,
    BcastGrant,
    BcastNode,
    BcastRequest,
    CancelRequest,
    JobSubmit,
    JobUpdate,
    NoAllocationStep,
    StepComplete,
    StepCreate,
    StepPlacement,
    StepReply,
    SubmitReply,
)
from wattsched.auth import Identity
from wattsched.controller import jobs as jobs_mod
from wattsched.controller import launching, listings, permissions, snapshots, views
from wattsched.controller import steps as steps_mod
from wattsched.controller.actions import Refused
from wattsched.controller.dispatch import batch_environment
from wattsched.controller.routedeps import Ctl
from wattsched.controller.views import job_gpus, job_view
from wattsched.model import Job
from wattsched.service.httpauth import Who

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


# --immediate refusals by pending reason (the power-capping prototype's wording, Hautreux 2013)
IMMEDIATE_REFUSAL = {states.R_POWER: "Required power not available now",
                     states.R_POWER_RESERVED: "Required power at least partially reserved",
                     states.R_LICENSES: "Licenses currently unavailable"}


router = APIRouter()


@router.post("/v1/jobs", response_model=SubmitReply)
async def submit(controller: Ctl, req: JobSubmit, who: Who) -> SubmitReply:
    state = controller.state
    now = time.time()
    if req.test_only:
        job, plan = jobs_mod.will_run(state, req, who, now)
        return SubmitReply(job_id=job.job_id, will_run=plan)
    jobs = controller.submit(req, who, now)
    if req.immediate:
        actions = launching.schedule(state, now)
        job = jobs[0]
        if job.state != states.RUNNING:
            why = IMMEDIATE_REFUSAL.get(job.reason, "Requested nodes are busy")
            jobs_mod.cancel(state, [job], who, None, False, now)
            controller.act(actions)
            raise Refused(f"Unable to allocate resources: {why}", 503)
        controller.act(actions)
    elif req.interactive:  # srun and salloc wait on this answer: try to place the job at once
        controller.act(launching.schedule(state, now))
    arrays = [j.job_id for j in jobs] if jobs[0].array_task_id is not None else []
    if req.interactive:
        return SubmitReply(job_id=jobs[0].job_id, state=jobs[0].shown_state, reason=jobs[0].reason)
    return SubmitReply(job_id=jobs[0].job_id, array_task_ids=arrays)


@router.get("/v1/jobs")
async def list_jobs(controller: Ctl, who: Who, user: Annotated[list[str] | None, Query()] = None,
                    state_: Annotated[list[str] | None, Query(alias="state")] = None,
                    partition: Annotated[list[str] | None, Query()] = None,
                    job: Annotated[list[str] | None, Query()] = None, detail: bool = False,
                    columns: bool = False, key: Annotated[list[str] | None, Query()] = None,
                    fold: bool = False) -> Response:
    """``columns``: one header and rows of values; ``key``: with it, only those keys of each record
    (squeue's format reads a few of them), unknown ones ignored; ``fold``: each array's pending
    tasks as one record, as squeue shows them (wattsched.arrayfold)."""
    async with controller.listings.turn(who.uid):
        return await _listing(controller.state, who, user, state_, partition, job, detail, columns, key, fold)


async def _listing(state: ClusterState, who: Identity, user: list[str] | None, state_: list[str] | None,
                   partition: list[str] | None, job: list[str] | None, detail: bool, columns: bool,
                   keys: list[str] | None, fold: bool = False) -> Response:
    now = time.time()
    selected: Iterable[Any] = state.jobs.values()
    job = [ref for ref in job or () if ref]
    if job:
        wanted: dict[int, Any] = {}
        for ref in job:
            try:
                for j in permissions.resolve(state, ref):
                    wanted[j.job_id] = j
            except Refused:
                continue
        selected = wanted.values()
    selected = permissions.visible(state, who, selected)  # PrivateData=jobs: one's own
    users, states_, parts = set(user or ()), set(state_ or ()), set(partition or ())
    chosen = [j for j in selected if (not users or j.user in users) and (not parts or j.partition in parts)
              and (not states_ or j.state in states_ or j.shown_state in states_)]
    shown_as: dict[int, str] = {}
    wanted_keys = set(keys or ())
    if fold:
        folded = arrayfold.fold(chosen, _pending_task, lambda j: (-j.priority, j.job_id))
        chosen = [j for j, _ids in folded]
        shown_as = {j.job_id: arrayfold.folded_id(j.array_job_id, ids, j.array_throttle)
                    for j, ids in folded if len(ids) > 1}
    as_columns = columns and bool(chosen)  # one header and rows of values: a third of the bytes for 10,000 jobs
    build: Callable[[Any], Any]
    if detail:
        def record(j: Any) -> dict[str, Any]:
            found = {**job_view(j, now), **job_gpus(j, state.nodes)}
            return {**found, "display_id": shown_as[j.job_id]} if j.job_id in shown_as else found

        names = [n for n in record(chosen[0]) if not keys or n in wanted_keys] if as_columns else []

        def row(j: Any) -> list[Any]:
            found = record(j)
            return [found[n] for n in names]

        build = row if as_columns else record
    else:  # the cached tuples (snapshots.brief), read by position
        def values(j: Any) -> tuple[Any, ...]:
            brief = snapshots.brief(state, j, now)
            if j.job_id in shown_as:
                at = views.DISPLAY_ID
                return (*brief[:at], shown_as[j.job_id], *brief[at + 1:])
            return brief

        names = [n for n in views.BRIEF_KEYS if not keys or n in wanted_keys] if as_columns else []
        where = [views.BRIEF_KEYS.index(n) for n in names]

        def brief_row(j: Any) -> list[Any]:
            brief = values(j)
            return [brief[i] for i in where]

        def brief_record(j: Any) -> dict[str, Any]:
            return dict(zip(views.BRIEF_KEYS, values(j), strict=True))

        build = brief_row if as_columns else brief_record
    rows = await listings.sliced(chosen, build)
    if as_columns:
        body = listings.document({"time": now, "columns": names}, "rows", rows)
    else:
        body = listings.document({"time": now}, "jobs", rows)
    return Response(body, media_type="application/json")


def _pending_task(job: Any) -> tuple[tuple[int, str], int] | None:
    """A pending task of an array: (its array's pending record, its task id)."""
    if job.state == states.PENDING and job.array_task_id is not None:
        return arrayfold.group(job.array_job_id, job.hold), job.array_task_id
    return None


@router.post("/v1/jobs/cancel")
async def cancel(controller: Ctl, req: CancelRequest, who: Who) -> dict[str, Any]:
    state = controller.state
    now = time.time()
    steps = [ref.rpartition(".") for ref in req.job_ids if "." in ref]  # JOB.STEP: that step alone
    targets = [(job, step_id) for job_ref, _, step_id in steps for job in permissions.resolve(state, job_ref)]
    jobs: list[Job] = []
    by_task: set[int] = set()  # named by an array index (12_7): see jobs.cancel
    for ref in req.job_ids:
        if "." not in ref:
            found = permissions.resolve(state, ref)
            jobs.extend(found)
            if "_" in ref:
                by_task.update(j.job_id for j in found)
    actions = [a for job, step_id in targets for a in steps_mod.cancel_step(state, job, step_id, who, req.signal)]
    controller.act(actions + jobs_mod.cancel(state, jobs, who, req.signal, req.batch_only, now, req.full,
                                             frozenset(by_task)))
    return {"cancelled": [j.job_id for j in jobs], "steps": [f"{job.job_id}.{step}" for job, step in targets]}


@router.patch("/v1/jobs/{job_ref}")
async def update_job(controller: Ctl, job_ref: str, upd: JobUpdate, who: Who) -> dict[str, Any]:
    state = controller.state
    jobs = permissions.resolve(state, job_ref)
    jobs_mod.update(state, jobs, upd, who, time.time())
    controller.changed()
    return {"updated": [j.job_id for j in jobs]}


@router.post("/v1/jobs/{job_ref}/suspend")
async def suspend(controller: Ctl, job_ref: str, who: Who, resume: bool = False) -> dict[str, Any]:
    state = controller.state
    jobs = permissions.resolve(state, job_ref)
    controller.act(jobs_mod.suspend(state, jobs, resume, who, time.time()))
    return {"jobs": [j.job_id for j in jobs], "suspended": not resume}


@router.post("/v1/jobs/{job_ref}/requeue")
async def requeue(controller: Ctl, job_ref: str, who: Who) -> dict[str, Any]:
    state = controller.state
    jobs = permissions.resolve(state, job_ref)
    controller.act(jobs_mod.requeue(state, jobs, who, time.time()))
    return {"requeued": [j.job_id for j in jobs]}


def one_job(state: ClusterState, job_id: int) -> Job:
    job = state.jobs.get(job_id)
    if job is None:
        raise Refused("Invalid job id specified", 404)
    return job


@router.post("/v1/steps/noalloc", response_model=StepReply)
async def no_allocation_step(controller: Ctl, req: NoAllocationStep, who: Who) -> StepReply:
    """srun -Z: tasks on the nodes named with no job (root's); the agents launch them as a step's."""
    state = controller.state
    job_id, layout, credential = steps_mod.no_allocation(state, req.nodelist, req.ntasks, who, time.time())
    placements = [StepPlacement(node=n, agent_url=state.nodes[n].agent_url, node_index=i, task_ids=t)
                  for i, (n, t) in enumerate(layout.items())]
    return StepReply(job_id=job_id, step_id=0, ntasks=sum(len(t) for t in layout.values()), nodes=list(layout),
                     placements=placements, credential=credential)


@router.post("/v1/jobs/{job_id}/steps", response_model=StepReply)
async def create_step(controller: Ctl, job_id: int, req: StepCreate, who: Who) -> StepReply:
    state = controller.state
    job = one_job(state, job_id)
    step, layout = steps_mod.create_step(state, job, req, who, time.time())
    controller.changed()
    placements = [StepPlacement(node=n, agent_url=state.nodes[n].agent_url, node_index=i, task_ids=t)
                  for i, (n, t) in enumerate(layout.items())]
    slurm_env = slurm_environment(state, job)
    return StepReply(job_id=job_id, step_id=int(step.step_id), ntasks=step.ntasks, nodes=list(layout),
                     placements=placements, credential=steps_mod.step_credential(state, job, step, layout),
                     job_environment=slurm_env, array_job_id=job.array_job_id if job.array_task_id is not None else 0,
                     array_task_id=job.array_task_id)


@router.get("/v1/jobs/{job_id}/steps/{step_id}/attach", response_model=StepReply)
async def attach_step(controller: Ctl, job_id: int, step_id: Annotated[str, Path(max_length=16)],
                      who: Who) -> StepReply:
    """sattach: where a running step's tasks are, and the credential their agents ask for."""
    state = controller.state
    job = one_job(state, job_id)
    step, credential = steps_mod.attach(state, job, step_id, who)
    placements = [StepPlacement(node=n, agent_url=state.nodes[n].agent_url, node_index=i, task_ids=t)
                  for i, (n, t) in enumerate(step.layout.items()) if n in state.nodes]
    return StepReply(job_id=job_id, step_id=int(step.step_id), ntasks=step.ntasks, nodes=list(step.layout),
                     placements=placements, credential=credential)


@router.post("/v1/jobs/{job_id}/bcast", response_model=BcastGrant)
async def bcast(controller: Ctl, job_id: int, req: BcastRequest, who: Who) -> BcastGrant:
    """sbcast's leave to write a file to the job's nodes, and where their agents are."""
    state = controller.state
    job = one_job(state, job_id)
    chosen = list(dict.fromkeys(req.nodelist)) or job.node_list
    credential = steps_mod.bcast_credential(state, job, chosen, who, time.time())
    nodes = [BcastNode(node=n, agent_url=state.nodes[n].agent_url) for n in chosen]
    return BcastGrant(job_id=job_id, nodes=nodes, credential=credential)


@router.get("/v1/jobs/{job_id}/environment")
async def job_environment(controller: Ctl, job_id: int, who: Who) -> dict[str, Any]:
    """The SLURM_* variables of a running job (salloc sets them for its command)."""
    state = controller.state
    job = one_job(state, job_id)
    if job.uid != who.uid and not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    if job.state != states.RUNNING:
        raise Refused("Job is not running", 409)
    return {"environment": slurm_environment(state, job)}


def slurm_environment(state: ClusterState, job: Job) -> dict[str, str]:
    """The SLURM_* variables Slurm sets for a job's batch script (a step's and salloc's command
    have the submitter's own environment already)."""
    return {k: v for k, v in batch_environment(state, job, {}).items() if k.startswith("SLURM")}


@router.post("/v1/jobs/{job_id}/steps/{step_id}/complete")
async def complete_step(controller: Ctl, job_id: int, step_id: str, done: StepComplete, who: Who) -> dict[str, str]:
    state = controller.state
    steps_mod.complete_step(state, one_job(state, job_id), step_id, done, who, time.time())
    controller.changed()
    return {"status": "ok"}


@router.post("/v1/jobs/{job_id}/allocation/complete")
async def complete_allocation(controller: Ctl, job_id: int, done: AllocationComplete, who: Who) -> dict[str, str]:
    state = controller.state
    controller.act(steps_mod.complete_allocation(state, one_job(state, job_id), done.exit_code, done.term_signal, who,
                                                 time.time()))
    return {"status": "ok"}


@router.get("/v1/jobs/{job_ref}/steps/stat")
async def steps_stat(controller: Ctl, job_ref: str, who: Who, step: Annotated[str, Query(max_length=16)] = "",
                     all_steps: bool = False) -> dict[str, Any]:
    """sstat: the running jobs' steps asked for, their nodes' agents and the credential those ask for
    (each job's), and the steps' energy so far; the tasks' figures are the agents'."""
    state = controller.state
    now = time.time()
    found: list[dict[str, Any]] = []
    for job in permissions.resolve(state, job_ref):
        if job.state == states.RUNNING:
            rows, credential = steps_mod.stat_grant(state, job, step, all_steps, who, now)
            found.extend({**row, "credential": credential} for row in rows)
        else:
            permissions.check_owner(state, job, who)
    return {"steps": found}


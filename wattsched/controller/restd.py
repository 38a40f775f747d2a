"""Slurm's REST API (slurmrestd's paths and payloads for data_parser v0.0.40), served by the controller.

``/slurm/v0.0.40/...`` (ping, diag, jobs, job/{id}, job/submit, nodes, node/{name}, partitions,
partition/{name}, reservations, reservation/{name}) and ``/slurmdb/v0.0.40/...`` (jobs, job/{id},
associations, accounts, account/{name}, users, user/{name}). Callers authenticate as slurmrestd's
JWT mode takes them: ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN`` (a token from ``scontrol
token``); a bearer token works too. Every answer has Slurm's ``meta``, ``errors`` and ``warnings``;
a refusal comes with Slurm's error list and an HTTP status. Objects are those of ``--json``
(wattsched.dataparser), so a tool reads the same shapes from the CLI and from here. The models
in wattsched.restapi declare the fields tools rely on; the rest of each object is Slurm's.
"""

from __future__ import annotations

import signal as signal_mod
import time
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from wattsched import dataparser, states
from wattsched.accounting.store import AccountingStore, JobQuery
from wattsched.api import BIG, ID_MAX, LIST_MAX, TEXT_MAX
from wattsched.controller import acctdb, listings
from wattsched.controller import reservations as reservations_mod
from wattsched.controller.actions import Refused
from wattsched.controller.loop import Controller
from wattsched.controller.routedeps import Ctl
from wattsched.controller.state import ClusterState
from wattsched.controller.views import job_gpus, job_view, node_views, partition_views
from wattsched.httpauth import Who
from wattsched.restapi import (
    AccountsDoc,
    AssociationsDoc,
    DbJobsDoc,
    DiagDoc,
    Document,
    JobDesc,
    JobsDoc,
    NodeChange,
    NodesDoc,
    PartitionsDoc,
    PingDoc,
    ReservationsDoc,
    SubmitDoc,
    SubmitRequest,
    UsersDoc,
    job_submit,
    job_update,
    node_update,
)

VERSION = dataparser.DATA_PARSER.rsplit("/", 1)[1]  # v0.0.40
SLURM = f"/slurm/{VERSION}"
SLURMDB = f"/slurmdb/{VERSION}"
PREFIXES = (SLURM + "/", SLURMDB + "/")


def _converted(convert, *args):
    try:
        return convert(*args)
    except ValueError as exc:
        raise Refused(str(exc)) from exc


def error_document(request: Request, status: int, message: str) -> JSONResponse:
    """A refusal as slurmrestd gives it: Slurm's document with the error listed."""
    body = _document(request, None, {})
    body["errors"] = [{"error": message, "error_number": status, "description": message,
                       "source": request.url.path}]
    return JSONResponse(body, status_code=status)


def _document(request: Request, who: Any, body: dict[str, Any]) -> dict[str, Any]:
    user = who.user if who is not None else ""
    cluster = request.app.state.cluster
    doc = dataparser.document("", [], ["slurmrestd", request.method, request.url.path], cluster, body,
                              client=(user, user))
    doc.pop("")
    doc["meta"]["plugin"]["type"] = "openapi/" + ("slurmdbd" if request.url.path.startswith(SLURMDB) else "slurmctld")
    return doc


# --- the routes ----------------------------------------------------------------------------------------

Name = Annotated[str, Field(max_length=ID_MAX)]  # a node's, partition's, account's or user's name
slurm = APIRouter(prefix=SLURM, tags=["slurm"])
slurmdb = APIRouter(prefix=SLURMDB, tags=["slurmdb"])
openapi = APIRouter()  # slurmrestd's paths for the OpenAPI document


def doc(request: Request, who: Any, **body: Any) -> dict[str, Any]:
    return _document(request, who, body)


def job_record(state: ClusterState, job: Any, now: float) -> dict[str, Any]:
    return dataparser.queue_job({**job_view(job, now), **job_gpus(job, state.nodes)}, state.config.cluster_name)


def jobs_head(state: ClusterState, request: Request, who: Any, now: float) -> dict[str, Any]:
    return doc(request, who, jobs=[], last_backfill=dataparser.number(int(state.stats.bf_last_time) or None),
               last_update=dataparser.number(int(now)))


@slurm.get("/ping", response_model=PingDoc)
async def ping(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    state = controller.state
    return doc(request, who, pings=[{"hostname": state.config.slurmctld_host or "localhost", "pinged": "UP",
                                     "latency": 0, "mode": "primary"}])


@slurm.get("/diag", response_model=DiagDoc)
async def diag(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    state = controller.state
    s, jobs = state.stats, list(state.jobs.values())
    return doc(request, who, statistics={
        "parts_packed": 0, "req_time": int(time.time()), "req_time_start": int(controller.started),
        "server_thread_count": 1, "agent_queue_size": 0, "agent_count": 0, "agent_thread_count": 0,
        "dbd_agent_queue_size": state.store.backlog(), "schedule_cycle_max": int(s.max_ms * 1000),
        "schedule_cycle_last": int(s.last_ms * 1000), "schedule_cycle_total": s.cycles,
        "schedule_cycle_mean": int(s.total_ms * 1000 / max(1, s.cycles)),
        "schedule_cycle_mean_depth": int(s.depth_total / max(1, s.cycles)),
        "schedule_queue_length": s.depth, "jobs_started": s.started,
        "jobs_submitted": state.next_job_id - state.config.first_job_id,
        "jobs_pending": sum(j.state == states.PENDING for j in jobs),
        "jobs_running": sum(j.state == states.RUNNING for j in jobs),
        "job_states_ts": dataparser.number(int(time.time())),
        "bf_backfilled_jobs": s.bf_backfilled, "bf_last_backfilled_jobs": s.bf_last_backfilled,
        "bf_cycle_counter": s.bf_cycles, "bf_cycle_mean": int(s.bf_total_ms * 1000 / max(1, s.bf_cycles)),
        "bf_cycle_max": int(s.bf_max_ms * 1000), "bf_cycle_last": int(s.bf_last_ms * 1000),
        "bf_last_depth": s.bf_last_depth, "bf_queue_len": s.bf_queue_len,
        "bf_when_last_cycle": dataparser.number(int(s.bf_last_time) or None),
        "bf_active": False})


# The listings are answered as JSON bytes: FastAPI's validation of a response against its model
# (kept for the OpenAPI document) cost 3-4 s for 9,000 jobs, against ~0.3 s here (measured). The
# whole list is built in turns and slices (controller.listings), so no user can starve the others.
@slurm.get("/jobs", response_model=JobsDoc)
async def jobs(controller: Ctl, request: Request, who: Who) -> Response:
    state = controller.state
    async with controller.listings.turn(who.uid):
        now = time.time()
        records = await listings.sliced(list(state.jobs.values()), lambda j: job_record(state, j, now))
        body = listings.document(jobs_head(state, request, who, now), "jobs", records)
    return Response(body, media_type="application/json")


@slurm.get("/job/{job_id}", response_model=JobsDoc)
async def job(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], who: Who) -> Response:
    state = controller.state
    now = time.time()
    head = jobs_head(state, request, who, now)
    return Response(orjson.dumps({**head, "jobs": [job_record(state, j, now) for j in state.resolve(job_id)]}),
                    media_type="application/json")


@slurm.post("/job/submit", response_model=SubmitDoc)
async def submit(controller: Ctl, request: Request, req: SubmitRequest, who: Who) -> dict[str, Any]:
    now = time.time()
    created = controller.submit(_converted(job_submit, req.job, req.script), who, now)
    job_id = created[0].job_id
    return doc(request, who, job_id=job_id, step_id="batch", job_submit_user_msg="",
               result={"job_id": job_id, "step_id": "batch", "error_code": 0, "error": "",
                       "job_submit_user_msg": ""})


@slurm.post("/job/{job_id}", response_model=Document)
async def update(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], desc: JobDesc,
                 who: Who) -> dict[str, Any]:
    state = controller.state
    state.update(state.resolve(job_id), _converted(job_update, desc), who, time.time())
    controller.changed()
    return doc(request, who)


@slurm.delete("/job/{job_id}", response_model=Document)
async def cancel(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], who: Who,
                 signal: Annotated[str | None, Query(max_length=16)] = None,
                 flags: Annotated[Literal["BATCH_JOB", "FULL_JOB", "FULL_STEPS_ONLY"] | None, Query()] = None) \
        -> dict[str, Any]:
    state = controller.state
    sig = None
    if signal:
        name = signal.upper().removeprefix("SIG")
        sig = int(signal) if signal.isdigit() else getattr(signal_mod, f"SIG{name}", None)
        if sig is None or not 1 <= int(sig) <= 64:
            raise Refused(f"Invalid signal: {signal}")
    controller.act(state.cancel(state.resolve(job_id), who, int(sig) if sig else None, flags == "BATCH_JOB",
                                time.time()))
    return doc(request, who)


def nodes_doc(state: ClusterState, request: Request, who: Any, names: list[str]) -> dict[str, Any]:
    now = time.time()
    cluster = state.config.cluster_name
    views = node_views(state.nodes, state.resv, now, names)
    return doc(request, who, nodes=[dataparser.node(view, cluster) for view in views],
               last_update=dataparser.number(int(now)))


@slurm.get("/nodes", response_model=NodesDoc)
async def nodes(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    state = controller.state
    return nodes_doc(state, request, who, list(state.nodes))


@slurm.get("/node/{name}", response_model=NodesDoc)
async def node(controller: Ctl, request: Request, name: Name, who: Who) -> dict[str, Any]:
    state = controller.state
    if name not in state.nodes:
        raise Refused(f"Invalid node name specified: {name}", 404)
    return nodes_doc(state, request, who, [name])


@slurm.post("/node/{name}", response_model=Document)
async def change_node(controller: Ctl, request: Request, name: Name, change: NodeChange,
                      who: Who) -> dict[str, Any]:
    state = controller.state
    if not state.is_admin(who):
        raise Refused("Access/permission denied", 403)
    if name not in state.nodes:
        raise Refused(f"Invalid node name specified: {name}", 404)
    upd = _converted(node_update, change)
    controller.act(state.update_nodes([name], upd.state, upd.reason, who, time.time()))
    return doc(request, who)


def partitions_doc(state: ClusterState, request: Request, who: Any, only: str | None) -> dict[str, Any]:
    parts = [p for p in partition_views(state.config, state.nodes) if only is None or p["name"] == only]
    if only is not None and not parts:
        raise Refused(f"Invalid partition name specified: {only}", 404)
    return doc(request, who, partitions=[dataparser.partition(p, state.config.cluster_name) for p in parts],
               last_update=dataparser.number(int(time.time())))


@slurm.get("/partitions", response_model=PartitionsDoc)
async def partitions(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    state = controller.state
    return partitions_doc(state, request, who, None)


@slurm.get("/partition/{name}", response_model=PartitionsDoc)
async def partition(controller: Ctl, request: Request, name: Name, who: Who) \
        -> dict[str, Any]:
    state = controller.state
    return partitions_doc(state, request, who, name)


def reservations_doc(state: ClusterState, request: Request, who: Any, only: str | None) -> dict[str, Any]:
    now = time.time()
    found = [r for name, r in sorted(state.resv.by_name.items()) if only is None or name == only]
    if only is not None and not found:
        raise Refused(f"Reservation {only} not found", 404)
    return doc(request, who, reservations=[dataparser.reservation(reservations_mod.show(r, state.nodes, now),
                                                                  state.config.cluster_name) for r in found],
               last_update=dataparser.number(int(time.time())))


@slurm.get("/reservations", response_model=ReservationsDoc)
async def reservations(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    state = controller.state
    return reservations_doc(state, request, who, None)


@slurm.get("/reservation/{name}", response_model=ReservationsDoc)
async def reservation(controller: Ctl, request: Request, name: Annotated[str, Field(max_length=256)], who: Who) \
        -> dict[str, Any]:
    state = controller.state
    return reservations_doc(state, request, who, name)

# --- slurmdbd's side: the accounting database ------------------------------------------------------


def accounting(controller: Controller) -> AccountingStore:
    """The accounting database (503 without one)."""
    return acctdb.store(controller.accounting)


async def db_jobs(controller: Controller, request: Request, who: Any, query: JobQuery) -> dict[str, Any]:
    store = accounting(controller)
    if controller.sync is not None:
        await acctdb.call(controller.sync.flush)
    rows = await acctdb.call(store.query_jobs, query)
    return doc(request, who, jobs=[dataparser.accounting_job(r) for r in rows])


@slurmdb.get("/jobs", response_model=DbJobsDoc)
async def db_job_list(controller: Ctl, request: Request, who: Who,
                      users: Annotated[str | None, Query(max_length=TEXT_MAX)] = None,
                      state_: Annotated[str | None, Query(alias="state", max_length=1024)] = None,
                      start_time: Annotated[int | None, Query(ge=0, le=BIG)] = None,
                      end_time: Annotated[int | None, Query(ge=0, le=BIG)] = None) -> dict[str, Any]:
    try:
        wanted = tuple(states.parse_job_state(s) for s in (state_ or "").split(",") if s)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    return await db_jobs(controller, request, who, JobQuery(
        cluster=controller.state.config.cluster_name, users=tuple(u for u in (users or "").split(",") if u)[:LIST_MAX],
        states=wanted, start=start_time, end=end_time))


@slurmdb.get("/job/{job_id}", response_model=DbJobsDoc)
async def db_job(controller: Ctl, request: Request, job_id: Annotated[int, Field(ge=1, le=BIG)],
                 who: Who) -> dict[str, Any]:
    query = JobQuery(cluster=controller.state.config.cluster_name, job_ids=(job_id,))
    return await db_jobs(controller, request, who, query)


@slurmdb.get("/associations", response_model=AssociationsDoc)
async def associations(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    rows = await acctdb.call(accounting(controller).assocs(controller.state.config.cluster_name).associations)
    return doc(request, who, associations=[{
        "account": a["account"], "cluster": a["cluster"], "user": a["user"], "partition": "",
        "parent_account": a["parent"] or "", "shares_raw": int(a["shares"]), "id": {"id": a["id"]},
        "is_default": bool(a["user"]) and a["default_account"] == a["account"], "comment": "",
        "default": {"qos": ""}, "flags": [], "lineage": "", "max": {}, "min": {},
        "priority": dataparser.number(None), "qos": [], "accounting": []} for a in rows])


@slurmdb.get("/accounts", response_model=AccountsDoc)
async def accounts(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    return doc(request, who, accounts=await _accounts(controller, None))


@slurmdb.get("/account/{name}", response_model=AccountsDoc)
async def account(controller: Ctl, request: Request, name: Name, who: Who) -> dict[str, Any]:
    return doc(request, who, accounts=_named(await _accounts(controller, name), "account", name))


def _named(found: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    if not found:
        raise Refused(f"Nothing found with query: {kind} {name}", 404)
    return found


async def _accounts(controller: Controller, only: str | None) -> list[dict[str, Any]]:
    rows = await acctdb.call(accounting(controller).assocs(controller.state.config.cluster_name).accounts)
    return [{"name": a["name"], "description": a.get("description", "") or "",
             "organization": a.get("organization", "") or "", "associations": [], "coordinators": [],
             "flags": []} for a in rows if only is None or a["name"] == only]


async def _users(controller: Controller, only: str | None) -> list[dict[str, Any]]:
    rows = await acctdb.call(accounting(controller).assocs(controller.state.config.cluster_name).users)
    return [{"name": u["name"], "default": {"account": u.get("default_account", "") or "", "wckey": ""},
             "administrator_level": [str(u.get("admin_level", "") or "None")], "associations": [],
             "coordinators": [], "flags": [], "old_name": "", "wckeys": []}
            for u in rows if only is None or u["name"] == only]


@slurmdb.get("/users", response_model=UsersDoc)
async def users(controller: Ctl, request: Request, who: Who) -> dict[str, Any]:
    return doc(request, who, users=await _users(controller, None))


@slurmdb.get("/user/{name}", response_model=UsersDoc)
async def user(controller: Ctl, request: Request, name: Name, who: Who) -> dict[str, Any]:
    return doc(request, who, users=_named(await _users(controller, name), "user", name))


@openapi.get("/openapi/v3", include_in_schema=False)
@openapi.get("/openapi", include_in_schema=False)
async def openapi_v3(controller: Ctl, request: Request) -> dict[str, Any]:
    """slurmrestd's paths for its OpenAPI document (the same as /openapi.json): clients such as
    pyslurmutils read it at /openapi."""
    return request.app.openapi()

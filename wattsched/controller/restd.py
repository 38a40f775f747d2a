"""Slurm's REST API (slurmrestd's paths and payloads, data_parser v0.0.40 to v0.0.45), served by the controller.

``/slurm/{version}/...`` (ping, diag, jobs, job/{id}, job/submit, nodes, node/{name}, partitions,
partition/{name}, licenses, reservations, reservation/{name}) and ``/slurmdb/{version}/...`` (jobs, job/{id},
associations, accounts, account/{name}, users, user/{name}) for every version in
wattsched.dataversions, with or without the trailing slash Slurm's document gives some of them.
Callers authenticate as slurmrestd's JWT mode takes them: ``X-SLURM-USER-NAME`` and
``X-SLURM-USER-TOKEN`` (a token from ``scontrol token``); a bearer token works too. Every answer has
Slurm's ``meta``, ``errors`` and ``warnings``; a refusal comes with Slurm's error list and an HTTP
status. Objects are those of ``--json`` (wattsched.dataparser, v0.0.40) changed into the version
asked for (wattsched.dataversions), so a tool reads the same shapes from the CLI and from here. The
models in wattsched.restapi declare the fields tools rely on; the rest of each object is Slurm's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal as signal_mod
import time
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from starlette.types import ASGIApp, Receive, Scope, Send

from wattsched import dataparser, dataversions, states
from wattsched.accounting.store import AccountingStore, JobQuery
from wattsched.api import BIG, ID_MAX, LIST_MAX, TEXT_MAX
from wattsched.controller import acctdb, failover, listings, permissions, snapshots, views
from wattsched.controller import jobs as jobs_mod
from wattsched.controller import nodes as nodes_mod
from wattsched.controller import reservations as reservations_mod
from wattsched.controller.actions import Refused
from wattsched.controller.loop import Controller
from wattsched.controller.routedeps import Ctl
from wattsched.controller.state import ClusterState
from wattsched.controller.views import job_gpus, job_view, node_views, partition_views
from wattsched.restapi import (
    AccountsDoc,
    AssociationsDoc,
    DbJobsDoc,
    DiagDoc,
    Document,
    JobDesc,
    JobsDoc,
    LicensesDoc,
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
from wattsched.service.httpauth import Who

PREFIXES = ("/slurm/", "/slurmdb/")


def _converted(convert, *args):
    try:
        return convert(*args)
    except ValueError as exc:
        raise Refused(str(exc)) from exc


async def _version(request: Request) -> str:
    """The data_parser version in the path (the routes exist only for those there are)."""
    return request.url.path.split("/")[2]


Version = Annotated[str, Depends(_version)]


def error_document(request: Request, status: int, message: str) -> JSONResponse:
    """A refusal as slurmrestd gives it: Slurm's document with the error listed."""
    parts = request.url.path.split("/")
    version = parts[2] if len(parts) > 2 and parts[2] in dataversions.VERSIONS else dataversions.LATEST
    body = _document(request, None, version, {})
    body["errors"] = [{"error": message, "error_number": status, "description": message,
                       "source": request.url.path}]
    return JSONResponse(body, status_code=status)


def _document(request: Request, who: Any, version: str, body: dict[str, Any]) -> dict[str, Any]:
    user = who.user if who is not None else ""
    cluster = request.app.state.cluster
    doc = dataparser.document("", [], ["slurmrestd", request.method, request.url.path], cluster, body,
                              client=(user, user))
    doc.pop("")
    doc["meta"]["plugin"]["type"] = "openapi/" + ("slurmdbd" if request.url.path.startswith("/slurmdb/")
                                                  else "slurmctld")
    doc["meta"]["plugin"]["data_parser"] = f"data_parser/{version}"
    return doc


class TrailingSlash:
    """slurmrestd answers a path with or without its trailing slash (Slurm's document lists
    ``/slurm/v0.0.42/jobs/``, clients also call ``.../jobs``): the slash is dropped before routing,
    as a redirect would lose a POST's body with some clients."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.endswith("/") and path.startswith(PREFIXES) and path.count("/") > 3:
                scope = {**scope, "path": path.rstrip("/"), "raw_path": path.rstrip("/").encode()}
        await self.app(scope, receive, send)


def serve(app: FastAPI) -> None:
    """Every version's routes and the OpenAPI document's paths, on the controller's application."""
    for version in dataversions.VERSIONS:
        app.include_router(slurm, prefix=f"/slurm/{version}")
        app.include_router(slurmdb, prefix=f"/slurmdb/{version}")
    app.include_router(openapi)
    app.add_middleware(TrailingSlash)


# --- the routes ----------------------------------------------------------------------------------------

Name = Annotated[str, Field(max_length=ID_MAX)]  # a node's, partition's, account's or user's name
slurm = APIRouter(tags=["slurm"])
slurmdb = APIRouter(tags=["slurmdb"])
openapi = APIRouter()  # slurmrestd's paths for the OpenAPI document


def answer(request: Request, who: Any, version: str, kind: str = "", source: dict[str, Any] | None = None,
           **body: Any) -> Response:
    """The document as JSON bytes. Not through FastAPI's response model: its validation turned
    Slurm's integers into floats, and it cost seconds on long listings (measured: 3-4 s for 9,000
    jobs against ~0.3 s); the models stay for the OpenAPI document."""
    doc = _document(request, who, version, body)
    if kind:
        dataversions.upgrade(kind, doc, source or {}, version)
    return Response(orjson.dumps(doc), media_type="application/json")


def job_record(state: ClusterState, job: Any, now: float, version: str) -> dict[str, Any]:
    view = {**job_view(job, now), **job_gpus(job, state.nodes)}
    return dataversions.upgrade("job_info", dataparser.queue_job(view, state.config.cluster_name), view, version)


def jobs_head(state: ClusterState, request: Request, who: Any, version: str, now: float) -> dict[str, Any]:
    return _document(request, who, version, {
        "jobs": [], "last_backfill": dataparser.number(int(state.stats.bf_last_time) or None),
        "last_update": dataparser.number(int(now))})


@slurm.get("/ping", response_model=PingDoc)
async def ping(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    state = controller.state
    pongs = await failover.ping_all(state.config, state.key, controller.me)
    return answer(request, who, version, pings=[dataversions.upgrade("ping", pong, {}, version) for pong in pongs])


@slurm.get("/diag", response_model=DiagDoc)
async def diag(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    state = controller.state
    s, jobs = state.stats, list(state.jobs.values())
    statistics = {
        "parts_packed": 0, "req_time": dataparser.number(int(time.time())),
        "req_time_start": dataparser.number(int(controller.started)),
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
        "bf_active": False}
    totals = {"schedule_cycle_sum": int(s.total_ms * 1000), "schedule_cycle_depth": s.depth_total}
    return answer(request, who, version, statistics=dataversions.upgrade("diag", statistics, totals, version))


# The listings are built in turns and slices (controller.listings), so no user can starve the others.
@slurm.get("/jobs", response_model=JobsDoc)
async def jobs(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    state = controller.state
    async with controller.listings.turn(who.uid):
        now = time.time()
        records = await listings.sliced(permissions.visible(state, who, state.jobs.values()),
                                        lambda j: job_record(state, j, now, version))
        body = listings.document(jobs_head(state, request, who, version, now), "jobs", records)
    return Response(body, media_type="application/json")


@slurm.get("/job/{job_id}", response_model=JobsDoc)
async def job(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], who: Who,
              version: Version) -> Response:
    state = controller.state
    now = time.time()
    head = jobs_head(state, request, who, version, now)
    found = permissions.visible(state, who, permissions.resolve(state, job_id))
    if not found:  # PrivateData=jobs: another user's job is not there for this one
        raise Refused(f"Invalid job id specified: {job_id}", 404)
    return Response(orjson.dumps({**head, "jobs": [job_record(state, j, now, version) for j in found]}),
                    media_type="application/json")


@slurm.post("/job/submit", response_model=SubmitDoc)
async def submit(controller: Ctl, request: Request, req: SubmitRequest, who: Who, version: Version) -> Response:
    now = time.time()
    if version >= "v0.0.42" and "exclusive" in req.job.model_fields_set:
        raise Refused("Unexpected field 'exclusive' (this version takes 'shared')")
    created = controller.submit(_converted(job_submit, req.job, req.script), who, now)
    job_id = created[0].job_id
    return answer(request, who, version, "submit", job_id=job_id, step_id="batch", job_submit_user_msg="",
                  result={"job_id": job_id, "step_id": "batch", "error_code": 0, "error": "",
                          "job_submit_user_msg": ""})


@slurm.post("/job/{job_id}", response_model=Document)
async def update(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], desc: JobDesc,
                 who: Who, version: Version) -> Response:
    state = controller.state
    found = permissions.resolve(state, job_id)
    jobs_mod.update(state, found, _converted(job_update, desc), who, time.time())
    controller.changed()
    first = str(found[0].job_id) if found else ""
    return answer(request, who, version, "update", job_id=first, step_id="batch", job_submit_user_msg="",
                  results=[{"job_id": j.job_id, "step_id": "batch", "error_code": 0, "error": "", "why": ""}
                           for j in found])


@slurm.delete("/job/{job_id}", response_model=Document)
async def cancel(controller: Ctl, request: Request, job_id: Annotated[str, Field(max_length=64)], who: Who,
                 version: Version, signal: Annotated[str | None, Query(max_length=16)] = None,
                 flags: Annotated[Literal["BATCH_JOB", "FULL_JOB", "FULL_STEPS_ONLY"] | None, Query()] = None) \
        -> Response:
    state = controller.state
    sig = None
    if signal:
        name = signal.upper().removeprefix("SIG")
        sig = int(signal) if signal.isdigit() else getattr(signal_mod, f"SIG{name}", None)
        if sig is None or not 1 <= int(sig) <= 64:
            raise Refused(f"Invalid signal: {signal}")
    found = permissions.resolve(state, job_id)
    controller.act(jobs_mod.cancel(state, found, who, int(sig) if sig else None, flags == "BATCH_JOB", time.time(),
                                   flags == "FULL_JOB"))
    return answer(request, who, version, "kill", {"job_ids": [j.job_id for j in found]})


def nodes_answer(state: ClusterState, request: Request, who: Any, version: str, names: list[str]) -> Response:
    now = time.time()
    cluster = state.config.cluster_name
    views = node_views(state.nodes, state.resv, now, names)
    return answer(request, who, version,
                  nodes=[dataversions.upgrade("node", dataparser.node(view, cluster), view, version) for view in views],
                  last_update=dataparser.number(int(now)))


@slurm.get("/nodes", response_model=NodesDoc)
async def nodes(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    state = controller.state
    return nodes_answer(state, request, who, version, list(state.nodes))


@slurm.get("/node/{name}", response_model=NodesDoc)
async def node(controller: Ctl, request: Request, name: Name, who: Who, version: Version) -> Response:
    state = controller.state
    if name not in state.nodes:
        raise Refused(f"Invalid node name specified: {name}", 404)
    return nodes_answer(state, request, who, version, [name])


@slurm.post("/node/{name}", response_model=Document)
async def change_node(controller: Ctl, request: Request, name: Name, change: NodeChange,
                      who: Who, version: Version) -> Response:
    state = controller.state
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    if name not in state.nodes:
        raise Refused(f"Invalid node name specified: {name}", 404)
    upd = _converted(node_update, change)
    controller.act(nodes_mod.update_nodes(state, [name], upd.state, upd.reason, who, time.time()))
    return answer(request, who, version)


def partitions_answer(state: ClusterState, request: Request, who: Any, version: str, only: str | None) -> Response:
    parts = [p for p in partition_views(state.config, state.nodes) if only is None or p["name"] == only]
    if only is not None and not parts:
        raise Refused(f"Invalid partition name specified: {only}", 404)
    cluster = state.config.cluster_name
    return answer(request, who, version,
                  partitions=[dataversions.upgrade("partition", dataparser.partition(p, cluster), p, version)
                              for p in parts],
                  last_update=dataparser.number(int(time.time())))


@slurm.get("/partitions", response_model=PartitionsDoc)
async def partitions(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    return partitions_answer(controller.state, request, who, version, None)


@slurm.get("/partition/{name}", response_model=PartitionsDoc)
async def partition(controller: Ctl, request: Request, name: Name, who: Who, version: Version) -> Response:
    return partitions_answer(controller.state, request, who, version, name)


def reservations_answer(state: ClusterState, request: Request, who: Any, version: str, only: str | None) \
        -> Response:
    now = time.time()
    found = [r for name, r in sorted(state.resv.by_name.items()) if only is None or name == only]
    if only is not None and not found:
        raise Refused(f"Reservation {only} not found", 404)
    cluster = state.config.cluster_name
    shown = [reservations_mod.show(r, state.nodes, now) for r in found]
    return answer(request, who, version,
                  reservations=[dataversions.upgrade("reservation", dataparser.reservation(r, cluster), r, version)
                                for r in shown],
                  last_update=dataparser.number(int(time.time())))


@slurm.get("/licenses", response_model=LicensesDoc)
async def licenses(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    shown = views.license_view(snapshots.license_snap(controller.state))
    return answer(request, who, version, licenses=[dataversions.upgrade("license", dataparser.license_record(lic), lic,
                                                                        version) for lic in shown],
                  last_update=dataparser.number(int(time.time())))


@slurm.get("/reservations", response_model=ReservationsDoc)
async def reservations(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    return reservations_answer(controller.state, request, who, version, None)


@slurm.get("/reservation/{name}", response_model=ReservationsDoc)
async def reservation(controller: Ctl, request: Request, name: Annotated[str, Field(max_length=256)], who: Who,
                      version: Version) -> Response:
    return reservations_answer(controller.state, request, who, version, name)

# --- slurmdbd's side: the accounting database ------------------------------------------------------


def accounting(controller: Controller) -> AccountingStore:
    """The accounting database (503 without one)."""
    return acctdb.store(controller.accounting)


def db_job_record(record: dict[str, Any], version: str) -> dict[str, Any]:
    obj = dataversions.upgrade("slurmdb_job", dataparser.accounting_job(record), record, version)
    for step, step_record in zip(obj["steps"], record["steps"], strict=True):
        dataversions.upgrade("slurmdb_step", step, step_record, version)
    return obj


async def db_jobs(controller: Controller, request: Request, who: Any, version: str, query: JobQuery) -> Response:
    store = accounting(controller)
    users = permissions.record_users(controller.state, who, query.users)
    await acctdb.flushed(controller.sync)
    rows = [] if users is None else await acctdb.call(store.query_jobs, dataclasses.replace(query, users=users))
    return answer(request, who, version, jobs=[db_job_record(r, version) for r in rows])


@slurmdb.get("/jobs", response_model=DbJobsDoc)
async def db_job_list(controller: Ctl, request: Request, who: Who, version: Version,
                      users: Annotated[str | None, Query(max_length=TEXT_MAX)] = None,
                      state_: Annotated[str | None, Query(alias="state", max_length=1024)] = None,
                      start_time: Annotated[int | None, Query(ge=0, le=BIG)] = None,
                      end_time: Annotated[int | None, Query(ge=0, le=BIG)] = None) -> Response:
    try:
        wanted = tuple(states.parse_job_state(s) for s in (state_ or "").split(",") if s)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    return await db_jobs(controller, request, who, version, JobQuery(
        cluster=controller.state.config.cluster_name, users=tuple(u for u in (users or "").split(",") if u)[:LIST_MAX],
        states=wanted, start=start_time, end=end_time))


@slurmdb.get("/job/{job_id}", response_model=DbJobsDoc)
async def db_job(controller: Ctl, request: Request, job_id: Annotated[int, Field(ge=1, le=BIG)],
                 who: Who, version: Version) -> Response:
    query = JobQuery(cluster=controller.state.config.cluster_name, job_ids=(job_id,))
    return await db_jobs(controller, request, who, version, query)


async def _accounts_seen(controller: Controller, who: Any) -> tuple[list[dict[str, Any]], ...]:
    """The associations, accounts and users ``who`` may see (PrivateData: permissions.private_accounts)."""
    store = accounting(controller).assocs(controller.state.config.cluster_name)
    assocs, accounts, users = await asyncio.gather(acctdb.call(store.associations), acctdb.call(store.accounts),
                                                   acctdb.call(store.users))
    return permissions.private_accounts(controller.state, who, assocs, accounts, users)


@slurmdb.get("/associations", response_model=AssociationsDoc)
async def associations(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    rows = (await _accounts_seen(controller, who))[0]
    return answer(request, who, version, associations=[dataversions.upgrade("association", {
        "account": a["account"], "cluster": a["cluster"], "user": a["user"], "partition": "",
        "parent_account": a["parent"] or "", "shares_raw": int(a["shares"]),
        "id": {"account": a["account"], "cluster": a["cluster"], "id": a["id"], "partition": "", "user": a["user"]},
        "is_default": bool(a["user"]) and a["default_account"] == a["account"], "comment": "",
        "default": {"qos": ""}, "flags": [], "lineage": "", "max": {}, "min": {},
        "priority": dataparser.number(None), "qos": [], "accounting": []}, a, version) for a in rows])


@slurmdb.get("/accounts", response_model=AccountsDoc)
async def accounts(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    return answer(request, who, version, accounts=await _accounts(controller, who, None))


@slurmdb.get("/account/{name}", response_model=AccountsDoc)
async def account(controller: Ctl, request: Request, name: Name, who: Who, version: Version) -> Response:
    return answer(request, who, version, accounts=_named(await _accounts(controller, who, name), "account", name))


def _named(found: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    if not found:
        raise Refused(f"Nothing found with query: {kind} {name}", 404)
    return found


async def _accounts(controller: Controller, who: Any, only: str | None) -> list[dict[str, Any]]:
    rows = (await _accounts_seen(controller, who))[1]
    return [{"name": a["name"], "description": a.get("description", "") or "",
             "organization": a.get("organization", "") or "", "associations": [], "coordinators": [],
             "flags": []} for a in rows if only is None or a["name"] == only]


async def _users(controller: Controller, who: Any, version: str, only: str | None) -> list[dict[str, Any]]:
    rows = (await _accounts_seen(controller, who))[2]
    return [dataversions.upgrade("user", {
        "name": u["name"], "default": {"account": u.get("default_account", "") or "", "wckey": ""},
        "administrator_level": [str(u.get("admin_level", "") or "None")], "associations": [],
        "coordinators": [], "flags": [], "old_name": "", "wckeys": []}, u, version)
        for u in rows if only is None or u["name"] == only]


@slurmdb.get("/users", response_model=UsersDoc)
async def users(controller: Ctl, request: Request, who: Who, version: Version) -> Response:
    return answer(request, who, version, users=await _users(controller, who, version, None))


@slurmdb.get("/user/{name}", response_model=UsersDoc)
async def user(controller: Ctl, request: Request, name: Name, who: Who, version: Version) -> Response:
    return answer(request, who, version, users=_named(await _users(controller, who, version, name), "user", name))


@openapi.get("/openapi/v3", include_in_schema=False)
@openapi.get("/openapi", include_in_schema=False)
async def openapi_v3(request: Request) -> dict[str, Any]:
    """slurmrestd's paths for its OpenAPI document (the same as /openapi.json): clients such as
    pyslurmutils read it at /openapi."""
    return request.app.openapi()

"""The controller's HTTP API (v1): jobs, steps, nodes, partitions, reservations, config, diagnostics,
accounting, agents.

Every route but the OpenAPI document requires a bearer token (see :mod:`wattsched.auth`).
Handlers run on the event loop that owns the state, apply one transition, write it to the
state store, and only then answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
import time
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sqlalchemy.exc import SQLAlchemyError

from wattsched import auth, exposition, h5profile, hostlist, power, powerreport, states
from wattsched import config as config_mod
from wattsched.accounting.store import AccountingStore, JobQuery
from wattsched.api import (
    BIG,
    LIST_MAX,
    AgentHeartbeat,
    AllocationComplete,
    CancelRequest,
    HeartbeatReply,
    JobSubmit,
    JobUpdate,
    NodeUpdate,
    PowerCapUpdate,
    ReservationSpec,
    StepComplete,
    StepCreate,
    StepPlacement,
    StepReply,
    SubmitReply,
)
from wattsched.controller import dashboard, energy, priorityapi, restd
from wattsched.controller import reservations as reservations_mod
from wattsched.controller.acctsync import AccountingSync
from wattsched.controller.actions import Refused
from wattsched.controller.dispatch import Dispatcher, batch_environment
from wattsched.controller.metrics import CATEGORIES, ControllerCollector
from wattsched.controller.powerlog import PowerLog
from wattsched.controller.priority import FairShareCalc
from wattsched.controller.state import ClusterState
from wattsched.controller.views import job_gpus, job_view, node_view, partition_views
from wattsched.httpauth import Who, loop_lifespan, metrics_access, require_role
from wattsched.httplimits import BodyLimit

NodeAgent = Annotated[auth.Identity, require_role("node")]
log = logging.getLogger("wattsched.controller")


MIN_PASS_INTERVAL_S = 0.05
# --immediate refusals by pending reason (the power-capping prototype's wording, Hautreux 2013)
IMMEDIATE_REFUSAL = {states.R_POWER: "Required power not available now",
                     states.R_POWER_RESERVED: "Required power at least partially reserved"}
TIMER_INTERVAL_S = 1.0
# The largest request: a batch script (4 MiB) with its environment and arguments (1 MiB each), and
# the heartbeat of an agent hosting thousands of virtual nodes.
MAX_BODY_BYTES = 16 * 1024 * 1024


class Controller:
    """The imperative shell: owns the state, the loop, the dispatcher and the accounting thread."""

    def __init__(self, state: ClusterState, accounting: AccountingStore | None, sync: AccountingSync | None):
        self.state, self.accounting, self.sync = state, accounting, sync
        self.dispatcher: Dispatcher | None = None
        self.fairshare = FairShareCalc(state, accounting) if accounting is not None else None
        self._kick = asyncio.Event()
        self.started = time.time()
        self.power_log = PowerLog()
        self._merge_tries: dict[tuple[str, int, int], int] = {}

    def reconfigure(self) -> list[str]:
        """Re-read the configuration file (scontrol reconfigure, SIGHUP); Refused with the file's
        error, or with what cannot change without a restart, leaves everything as it was."""
        from wattsched.config import ConfigError
        from wattsched.controller.main import StartupError, load_plugins

        try:
            config = config_mod.load(self.state.config.source, switches_nodes=True)
            plugins = load_plugins(config)
        except (ConfigError, StartupError) as exc:
            raise Refused(str(exc), 400) from exc
        changes = self.state.reconfigure(config, plugins, time.time())
        log.warning("configuration re-read", extra={"source": config.source, "changes": "; ".join(changes)})
        self.changed()
        return changes

    def changed(self) -> None:
        """Persist, wake the scheduler and the accounting thread."""
        self.state.flush()
        self._kick.set()
        if self.sync:
            self.sync.kick()

    def act(self, actions: list) -> None:
        self.changed()
        if actions and self.dispatcher:
            self.dispatcher.run(actions)

    async def loop(self) -> None:
        """The scheduling loop and, with accounting, the fair-share loop (cancelled together)."""
        await asyncio.gather(self._schedule(), *([self.fairshare.loop()] if self.fairshare else []))

    async def _schedule(self) -> None:
        last_timers = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=self.state.config.scheduler_interval_s)
            # Coalesce bursts of submissions and job ends into one pass, and never let passes take
            # more than about a third of the loop's time (Slurm's sched_min_interval, made adaptive).
            await asyncio.sleep(max(MIN_PASS_INTERVAL_S, 2 * self.state.stats.last_ms / 1000))
            self._kick.clear()
            now = time.time()
            started = time.perf_counter()
            actions = []
            timers_due = now - last_timers >= TIMER_INTERVAL_S
            if timers_due:  # limits, warnings, node timeouts: a second's resolution is Slurm's too
                actions += self.state.check_timers(now)
                dashboard.record_power(self.power_log, self.state, now)
                last_timers = now
            actions += self.state.schedule(now)
            elapsed_ms = (time.perf_counter() - started) * 1000
            self.state.stats.pass_done(elapsed_ms)
            self.state.flush()
            if self.sync:
                self.sync.kick()
            assert self.dispatcher is not None
            self.dispatcher.run(actions)
            if timers_due:
                self.dispatcher.retry()
                self._merge_profiles()

    def _merge_profiles(self) -> None:
        """Merge the node profiles of ended jobs into one file per job, off the event loop; a file
        still open on a node (HDF5 locks it) is tried again for a minute."""
        due, self.state.profiles_due[:] = list(self.state.profiles_due), []
        for entry in due:
            task = asyncio.get_running_loop().run_in_executor(None, merge_profile, self.state.config.profile_dir,
                                                             *entry)
            task.add_done_callback(functools.partial(self._merged, entry))

    def _merged(self, entry: tuple[str, int, int], future: asyncio.Future) -> None:
        tries = self._merge_tries.get(entry, 0) + 1
        if future.result() or tries >= 60:
            self._merge_tries.pop(entry, None)
            return
        self._merge_tries[entry] = tries
        self.state.profiles_due.append(entry)


def merge_profile(profile_dir: str, user: str, uid: int, job_id: int) -> bool:
    """Merge a job's node profiles; False when a node file is still locked (try again later)."""
    try:
        path = h5profile.merge(profile_dir, user, job_id)
        if path and os.geteuid() == 0 and uid:
            os.chmod(path, 0o600)
            os.chown(path, uid, -1)
    except BlockingIOError:
        return False
    except (OSError, KeyError) as exc:
        log.warning("profile merge failed", extra={"job": job_id, "error": str(exc)})
    return True


def create_app(controller: Controller) -> FastAPI:
    state = controller.state

    def start() -> None:
        controller.dispatcher = Dispatcher(state, controller.changed)
        with contextlib.suppress(RuntimeError, NotImplementedError, ValueError):  # not the main thread (tests)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, _hangup)
        if controller.sync:
            controller.sync.start()

    def _hangup() -> None:
        try:
            controller.reconfigure()
        except Refused as exc:
            log.error("configuration not re-read", extra={"error": str(exc)})

    async def stop() -> None:
        state.flush()
        assert controller.dispatcher is not None
        await controller.dispatcher.close()
        if controller.sync:
            controller.sync.stop()

    lifespan = loop_lifespan(controller.loop, start, stop)

    app = FastAPI(title="wattsched controller", version="1", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.state.key = state.key

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        if request.url.path.startswith(restd.PREFIXES):
            return restd.error_document(request, exc.status, str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(SQLAlchemyError)
    async def database_away(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        """sacctmgr, sshare and sreport read the accounting database: when it fails, say so (503)."""
        return JSONResponse({"detail": "Problem talking to the database: accounting database unavailable "
                                       f"({type(exc).__name__})"}, status_code=503)

    # --- jobs ------------------------------------------------------------------------------------

    @app.post("/v1/jobs", response_model=SubmitReply)
    async def submit(req: JobSubmit, who: Who) -> SubmitReply:
        now = time.time()
        if req.test_only:
            job, plan = state.will_run(req, who, now)
            return SubmitReply(job_id=job.job_id, will_run=plan)
        jobs = state.submit(req, who, now)
        if req.immediate:
            actions = state.schedule(now)
            job = jobs[0]
            if job.state != states.RUNNING:
                why = IMMEDIATE_REFUSAL.get(job.reason, "Requested nodes are busy")
                state.cancel([job], who, None, False, now)
                controller.act(actions)
                raise Refused(f"Unable to allocate resources: {why}", 503)
            controller.act(actions)
        elif req.interactive:  # srun and salloc wait on this answer: try to place the job at once
            controller.act(state.schedule(now))
        else:
            controller.changed()
        arrays = [j.job_id for j in jobs] if jobs[0].array_task_id is not None else []
        return SubmitReply(job_id=jobs[0].job_id, array_task_ids=arrays)

    @app.get("/v1/jobs")
    async def list_jobs(who: Who, user: Annotated[list[str] | None, Query()] = None,
                        state_: Annotated[list[str] | None, Query(alias="state")] = None,
                        partition: Annotated[list[str] | None, Query()] = None,
                        job: Annotated[list[str] | None, Query()] = None, detail: bool = False,
                        columns: bool = False) -> Response:
        now = time.time()
        selected = state.jobs.values()
        job = [ref for ref in job or () if ref]
        if job:
            wanted: dict[int, Any] = {}
            for ref in job:
                try:
                    for j in state.resolve(ref):
                        wanted[j.job_id] = j
                except Refused:
                    continue
            selected = wanted.values()
        users, states_, parts = set(user or ()), set(state_ or ()), set(partition or ())
        def detailed(j: Any, at: float) -> dict[str, Any]:
            return {**job_view(j, at), **job_gpus(j, state.nodes)}

        view = detailed if detail else state.brief
        result = [view(j, now) for j in selected
                  if (not users or j.user in users) and (not parts or j.partition in parts)
                  and (not states_ or j.state in states_ or j.shown_state in states_)]
        if columns and result:  # one header and rows of values: a third of the bytes for 10,000 jobs
            names = list(result[0])
            body = {"time": now, "columns": names, "rows": [[row[n] for n in names] for row in result]}
        else:
            body = {"time": now, "jobs": result}
        return Response(orjson.dumps(body), media_type="application/json")

    @app.post("/v1/jobs/cancel")
    async def cancel(req: CancelRequest, who: Who) -> dict[str, Any]:
        now = time.time()
        jobs = [j for ref in req.job_ids for j in state.resolve(ref)]
        controller.act(state.cancel(jobs, who, req.signal, req.batch_only, now))
        return {"cancelled": [j.job_id for j in jobs]}

    @app.patch("/v1/jobs/{job_ref}")
    async def update_job(job_ref: str, upd: JobUpdate, who: Who) -> dict[str, Any]:
        jobs = state.resolve(job_ref)
        state.update(jobs, upd, who, time.time())
        controller.changed()
        return {"updated": [j.job_id for j in jobs]}

    @app.post("/v1/jobs/{job_ref}/suspend")
    async def suspend(job_ref: str, who: Who, resume: bool = False) -> dict[str, Any]:
        jobs = state.resolve(job_ref)
        controller.act(state.suspend(jobs, resume, who, time.time()))
        return {"jobs": [j.job_id for j in jobs], "suspended": not resume}

    @app.post("/v1/jobs/{job_ref}/requeue")
    async def requeue(job_ref: str, who: Who) -> dict[str, Any]:
        jobs = state.resolve(job_ref)
        controller.act(state.requeue(jobs, who, time.time()))
        return {"requeued": [j.job_id for j in jobs]}

    def one_job(job_id: int):
        job = state.jobs.get(job_id)
        if job is None:
            raise Refused("Invalid job id specified", 404)
        return job

    @app.post("/v1/jobs/{job_id}/steps", response_model=StepReply)
    async def create_step(job_id: int, req: StepCreate, who: Who) -> StepReply:
        job = one_job(job_id)
        step, layout = state.create_step(job, req, who, time.time())
        controller.changed()
        placements = [StepPlacement(node=n, agent_url=state.nodes[n].agent_url, node_index=i, task_ids=t)
                      for i, (n, t) in enumerate(layout.items())]
        slurm_env = {k: v for k, v in batch_environment(state, job).items() if k.startswith("SLURM")}
        return StepReply(job_id=job_id, step_id=int(step.step_id), ntasks=step.ntasks, nodes=list(layout),
                         placements=placements, credential=state.step_credential(job, step, layout),
                         job_environment=slurm_env)

    @app.get("/v1/jobs/{job_id}/environment")
    async def job_environment(job_id: int, who: Who) -> dict[str, Any]:
        """The SLURM_* variables of a running job (salloc sets them for its command)."""
        job = one_job(job_id)
        if job.uid != who.uid and not state.is_admin(who):
            raise Refused("Access/permission denied", 403)
        if job.state != states.RUNNING:
            raise Refused("Job is not running", 409)
        return {"environment": {k: v for k, v in batch_environment(state, job).items() if k.startswith("SLURM")}}

    @app.post("/v1/jobs/{job_id}/steps/{step_id}/complete")
    async def complete_step(job_id: int, step_id: str, done: StepComplete, who: Who) -> dict[str, str]:
        state.complete_step(one_job(job_id), step_id, done, who, time.time())
        controller.changed()
        return {"status": "ok"}

    @app.post("/v1/jobs/{job_id}/allocation/complete")
    async def complete_allocation(job_id: int, done: AllocationComplete, who: Who) -> dict[str, str]:
        controller.act(state.complete_allocation(one_job(job_id), done.exit_code, done.term_signal, who,
                                                 time.time()))
        return {"status": "ok"}

    # --- nodes, partitions, config -------------------------------------------------------------------

    @app.get("/v1/jobs/{job_ref}/stat")
    async def job_stat(job_ref: str, who: Who) -> dict[str, Any]:
        jobs = [j for j in state.resolve(job_ref) if j.state == states.RUNNING]
        for job in jobs:
            if job.uid != who.uid and not state.is_admin(who):
                raise Refused("Access/permission denied", 403)
        now = time.time()
        return {"jobs": [state.job_stat(job, now) for job in jobs]}

    @app.get("/v1/nodes")
    async def nodes(who: Who) -> JSONResponse:
        now = time.time()
        held = {name: "MAINT" if "MAINT" in r.flags else "RESERVED" for name, r in state.resv.active_on(now).items()}
        return JSONResponse({"time": now, "nodes": [node_view(n, now, held.get(n.name, ""))
                                                    for n in state.nodes.values()]})

    @app.get("/v1/nodes/{name}/energy")
    async def node_energy(name: str, who: Who) -> dict[str, Any]:
        node = state.nodes.get(name)
        if node is None:
            raise Refused(f"Invalid node name specified: {name}", 404)
        return {"node": name, "samples": node.energy_samples, "current_watts": node.current_watts}

    @app.patch("/v1/nodes/{node_expr}")
    async def update_nodes(node_expr: str, upd: NodeUpdate, who: Who) -> dict[str, Any]:
        if not state.is_admin(who):  # before the expression is even read
            raise Refused("Access/permission denied", 403)
        try:
            names = hostlist.expand(node_expr, len(state.nodes))
        except hostlist.HostlistError as exc:
            raise Refused(str(exc)) from exc
        controller.act(state.update_nodes(names, upd.state, upd.reason, who, time.time()))
        return {"updated": names}

    @app.get("/v1/partitions")
    async def partitions(who: Who) -> JSONResponse:
        return JSONResponse({"time": time.time(), "partitions": partition_views(state.config, state.nodes)})

    @app.get("/v1/config")
    async def config(who: Who) -> dict[str, Any]:
        return {"time": time.time(), "source": state.config.source,
                "settings": [[k, v] for k, v in state.config.as_pairs()],
                "accounting_healthy": controller.sync.healthy if controller.sync else None}

    # --- power cap -----------------------------------------------------------------------------

    @app.get("/v1/powercap")
    async def show_powercap(who: Who) -> dict[str, Any]:
        figures = power.summary(state.node_power(), state.power_states())
        return {"time": time.time(), "enabled": state.power_cap is not None,
                "power_cap": None if state.power_cap is None else
                ("INFINITE" if math.isinf(state.power_cap) else int(state.power_cap)), **figures}

    @app.patch("/v1/powercap")
    async def update_powercap(upd: PowerCapUpdate, who: Who) -> dict[str, Any]:
        state.set_power_cap(upd.power_cap, who)
        controller.changed()
        return {"power_cap": upd.power_cap}

    # --- reservations ---------------------------------------------------------------------------

    @app.get("/v1/reservations")
    async def reservations(who: Who) -> dict[str, Any]:
        now = time.time()
        return {"time": now, "reservations": [reservations_mod.show(r, state.nodes, now)
                                              for r in sorted(state.resv.by_name.values(), key=lambda r: r.name)]}

    @app.post("/v1/reservations")
    async def create_reservation(spec: ReservationSpec, who: Who) -> dict[str, Any]:
        now = time.time()
        resv = state.create_reservation(spec, who, now)
        controller.changed()
        return reservations_mod.show(resv, state.nodes, now)

    @app.patch("/v1/reservations/{name}")
    async def update_reservation(name: str, spec: ReservationSpec, who: Who) -> dict[str, Any]:
        now = time.time()
        resv = state.update_reservation(name, spec, who, now)
        controller.changed()
        return reservations_mod.show(resv, state.nodes, now)

    @app.delete("/v1/reservations/{name}")
    async def delete_reservation(name: str, who: Who) -> dict[str, Any]:
        state.delete_reservation(name, who)
        controller.changed()
        return {"deleted": name}

    @app.get("/v1/diag")
    async def diag(who: Who) -> dict[str, Any]:
        stats = state.stats
        return {"time": time.time(), "started": controller.started, "cycles": stats.cycles,
                "last_cycle_ms": stats.last_ms, "max_cycle_ms": stats.max_ms,
                "mean_cycle_ms": stats.total_ms / max(1, stats.cycles),
                "mean_depth": stats.depth_total / max(1, stats.cycles),
                "jobs_started": stats.started, "queue_depth": stats.depth, "jobs": len(state.jobs),
                "jobs_pending": sum(j.state == states.PENDING for j in state.jobs.values()),
                "jobs_running": sum(j.state == states.RUNNING for j in state.jobs.values()),
                "bf_cycles": stats.bf_cycles, "bf_backfilled": stats.bf_backfilled,
                "bf_last_backfilled": stats.bf_last_backfilled, "bf_last_time": stats.bf_last_time,
                "bf_last_ms": stats.bf_last_ms, "bf_max_ms": stats.bf_max_ms,
                "bf_mean_ms": stats.bf_total_ms / max(1, stats.bf_cycles), "bf_last_depth": stats.bf_last_depth,
                "bf_mean_depth": stats.bf_depth_total / max(1, stats.bf_cycles), "bf_queue_len": stats.bf_queue_len,
                "scheduler_type": state.config.scheduler_type, "accounting_backlog": state.store.backlog(),
                "accounting_rejected": state.store.rejected_count(),
                "accounting_rejected_recent": state.store.rejected(10) if state.is_admin(who) else []}

    @app.post("/v1/reconfigure")
    async def reconfigure(who: Who) -> dict[str, Any]:
        if not state.is_admin(who):
            raise Refused("Access/permission denied", 403)
        return {"changes": controller.reconfigure()}

    @app.get("/v1/ping")
    async def ping(who: Who) -> dict[str, Any]:
        return {"status": "UP", "cluster": state.config.cluster_name, "user": who.user, "uid": who.uid,
                "admin": state.is_admin(who)}

    @app.post("/v1/token")
    async def token(who: Who, username: str = "", lifespan: int = Query(1800, ge=1, le=86400 * 365)) \
            -> dict[str, str]:
        target = username or who.user
        if target != who.user and not state.is_admin(who):
            raise Refused("Access/permission denied", 403)
        uid = who.uid if target == who.user else auth.lookup_uid(target)
        if uid is None:
            raise Refused(f"Invalid user: {target}", 404)
        return {"token": auth.user_token(state.key, uid, target, lifespan_s=lifespan)}

    # --- metrics (Prometheus) ------------------------------------------------------------------------

    scrape = metrics_access(lambda: state.config)

    @app.get("/metrics", dependencies=[scrape])
    async def metrics(request: Request) -> Response:
        return exposition.render(request, [ControllerCollector(state)])

    @app.get("/metrics/{category}", dependencies=[scrape])
    async def metrics_category(category: str, request: Request) -> Response:
        if category not in CATEGORIES:
            raise Refused(f"No metrics {category[:64]!r}: one of {', '.join(CATEGORIES)}", 404)
        return exposition.render(request, [ControllerCollector(state, [category])])

    # --- accounting -----------------------------------------------------------------------------------

    priorityapi.add_routes(app, controller)
    restd.add_routes(app, controller)
    dashboard.add_routes(app, controller)

    @app.get("/v1/accounting/jobs")
    def accounting_jobs(who: Who, job: Annotated[list[Annotated[int, Field(ge=0, le=BIG)]] | None,
                                                 Query(max_length=LIST_MAX)] = None,
                        user: Annotated[list[str] | None, Query(max_length=LIST_MAX)] = None,
                        state_: Annotated[list[str] | None, Query(alias="state", max_length=64)] = None,
                        start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                        end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> JSONResponse:
        if controller.accounting is None:
            raise Refused("Accounting storage is disabled (AccountingStorageType=accounting_storage/none)", 400)
        query = JobQuery(cluster=state.config.cluster_name, job_ids=tuple(job or ()), users=tuple(user or ()),
                         states=tuple(state_ or ()), start=start, end=end)
        try:
            if controller.sync is not None:
                controller.sync.flush()  # the caller's own latest changes first
            rows = controller.accounting.query_jobs(query)
        except Exception as exc:  # the database may be away; say so rather than fail with a 500
            raise Refused(f"Problem talking to the database: accounting database unavailable ({type(exc).__name__})",
                          503) from exc
        return JSONResponse({"time": time.time(), "jobs": rows})

    @app.get("/v1/power/report")
    def power_report(who: Who, start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                     end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> dict[str, Any]:
        """Power saving over [start, end]: switches, time off, energy saved against always-on (from
        the node power events in accounting), and jobs' added waiting. By default the last day, or
        as much of it as the nodes' energy samples cover, so that the figures are all measured."""
        if controller.accounting is None:
            raise Refused("Accounting storage is disabled (AccountingStorageType=accounting_storage/none)", 400)
        now = time.time()
        span = energy.metered_span(state.nodes.values())
        if end is None:
            end = min(now, span[1]) if span and span[1] > span[0] else now
        if start is None:
            start = max(end - 86400, span[0]) if span and span[0] < end else end - 86400
        try:
            rows = controller.accounting.node_events(state.config.cluster_name)
        except Exception as exc:
            raise Refused(f"Problem talking to the database: accounting database unavailable ({type(exc).__name__})",
                          503) from exc
        events = [(r["time"], r["node"], r["state"], r["reason"]) for r in rows if r["time"] <= end]
        watts = {n.name: powerreport.NodeWatts(float(n.idle_watts or 0), float(
            n.power_save_watts if n.power_save_watts is not None else n.idle_watts or 0), n.switching)
            for n in state.config.nodes}
        report = powerreport.saving(events, watts, start, end).as_dict()
        measured = energy.cluster_joules(state.nodes.values(), start, end)
        report["cluster_j"] = measured
        report["always_on_j"] = None if measured is None else measured + report["saved_j"]
        report["saved_pct"] = None if not report["always_on_j"] else 100 * report["saved_j"] / report["always_on_j"]
        return report

    # --- node agents ---------------------------------------------------------------------------------

    @app.post("/v1/agents/heartbeat", response_model=HeartbeatReply)
    async def heartbeat(hb: AgentHeartbeat, who: NodeAgent) -> HeartbeatReply:
        acked, to_kill, actions = state.heartbeat(hb, time.time())
        controller.act(actions)
        return HeartbeatReply(acknowledged=acked, cancel=to_kill)

    return app

"""The controller's HTTP API (v1): nodes, partitions, reservations, config, diagnostics, accounting,
agents, and the routes of jobs and steps (jobroutes), Slurm's REST API (restd), priorities and the
dashboard, over the event loop that owns the state (loop.Controller).

Every route but the OpenAPI document requires a bearer token (see :mod:`wattsched.auth`).
Handlers run on the event loop that owns the state, apply one transition, write it to the
state store, and only then answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sqlalchemy.exc import SQLAlchemyError

from wattsched import auth, exposition, hostlist, httplimits, power, powerreport, states
from wattsched.accounting.store import JobQuery
from wattsched.api import (
    BIG,
    LIST_MAX,
    AgentHeartbeat,
    HeartbeatReply,
    NodeUpdate,
    PowerCapUpdate,
    ReservationSpec,
)
from wattsched.controller import acctdb, dashboard, energy, jobroutes, priorityapi, restd
from wattsched.controller import reservations as reservations_mod
from wattsched.controller.actions import Refused
from wattsched.controller.dispatch import Dispatcher
from wattsched.controller.loop import Controller
from wattsched.controller.metrics import CATEGORIES, ControllerCollector
from wattsched.controller.views import node_view, partition_views
from wattsched.httpauth import Who, loop_lifespan, metrics_access, require_role
from wattsched.ratelimit import RateLimiter

NodeAgent = Annotated[auth.Identity, require_role("node")]
log = logging.getLogger("wattsched.controller")


# The largest request: a batch script (4 MiB) with its environment and arguments (1 MiB each), and
# the heartbeat of an agent hosting thousands of virtual nodes.
MAX_BODY_BYTES = 16 * 1024 * 1024


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
    httplimits.guard(app, MAX_BODY_BYTES)
    app.state.key = state.key
    app.state.rate_limiter = RateLimiter(state.config.slurmctld_parameters)
    app.state.rate_limits = lambda: state.config.slurmctld_parameters  # as scontrol reconfigure left it

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

    jobroutes.add_routes(app, controller)

    # --- nodes, partitions, config -------------------------------------------------------------------

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
                "shed": {"steps": list(state.config.power_cap_shed), "time_s": state.config.power_cap_shed_time_s,
                         "actions": state.cap.recent()},
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
    async def accounting_jobs(who: Who, job: Annotated[list[Annotated[int, Field(ge=0, le=BIG)]] | None,
                                                       Query(max_length=LIST_MAX)] = None,
                              user: Annotated[list[str] | None, Query(max_length=LIST_MAX)] = None,
                              state_: Annotated[list[str] | None, Query(alias="state", max_length=64)] = None,
                              start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                              end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> JSONResponse:
        accounting = acctdb.store(controller.accounting)
        query = JobQuery(cluster=state.config.cluster_name, job_ids=tuple(job or ()), users=tuple(user or ()),
                         states=tuple(state_ or ()), start=start, end=end)
        if controller.sync is not None:
            await acctdb.call(controller.sync.flush)  # the caller's own latest changes first
        rows = await acctdb.call(accounting.query_jobs, query)
        return JSONResponse({"time": time.time(), "jobs": rows})

    @app.get("/v1/power/report")
    async def power_report(who: Who, start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                           end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> dict[str, Any]:
        """Power saving over [start, end]: switches, time off, energy saved against always-on (from
        the node power events in accounting), and jobs' added waiting. By default the last day, or
        as much of it as the nodes' energy samples cover, so that the figures are all measured."""
        accounting = acctdb.store(controller.accounting)
        now = time.time()
        span = energy.metered_span(state.nodes.values())
        if end is None:
            end = min(now, span[1]) if span and span[1] > span[0] else now
        if start is None:
            start = max(end - 86400, span[0]) if span and span[0] < end else end - 86400
        rows = await acctdb.call(accounting.node_events, state.config.cluster_name)
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

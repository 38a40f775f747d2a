"""The controller's HTTP application: its lifespan around the event loop that owns the state
(loop.Controller), the limits every request meets, how a refusal or an accounting outage is
answered, and the routers of its parts: jobs and steps (jobroutes), nodes and agents (noderoutes),
reservations (resvroutes), triggers (triggerroutes), the cluster's settings, statistics and metrics (clusterroutes), the
accounting database (acctroutes), associations and priorities (priorityapi), Slurm's REST API
(restd) and the dashboard.

Every route but the OpenAPI document requires a bearer token (see :mod:`wattsched.auth`).
Handlers run on the event loop that owns the state, apply one transition, write it to the
state store, and only then answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from wattsched.controller import (
    acctdb,
    acctroutes,
    clusterroutes,
    dashboard,
    jobroutes,
    noderoutes,
    priorityapi,
    restd,
    resvroutes,
    statesave,
    triggerroutes,
)
from wattsched.controller.actions import Refused
from wattsched.controller.dispatch import Dispatcher
from wattsched.controller.loop import Controller
from wattsched.controller.store import Fenced
from wattsched.ratelimit import RateLimiter
from wattsched.service import httplimits
from wattsched.service.httpauth import loop_lifespan

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
        with contextlib.suppress(Fenced):  # another controller is in charge: nothing of ours to save
            statesave.flush(state)
        assert controller.dispatcher is not None
        await controller.dispatcher.close()
        if controller.sync:
            controller.sync.stop()

    lifespan = loop_lifespan(controller.loop, start, stop)

    app = FastAPI(title="wattsched controller", version="1", lifespan=lifespan)
    httplimits.guard(app, MAX_BODY_BYTES)
    app.state.controller = controller  # the routes' dependency (controller.routedeps)
    app.state.config = lambda: state.config  # as scontrol reconfigure left it (the metrics' access)
    app.state.cluster = state.config.cluster_name  # the REST API's error documents name it
    app.state.key = state.key
    app.state.revoked = lambda user: state.token_revocations.get(user, 0.0)  # (httpauth.identity)
    app.state.rate_limiter = RateLimiter(state.config.slurmctld_parameters)
    app.state.rate_limits = lambda: state.config.slurmctld_parameters  # as scontrol reconfigure left it

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        if request.url.path.startswith(restd.PREFIXES):
            return restd.error_document(request, exc.status, str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    async def database_away(_request: Request, exc: Exception) -> JSONResponse:
        """An outage of the accounting database met outside acctdb.call (the fair-share refresh after
        sacctmgr changes it) is a 503 too; any other database error stays a bug (500, logged)."""
        return JSONResponse({"detail": "Problem talking to the database: accounting database unavailable "
                                       f"({type(exc).__name__})"}, status_code=503)

    for outage in acctdb.UNAVAILABLE:
        app.add_exception_handler(outage, database_away)

    for module in (jobroutes, noderoutes, resvroutes, triggerroutes, clusterroutes, acctroutes, priorityapi,
                   dashboard):
        app.include_router(module.router)
    restd.serve(app)
    dashboard.mount_page(app)
    return app

"""The routes that read the accounting database (v1): sacct's jobs, and the power-saving report
(switches, time off, energy saved). A database that does not answer is a 503 (controller.acctdb)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field

from wattsched import powerreport
from wattsched.accounting.store import JobQuery
from wattsched.api import BIG, LIST_MAX
from wattsched.controller import acctdb, energysplit, permissions
from wattsched.controller.routedeps import Ctl
from wattsched.service.httpauth import Who

router = APIRouter()


@router.get("/v1/accounting/jobs")
async def accounting_jobs(controller: Ctl, who: Who, job: Annotated[list[Annotated[int, Field(ge=0, le=BIG)]] | None,
                                                   Query(max_length=LIST_MAX)] = None,
                          user: Annotated[list[str] | None, Query(max_length=LIST_MAX)] = None,
                          state_: Annotated[list[str] | None, Query(alias="state", max_length=64)] = None,
                          start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                          end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> JSONResponse:
    state = controller.state
    accounting = acctdb.store(controller.accounting)
    users = permissions.record_users(state, who, tuple(user or ()))  # PrivateData=jobs: one's own
    query = JobQuery(cluster=state.config.cluster_name, job_ids=tuple(job or ()), users=users or (),
                     states=tuple(state_ or ()), start=start, end=end)
    await acctdb.flushed(controller.sync)  # the caller's own latest changes first
    rows = [] if users is None else await acctdb.call(accounting.query_jobs, query)
    return JSONResponse({"time": time.time(), "jobs": rows})


@router.get("/v1/wckeys")
async def wckeys(controller: Ctl, who: Who) -> JSONResponse:
    """sacctmgr show wckeys: the keys jobs used, each with its user (PrivateData=jobs: one's own)."""
    state = controller.state
    users = permissions.record_users(state, who, ())
    accounting = acctdb.store(controller.accounting)
    await acctdb.flushed(controller.sync)
    rows = [] if users is None else await acctdb.call(accounting.wckeys, state.config.cluster_name, users)
    return JSONResponse({"time": time.time(), "wckeys": rows})


@router.get("/v1/power/report")
async def power_report(controller: Ctl, who: Who, start: Annotated[float | None, Query(ge=0, le=BIG)] = None,
                       end: Annotated[float | None, Query(ge=0, le=BIG)] = None) -> dict[str, Any]:
    """Power saving over [start, end]: switches, time off, energy saved against always-on (from
    the node power events in accounting), and jobs' added waiting. By default the last day, or
    as much of it as the nodes' energy samples cover, so that the figures are all measured."""
    state = controller.state
    accounting = acctdb.store(controller.accounting)
    now = time.time()
    span = energysplit.metered_span(state.nodes.values())
    if end is None:
        end = min(now, span[1]) if span and span[1] > span[0] else now
    if start is None:
        start = max(end - 86400, span[0]) if span and span[0] < end else end - 86400
    await acctdb.flushed(controller.sync)  # the node events of the last moments too
    rows = await acctdb.call(accounting.node_events, state.config.cluster_name)
    events = [(r["time"], r["node"], r["state"], r["reason"]) for r in rows if r["time"] <= end]
    watts = {n.name: powerreport.NodeWatts(float(n.idle_watts or 0), float(
        n.power_save_watts if n.power_save_watts is not None else n.idle_watts or 0), n.switching)
        for n in state.config.nodes}
    report = powerreport.saving(events, watts, start, end).as_dict()
    measured = energysplit.cluster_joules(state.nodes.values(), start, end)
    report["cluster_j"] = measured
    report["always_on_j"] = None if measured is None else measured + report["saved_j"]
    report["saved_pct"] = None if not report["always_on_j"] else 100 * report["saved_j"] / report["always_on_j"]
    return report

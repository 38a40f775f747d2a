"""The admins' web dashboard: its page (controller/dashboard/, plain HTML, JavaScript and SVG, served
as they are) and the data only it needs. Nodes and the queue come from the API the CLI uses
(``/v1/nodes``, ``/v1/jobs``); these routes add power over time against the cap with the power
reservations ahead and what the cap's shedding did, energy of the jobs that ended in a period by
user and account (summed by the database), and one job's power per node.

Every data route takes the same tokens as the CLI (``scontrol token``); the page keeps the token in
the tab's session storage. A user sees what squeue and sreport show them: the cluster's jobs,
nodes and usage, or under PrivateData=jobs their own jobs alone.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query
from fastapi.staticfiles import StaticFiles

from wattsched import capadmission
from wattsched.controller import acctdb, permissions, snapshots
from wattsched.controller.actions import Refused
from wattsched.controller.powerlog import DAY_S
from wattsched.controller.routedeps import Ctl
from wattsched.controller.views import job_brief
from wattsched.service.httpauth import Who

PAGE_DIR = os.path.join(os.path.dirname(__file__), "dashboard")
WEEK_S = 7 * DAY_S


def node_power_series(samples: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """A node's watts over [start, end]: its energy counter's rate between consecutive samples."""
    inside = [s for s in samples if start - 60 <= s[0] <= end + 60]
    return [(t1, (j1 - j0) / (t1 - t0)) for (t0, j0), (t1, j1) in itertools.pairwise(inside)
            if t1 > t0 and start <= t1 and t0 <= end]


router = APIRouter()


def mount_page(app: FastAPI) -> None:
    """The page itself, served as the files are."""
    app.mount("/dashboard", StaticFiles(directory=PAGE_DIR, html=True), name="dashboard")


@router.get("/v1/dashboard/power")
async def power_history(controller: Ctl, who: Who,
                        period: Annotated[int, Query(ge=60, le=WEEK_S)] = 3600) -> dict[str, Any]:
    state = controller.state
    now = time.time()
    figures = capadmission.summary(snapshots.node_power(state), snapshots.power_states(state))
    snap = snapshots.power_snap(state, now)
    cap = None if snap is None else snap.cap
    return {"time": now, "power_cap": None if cap is None else figures["max_watts"] if math.isinf(cap) else cap,
            # the schedule's changes of the cap ahead, in watts
            "cap_ahead": [] if snap is None else [{"time": t, "watts": snap.limit_at(t)} for t, _cap in snap.ahead],
            "measured_watts": sum(n.current_watts for n in state.nodes.values() if n.energy_samples),
            "modelled_watts": figures["current_watts"], "adjusted_max_watts": figures["adjusted_max_watts"],
            "max_watts": figures["max_watts"],
            "series": controller.power_log.series(now - period),
            "cap_actions": state.cap.recent(now - period),
            "power_reservations": [{"name": r.name, "start": r.start, "end": r.end, "watts": r.watts}
                                   for r in state.resv.power_snapshots()]}


@router.get("/v1/dashboard/energy")
async def energy_by_owner(controller: Ctl, who: Who, period: Annotated[int, Query(ge=60, le=WEEK_S)] = DAY_S) \
        -> dict[str, Any]:
    state = controller.state
    store, cluster = acctdb.store(controller.accounting), state.config.cluster_name
    now = time.time()
    found = {key: await acctdb.call(store.energy_by, cluster, column, now - period, now)
             for key, column in (("users", "user"), ("accounts", "account"))}
    return {"time": now, "start": now - period,
            **{key: [{"name": name, "joules": round(joules), "jobs": jobs} for name, joules, jobs in rows]
               for key, rows in found.items()}}


@router.get("/v1/dashboard/job/{job_id}")
async def job_power(controller: Ctl, job_id: Annotated[int, Path(ge=1, le=2**53)], who: Who) -> dict[str, Any]:
    state = controller.state
    job = state.jobs.get(job_id)
    if job is None or not permissions.visible(state, who, [job]):  # PrivateData=jobs: one's own
        raise Refused(f"Invalid job id specified: {job_id}", 404)
    now = time.time()
    end = job.end_time or now
    brief = job_brief(job, now) | {"cap_watts": job.capping.cap_watts, "min_cap_watts": job.capping.min_cap_watts}
    return {"time": now, "job": brief,
            "power": {name: node_power_series(state.nodes[name].energy_samples, job.start_time, end)
                      for name in job.alloc.alloc_cpus if name in state.nodes and job.start_time}}

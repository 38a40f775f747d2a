"""The cluster-wide routes of the controller's API (v1): the configuration (scontrol show config),
the licenses, the power cap and its schedule, sdiag's statistics, scontrol reconfigure, ping, tokens and their
revocation, and the Prometheus metrics as MetricsType says."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from wattsched import SLURM_RELEASE, __version__, auth, capadmission, states
from wattsched.api import PowerCapStepSpec, PowerCapUpdate
from wattsched.capschedule import CapStep
from wattsched.controller import capsetting, failover, permissions, snapshots, views
from wattsched.controller.actions import Refused
from wattsched.controller.metrics import CATEGORIES, ControllerCollector
from wattsched.controller.routedeps import Ctl
from wattsched.service import exposition, httpserve
from wattsched.service.httpauth import Who, metrics_access

log = logging.getLogger("wattsched.controller")
router = APIRouter()


@router.get("/v1/config")
async def config(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    return {"time": time.time(), "source": state.config.source, "slurm_version": ".".join(SLURM_RELEASE),
            "wattsched_version": __version__,
            "settings": [[k, v] for k, v in state.config.as_pairs()],
            "accounting_healthy": controller.sync.healthy if controller.sync else None}


@router.get("/v1/licenses")
async def show_licenses(controller: Ctl, who: Who) -> dict[str, Any]:
    """scontrol show licenses: every user may read them, as Slurm's."""
    return {"licenses": views.license_view(snapshots.license_snap(controller.state)), "last_update": time.time()}


@router.get("/v1/powercap")
async def show_powercap(controller: Ctl, who: Who) -> dict[str, Any]:
    state, now = controller.state, time.time()
    figures = capadmission.summary(snapshots.node_power(state), snapshots.power_states(state))
    snap = snapshots.power_snap(state, now)
    steps = sorted([*state.cap_steps, *state.cap_file_steps], key=lambda s: (s.start, s.step_id))
    return {"time": now, "enabled": snap is not None,
            "shed": {"steps": list(state.config.power_cap_shed), "time_s": state.config.power_cap_shed_time_s,
                     "actions": state.cap.recent()},
            "power_cap": None if snap is None else _watts(snap.cap),
            "schedule": [_step(s, figures["max_watts"]) for s in steps],
            "ahead": [] if snap is None else [{"time": t, "cap_watts": _watts(cap)} for t, cap in snap.ahead],
            **figures}


def _step(step: CapStep, max_watts: float) -> dict[str, Any]:
    """A step as ``/v1/powercap`` lists it: an open step's end is null, its cap resolved in watts."""
    return {"step_id": step.step_id, "start": step.start, "end": None if step.open else step.end,
            "power_cap": step.text, "cap_watts": _watts(step.cap(max_watts)), "flags": step.flags(),
            "source": "PowerCapSchedule" if step.step_id.startswith("conf:") else "scontrol"}


def _watts(cap: float) -> int | str:
    return "INFINITE" if math.isinf(cap) else int(cap)


@router.patch("/v1/powercap")
async def update_powercap(controller: Ctl, upd: PowerCapUpdate, who: Who) -> dict[str, Any]:
    state = controller.state
    capsetting.set_power_cap(state, upd.power_cap, who)
    controller.changed()
    return {"power_cap": upd.power_cap}


@router.post("/v1/powercap/schedule")
async def add_powercap_step(controller: Ctl, spec: PowerCapStepSpec, who: Who) -> dict[str, Any]:
    state = controller.state
    pairs = {"powercap": spec.power_cap, "endtime": spec.end_time, "duration": spec.duration, "flags": spec.flags}
    step = capsetting.add_cap_step(state, {k: v for k, v in pairs.items() if v}, who, time.time())
    controller.changed()
    return {"step": _step(step, sum(n.max for n in snapshots.node_power(state).values()))}


@router.delete("/v1/powercap/schedule/{step_id}")
async def delete_powercap_step(controller: Ctl, step_id: Annotated[str, Path(max_length=32)],
                               who: Who) -> dict[str, Any]:
    capsetting.delete_cap_step(controller.state, step_id, who)
    controller.changed()
    return {"deleted": step_id}


@router.get("/v1/diag")
async def diag(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
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
            "accounting_rejected_recent": state.store.rejected(10) if permissions.is_admin(state, who) else []}


@router.post("/v1/reconfigure")
async def reconfigure(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    return {"changes": controller.reconfigure()}


@router.post("/v1/shutdown")
async def shutdown(controller: Ctl, who: Who, request: Request, slurmds: bool = True) -> dict[str, Any]:
    """scontrol shutdown: the slurmds told to stop first (not with ``slurmds=false``: scontrol
    shutdown slurmctld), then this controller stops as on SIGTERM, its state saved."""
    state = controller.state
    if not permissions.is_super_user(state, who):
        log.error("Security violation, SHUTDOWN RPC", extra={"uid": who.uid, "user": who.user})
        raise Refused("Invalid user id", 403)
    log.warning("shutdown requested", extra={"user": who.user, "slurmds": slurmds})
    agents: list[str] = []
    if slurmds:
        assert controller.dispatcher is not None  # made as the app starts
        agents = await controller.dispatcher.shutdown_agents()
    httpserve.stop(request.app)
    return {"shutdown": True, "agents": agents}


@router.get("/v1/ping")
async def ping(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    return {"status": "UP", "cluster": state.config.cluster_name, "user": who.user, "uid": who.uid,
            "admin": permissions.is_admin(state, who), "host": controller.me.name, "index": controller.me.index,
            "active": True}


@router.post("/v1/takeover")
async def takeover(controller: Ctl, who: Who) -> dict[str, str]:
    """scontrol takeover sent to the controller in charge: there is nothing to take over."""
    if not permissions.is_admin(controller.state, who):
        raise Refused("Access/permission denied", 403)
    raise Refused(f"{controller.me.name} is already in control", 409)


@router.post("/v1/relinquish")
async def relinquish(controller: Ctl, who: Who, heir: str = Query("", max_length=255)) -> dict[str, str]:
    """Hand control to ``heir`` (a standby asked for it: scontrol takeover, or the primary back):
    the state is saved, the lease given up, and this process starts again as a standby."""
    state = controller.state
    if not permissions.is_admin(state, who):  # an administrator, or the controller asking for control
        raise Refused("Access/permission denied", 403)
    if heir and heir not in dict(state.config.slurmctld_hosts):
        raise Refused(f"{heir} is not a configured controller (SlurmctldHost)", 400)
    controller.changed()  # everything saved first: the heir loads it
    state.store.release(heir)
    asyncio.get_running_loop().call_later(0.2, failover.give_up, state.config, state.store.handed_to)
    return {"result": "relinquished"}


@router.post("/v1/token")
async def token(controller: Ctl, who: Who, username: str = Query("", max_length=64),
                lifespan: int = Query(0, ge=0, le=2**31 - 2)) -> dict[str, str]:
    """scontrol token, as Slurm's controller answers it: 0 asks for the default (1800 s, or the
    maximum if lower); past AuthAltParameters' max_token_lifespan refused to all but root."""
    state = controller.state
    params = state.config.auth_alt
    unbounded = who.uid == 0 or who.role == "controller"  # Slurm's validate_slurm_user
    if params.disable_token_creation and not unbounded:
        raise Refused("Access/permission denied", 403)
    target = username or who.user
    if target != who.user and not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    uid = who.uid if target == who.user else auth.lookup_uid(target)
    if uid is None:
        raise Refused(f"Invalid user: {target}", 404)
    lifespan = lifespan or min(auth.DEFAULT_LIFESPAN_S, params.max_token_lifespan_s)
    if lifespan > params.max_token_lifespan_s and not unbounded:
        log.warning("rejecting token lifespan %d for user:%s[%d] requested, exceeds limit of %d", lifespan,
                    target, who.uid, params.max_token_lifespan_s)
        raise Refused("Requested time limit is invalid (missing or exceeds some limit)", 400)
    return {"token": auth.user_token(state.key, uid, target, lifespan_s=lifespan)}


@router.post("/v1/token/revoke")
async def revoke_tokens(controller: Ctl, who: Who, username: str = Query(min_length=1, max_length=64)) \
        -> dict[str, str]:
    """Every token of ``username`` issued until now stops working (root and AdminUsers only)."""
    state = controller.state
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    state.token_revocations[username] = time.time()
    state.journal.meta_dirty = True
    log.info("tokens revoked", extra={"user": username, "by": who.user})
    controller.changed(schedule=False)
    return {"result": f"tokens of {username} issued until now are revoked"}


@router.get("/metrics", dependencies=[metrics_access()])
async def metrics(controller: Ctl, request: Request) -> Response:
    state = controller.state
    return exposition.render(request, [ControllerCollector(state)])


@router.get("/metrics/{category}", dependencies=[metrics_access()])
async def metrics_category(controller: Ctl, category: str, request: Request) -> Response:
    state = controller.state
    if category not in CATEGORIES:
        raise Refused(f"No metrics {category[:64]!r}: one of {', '.join(CATEGORIES)}", 404)
    return exposition.render(request, [ControllerCollector(state, [category])])

"""The HTTP routes behind sacctmgr, sshare, sprio and scontrol show assoc_mgr: associations and QOS
(administrators change them, everyone reads them), fair-share rows, each pending job's priority
factors, and the limits with what is held and used against them."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from fastapi import APIRouter

from wattsched import limits
from wattsched.accounting.assoc import AssocError, AssocStore
from wattsched.api import AssocRequest
from wattsched.controller import acctdb, acctpolicy, permissions, snapshots
from wattsched.controller.actions import Refused
from wattsched.controller.loop import Controller
from wattsched.controller.routedeps import Ctl
from wattsched.plugins.priority.multifactor import MultifactorPriority
from wattsched.service.httpauth import Who


def _raw(used: dict[str, float]) -> str:
    """Every TRES with its use, as sshare's GrpTRESRaw and TRESRunMins show them."""
    return ",".join(f"{name}={int(used.get(name, 0))}" for name in limits.TRES if name != "power")


def _row(row: Any) -> dict[str, Any]:
    data = {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name != "children"}
    # JSON has no infinity: an unused association's LevelFS is shown as Slurm does, "inf"
    return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in data.items()}


router = APIRouter()


def accounting(controller: Controller) -> AssocStore:
    """The associations in the accounting database (503 without one)."""
    return acctdb.store(controller.accounting).assocs(controller.state.config.cluster_name)


@router.post("/v1/associations")
async def change_associations(controller: Ctl, req: AssocRequest, who: Who) -> dict[str, Any]:
    state = controller.state
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    store = accounting(controller)
    try:
        await acctdb.call(store.apply, req, time.time())
    except AssocError as exc:
        raise Refused(str(exc), 409) from exc
    if controller.fairshare is not None:
        await controller.fairshare.refresh()
    return {"done": req.names}


@router.get("/v1/associations")
async def associations(controller: Ctl, who: Who) -> dict[str, Any]:
    state, store = controller.state, accounting(controller)
    listing = await acctdb.call(store.listing)
    listing["associations"], listing["accounts"], listing["users"] = permissions.private_accounts(
        state, who, listing["associations"], listing["accounts"], listing["users"])
    return {"time": time.time(), **listing}


@router.get("/v1/assoc_mgr")
async def assoc_mgr(controller: Ctl, who: Who) -> dict[str, Any]:
    """The limits and what is held and used against them (scontrol show assoc_mgr)."""
    state = controller.state
    accounting(controller)
    return acctpolicy.manager_view(state, time.time())


@router.get("/v1/shares")
async def shares(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    accounting(controller)
    found = state.shares
    rows = [_row(r) for r in found.rows]
    if found.qos:  # sshare's budget columns: GrpTRESMins, GrpTRESRaw and TRESRunMins
        by_key = {(a["account"], a["user"]): a for a in acctpolicy.manager_view(state, time.time())["associations"]}
        for row in rows:
            assoc = by_key.get((row["account"], row["user"]))
            if assoc is not None:
                use = assoc["usage"]
                row["grp_tres_mins"] = limits.format_tres(assoc["limits"].get("grp_tres_mins", {}))
                row["grp_tres_raw"] = _raw(use["tres_mins"])
                row["tres_run_mins"] = _raw(use["tres_run_mins"])
    return {"time": time.time(), "computed_at": found.computed_at,
            "rows": permissions.private_rows(state, who, rows, "usage")}  # PrivateData=usage: one's own


@router.get("/v1/priority")
async def priority(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    plugin = state.plugins.priority
    if not isinstance(plugin, MultifactorPriority):
        raise Refused(f"You are not running a supported priority plugin ({state.config.priority_type}). "
                      "Only 'priority/multifactor' is supported.", 400)
    now = time.time()
    factors = plugin.breakdown(snapshots.snapshot(state, now, backfill_due=False))
    if not permissions.sees_all(state, who, "jobs"):  # PrivateData=jobs: one's own
        factors = {job_id: f for job_id, f in factors.items() if state.jobs[job_id].uid == who.uid}
    return {"time": now, "weights": dataclasses.asdict(plugin.weights),
            "jobs": [dataclasses.asdict(f) for f in factors.values()]}

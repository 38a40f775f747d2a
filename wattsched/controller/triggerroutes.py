"""The triggers' routes of the controller's API (v1): strigger --set, --get and --clear."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from wattsched.api import INT32, TriggerSpec
from wattsched.controller import triggerctl
from wattsched.controller.actions import Refused
from wattsched.controller.jobs import primary_group
from wattsched.controller.routedeps import Ctl
from wattsched.service.httpauth import Who

router = APIRouter()


@router.get("/v1/triggers")
async def get_triggers(controller: Ctl, who: Who) -> dict[str, Any]:
    return {"triggers": triggerctl.listing(controller.state)}


@router.post("/v1/triggers")
async def set_trigger(controller: Ctl, spec: TriggerSpec, who: Who) -> dict[str, Any]:
    triggerctl.may_set(who)
    triggerctl.room(controller.state, who)  # before any work for the request
    gid, _ = primary_group(who.uid)
    # the program is looked at by the setter, never by root: a process of the setter's tests it
    allowed = await asyncio.get_running_loop().run_in_executor(
        None, triggerctl.check_program, spec.program, who.uid, gid, who.user)
    if not allowed:
        raise Refused("Access/permission denied", 403)
    trig = triggerctl.add(controller.state, spec, who, gid)
    controller.changed(schedule=False)
    return {"trig_id": trig.trig_id}


@router.delete("/v1/triggers")
async def clear_triggers(controller: Ctl, who: Who, trig_id: Annotated[int, Query(ge=0, le=INT32)] = 0,
                         job_id: Annotated[int, Query(ge=0, le=INT32)] = 0,
                         uid: Annotated[int | None, Query(ge=0, le=2**32 - 1)] = None) -> dict[str, Any]:
    cleared = triggerctl.clear(controller.state, who, trig_id, job_id, uid)
    controller.changed(schedule=False)
    return {"cleared": cleared}

"""The reservations' routes of the controller's API (v1): scontrol show, create, update and delete
reservation (administrators change them, everyone reads them)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from wattsched.api import ReservationSpec
from wattsched.controller import reservations as reservations_mod
from wattsched.controller import resvcontrol
from wattsched.controller.routedeps import Ctl
from wattsched.service.httpauth import Who

router = APIRouter()


@router.get("/v1/reservations")
async def reservations(controller: Ctl, who: Who) -> dict[str, Any]:
    state = controller.state
    now = time.time()
    return {"time": now, "reservations": [reservations_mod.show(r, state.nodes, now)
                                          for r in sorted(state.resv.by_name.values(), key=lambda r: r.name)]}


@router.post("/v1/reservations")
async def create_reservation(controller: Ctl, spec: ReservationSpec, who: Who) -> dict[str, Any]:
    state = controller.state
    now = time.time()
    resv = resvcontrol.create(state, spec, who, now)
    controller.changed()
    return reservations_mod.show(resv, state.nodes, now)


@router.patch("/v1/reservations/{name}")
async def update_reservation(controller: Ctl, name: str, spec: ReservationSpec, who: Who) -> dict[str, Any]:
    state = controller.state
    now = time.time()
    resv = resvcontrol.update(state, name, spec, who, now)
    controller.changed()
    return reservations_mod.show(resv, state.nodes, now)


@router.delete("/v1/reservations/{name}")
async def delete_reservation(controller: Ctl, name: str, who: Who) -> dict[str, Any]:
    state = controller.state
    resvcontrol.delete(state, name, who)
    controller.changed()
    return {"deleted": name}

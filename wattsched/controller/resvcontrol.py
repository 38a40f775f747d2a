"""Reservations as administrators ask for them: create, update and delete through the
reservation book, journalled for the state store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wattsched.api import ReservationSpec
from wattsched.auth import Identity
from wattsched.controller import permissions, snapshots
from wattsched.controller.actions import Refused
from wattsched.controller.reservations import ReservationError
from wattsched.model import Reservation

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


def call(state: ClusterState, who: Identity, call: Callable[[], Reservation]) -> Reservation:
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    try:
        resv = call()
    except ReservationError as exc:
        raise Refused(str(exc)) from exc
    state.journal.resv_dirty.append(resv)
    state.journal.meta_dirty = True
    return resv


def create(state: ClusterState, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
    default = state.config.default_partition()
    return call(state, who, lambda: state.resv.create(
        spec, who.user, now, state.nodes, snapshots.partition_snaps(state), default.name if default else "",
        state.jobs.values()))


def update(state: ClusterState, name: str, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
    default = state.config.default_partition()
    return call(state, who, lambda: state.resv.update(
        name, spec, now, state.nodes, snapshots.partition_snaps(state), default.name if default else "",
        state.jobs.values()))


def delete(state: ClusterState, name: str, who: Identity) -> Reservation:
    return call(state, who, lambda: state.resv.delete(name, state.jobs.values()))


"""The power cap as it is set: by an administrator (``scontrol update powercap=``, the REST API),
now or ahead as steps of its schedule (``powercap=VALUE@START``, ``scontrol delete
powercapstep=``), and by the PowerCapSchedule file; the schedule carried forward as steps come
due, and the cap in force at a time. Meeting a lowered cap is controller.capcontrol's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wattsched import capschedule
from wattsched.auth import Identity
from wattsched.capschedule import CapScheduleError, CapStep
from wattsched.config import Config, ConfigError
from wattsched.controller import permissions, snapshots
from wattsched.controller.actions import Refused

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")


def set_power_cap(state: ClusterState, value: str, who: Identity) -> None:
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    try:
        watts, share = capschedule.parse_value(value)
    except CapScheduleError as exc:
        raise Refused(str(exc)) from exc
    state.power_cap = watts if share is None else share * sum(n.max for n in snapshots.node_power(state).values())
    state.journal.meta_dirty = True


def add_cap_step(state: ClusterState, pairs: dict[str, str], who: Identity, now: float) -> CapStep:
    """``scontrol update powercap=VALUE@START [EndTime=|Duration=] [Flags=]``: a step of the schedule."""
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    if len(state.cap_steps) >= capschedule.MAX_STEPS:
        raise Refused(f"The power cap schedule holds {capschedule.MAX_STEPS} steps already")
    try:
        step = capschedule.parse_request(pairs, str(state.next_cap_step), now)
    except CapScheduleError as exc:
        raise Refused(str(exc)) from exc
    state.next_cap_step += 1
    state.cap_steps.append(step)
    state.journal.meta_dirty = True
    log.info("power cap step", extra={"step": step.step_id, "cap": step.text, "start": step.start, "end": step.end})
    roll_schedule(state, now)
    return step


def delete_cap_step(state: ClusterState, step_id: str, who: Identity) -> None:
    """``scontrol delete powercapstep=ID``."""
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    if any(s.step_id == step_id for s in state.cap_file_steps):
        raise Refused(f"PowerCapStep {step_id} is a line of PowerCapSchedule: edit that file and reconfigure")
    if not any(s.step_id == step_id for s in state.cap_steps):
        raise Refused(f"PowerCapStep {step_id} not found", 404)
    state.cap_steps = [s for s in state.cap_steps if s.step_id != step_id]
    state.journal.meta_dirty = True


def read_schedule_file(config: Config, now: float) -> list[CapStep]:
    """PowerCapSchedule's steps (none without the key)."""
    if not config.power_cap_schedule:
        return []
    try:
        return capschedule.read_file(config.power_cap_schedule, now)
    except CapScheduleError as exc:
        raise ConfigError(config.power_cap_schedule, 0, "PowerCapSchedule", str(exc)) from exc


def roll_schedule(state: ClusterState, now: float) -> None:
    """Carry out the open steps whose time has come and drop the windows that are over."""
    if not (state.cap_steps or state.cap_file_steps):
        return
    max_watts = sum(n.max for n in snapshots.node_power(state).values())
    steps = [*state.cap_steps, *state.cap_file_steps]
    cap, left = capschedule.due(state.power_cap, steps, now, max_watts)
    if left != steps:
        from_file = {s.step_id for s in state.cap_file_steps}
        state.cap_steps = [s for s in left if s.step_id not in from_file]
        state.cap_file_steps = [s for s in left if s.step_id in from_file]
        state.journal.meta_dirty = True
    if cap != state.power_cap:
        log.info("power cap", extra={"cap": cap, "from": "schedule"})
        state.power_cap = cap
        state.journal.meta_dirty = True


def cap_in_force(state: ClusterState, now: float) -> float | None:
    """The cap the schedule and the administrator set for ``now`` (None: capping off)."""
    snap = snapshots.power_snap(state, now)
    return None if snap is None else snap.cap

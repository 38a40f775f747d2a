"""Power saving and the power cap at the controller: switches that ran their time, the
policies' decisions carried out, SuspendProgram and ResumeProgram failures, scontrol's
power_down/power_up, and the cap set by an administrator, now or ahead (the schedule's steps,
from scontrol, the API or the PowerCapSchedule file).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wattsched import capschedule, powersave, states
from wattsched.auth import Identity
from wattsched.capschedule import CapScheduleError, CapStep
from wattsched.config import Config, ConfigError
from wattsched.controller import jobend, permissions, snapshots, statesave
from wattsched.controller.actions import Action, Refused
from wattsched.controller.powersaving import (
    RESUME_FAILED_REASON,
    RESUME_TIMEOUT_REASON,
    SUSPEND_FAILED_REASON,
    PowerProgram,
)
from wattsched.nodestates import PowerFlag, PowerState

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")
# pending reasons of jobs that no node switching would help start now
_NOT_WAITING_FOR_NODES = frozenset({states.R_DEPENDENCY, states.R_DEP_NEVER, states.R_BEGIN, states.R_HELD_USER,
                                    states.R_HELD_ADMIN, states.R_PART_DOWN, states.R_PART_TIME,
                                    states.R_PART_NODES, states.R_RESERVATION, states.R_RESV_DELETED})


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


def power_tick(state: ClusterState, now: float) -> list[Action]:
    """Finish switches that ran their time, then ask the power-saving policies what to switch."""
    saver = state.power_saving
    assert saver is not None
    actions: list[Action] = []
    saving_w = 0.0
    for node in state.nodes.values():
        if node.power == PowerFlag.POWERED_DOWN:
            saving_w += saver.saving_watts(node)
        # idle time counts from when a node is up and free (Slurm's last_busy is set when a node
        # registers): nodes still unknown at start-up, down or drained are not idle
        if node.alloc_cpus or node.power or saver.node_state(node) == PowerState.DOWN:
            node.idle_since = 0.0
        elif not node.idle_since:
            node.idle_since = now
        verdict = saver.timed_out(node, now)
        if verdict == PowerFlag.POWERED_DOWN:
            node.power = PowerFlag.POWERED_DOWN
            statesave.node_event(state, node, now, PowerFlag.POWERED_DOWN, "")
        elif verdict == RESUME_TIMEOUT_REASON:
            log.warning("node did not resume in time", extra={"node": node.name})
            node.power = PowerFlag.NONE
            actions.extend(jobend.node_down(state, node, RESUME_TIMEOUT_REASON, now))
    saver.accrue(now, saving_w)
    pending_down = [n for n in state.nodes.values() if n.power == PowerFlag.POWER_DOWN and not n.alloc_cpus]
    suspend = [n.name for n in pending_down]
    if saver.policies:
        off, on = saver.decide(saver.snapshot(state.nodes.values(), pending_briefs(state), releases(state),
                                              snapshots.power_snap(state, now), now))
        suspend += off
        actions.extend(resume_nodes(state, on, now, 0))
    actions.extend(suspend_nodes(state, suspend, now))
    return actions


def pending_briefs(state: ClusterState) -> list[powersave.PendingBrief]:
    """Eligible pending jobs in priority order, as whole nodes and time limits."""
    infinite = 365 * 86400.0
    pending = sorted((j for j in state.jobs.values() if j.state == states.PENDING and not j.hold
                      and not j.completing_nodes and j.reason not in _NOT_WAITING_FOR_NODES),
                     key=lambda j: (-j.priority, j.submit_time, j.job_id))
    return [powersave.PendingBrief(j.job_id, max(j.nodes_min, 1),
                                   j.time_limit_min * 60.0 if j.time_limit_min is not None else infinite,
                                   j.expected_start or None, j.reason) for j in pending]


def releases(state: ClusterState) -> list[tuple[float, int]]:
    return [(j.start_time + j.time_limit_min * 60 if j.time_limit_min is not None else float("inf"),
             len(j.alloc_cpus)) for j in state.jobs.values() if j.holds_nodes]


def suspend_nodes(state: ClusterState, names: list[str], now: float) -> list[Action]:
    assert state.power_saving is not None
    for name in names:
        state.power_saving.begin_suspend(state.nodes[name], now)
        statesave.node_event(state, state.nodes[name], now, PowerFlag.POWERING_DOWN, "")
    return [PowerProgram("suspend", names)] if names else []


def resume_nodes(state: ClusterState, names: list[str], now: float, job_id: int) -> list[Action]:
    assert state.power_saving is not None
    for name in names:
        state.power_saving.begin_resume(state.nodes[name], now, job_id)
        statesave.node_event(state, state.nodes[name], now, PowerFlag.POWERING_UP, f"job {job_id}" if job_id else "")
    return [PowerProgram("resume", names)] if names else []


def power_program_failed(state: ClusterState, kind: str, names: list[str], now: float) -> list[Action]:
    """SuspendProgram or ResumeProgram failed on these nodes: a node still being suspended is
    on again; a node still being resumed goes DOWN (its job requeued), as at ResumeTimeout."""
    actions: list[Action] = []
    for name in names:
        node = state.nodes.get(name)
        if node is None:
            continue
        if kind == "suspend" and node.power == PowerFlag.POWERING_DOWN:
            node.power, node.power_since, node.idle_since = PowerFlag.NONE, 0.0, now
            statesave.node_event(state, node, now, "POWERED_UP", SUSPEND_FAILED_REASON)
        elif kind == "resume" and node.power == PowerFlag.POWERING_UP:
            node.power = PowerFlag.NONE
            actions.extend(jobend.node_down(state, node, RESUME_FAILED_REASON, now))
    state.journal.meta_dirty = True
    return actions


def power_command(state: ClusterState, names: list[str], command: str, now: float) -> list[Action]:
    """scontrol update nodename=... state=power_down|power_down_asap|power_up. A busy node is
    marked POWER_DOWN and switched off once idle (Slurm's "!" state)."""
    if command == "power_up":
        asleep = [n for n in names if state.nodes[n].power == PowerFlag.POWERED_DOWN]
        for name in names:
            if state.nodes[name].power == PowerFlag.POWER_DOWN:
                state.nodes[name].power = PowerFlag.NONE
        state.journal.meta_dirty = True
        return resume_nodes(state, asleep, now, 0)
    wrong = [n for n in names if state.nodes[n].power in (PowerFlag.POWERING_UP, PowerFlag.POWERING_DOWN)]
    if wrong:
        way = "up" if state.nodes[wrong[0]].power == PowerFlag.POWERING_UP else "down"
        raise Refused(f"Node {wrong[0]} is already being powered {way}")
    idle = [n for n in names if not state.nodes[n].power and not state.nodes[n].alloc_cpus]
    for name in names:
        if not state.nodes[name].power and state.nodes[name].alloc_cpus:
            state.nodes[name].power = PowerFlag.POWER_DOWN
    state.journal.meta_dirty = True
    return suspend_nodes(state, idle, now)



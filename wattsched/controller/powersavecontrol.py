"""Power saving at the controller: switches that ran their time, the policies' decisions
carried out, SuspendProgram and ResumeProgram failures, scontrol's power_down/power_up (the
programs themselves: controller.powersaving; the cap: controller.capsetting and capcontrol).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wattsched import powersave, states
from wattsched.controller import jobend, snapshots, statesave
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
    # a node marked POWER_DOWN has no idle time of its own (idle_since 0), so the idle policy picks it
    # too once it is free: it is switched once
    actions.extend(suspend_nodes(state, list(dict.fromkeys(suspend)), now))
    return actions


def pending_briefs(state: ClusterState) -> list[powersave.PendingBrief]:
    """Eligible pending jobs in priority order, as whole nodes and time limits."""
    infinite = 365 * 86400.0
    pending = sorted((j for j in state.jobs.values() if j.state == states.PENDING and not j.hold
                      and not j.alloc.completing_nodes and j.reason not in _NOT_WAITING_FOR_NODES),
                     key=lambda j: (-j.priority, j.submit_time, j.job_id))
    return [powersave.PendingBrief(j.job_id, max(j.request.nodes_min, 1),
                                   j.time_limit_min * 60.0 if j.time_limit_min is not None else infinite,
                                   j.expected_start or None, j.reason) for j in pending]


def releases(state: ClusterState) -> list[tuple[float, int]]:
    return [(j.start_time + j.time_limit_min * 60 if j.time_limit_min is not None else float("inf"),
             len(j.alloc.alloc_cpus)) for j in state.jobs.values() if j.holds_nodes]


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



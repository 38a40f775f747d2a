"""Power saving as pure policy: which idle nodes to switch off and which off nodes to switch on,
from a snapshot of the cluster and an explicit ``now``.

The controller (and the simulator) build a :class:`PowerSaveSnap` after each scheduling pass and
call :func:`decide` with the configured policies (PowerSaveType, a comma list of
``power_save/<name>`` plugins) plus Slurm's idle timeout (SuspendTime). The shell then runs
SuspendProgram and ResumeProgram on the answer; it never chooses nodes itself.

A policy is an object with ``decide(snap, memory) -> Decision``: ``memory`` is the policy's
own state from its previous call (a dict it returned; empty at first), which keeps policies
such as the inertial shutdown pure and lets a replay reproduce them exactly.

Nodes given to a policy have one of the states of :mod:`wattsched.switching` seen from the
scheduler: busy, idle, off, switching_on, switching_off or down. Excluded nodes
(SuspendExcNodes, SuspendExcParts) are never switched off by any policy.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from wattsched.capadmission import PowerSnap
from wattsched.nodestates import PowerState


def seen_state(state: PowerState, drained: bool) -> PowerState:
    """A node as power saving sees it, from its power state (wattsched.nodestates.power_state): a
    drained node takes no new job, so it is neither idle (to switch off) nor busy (to come free):
    down, unless a switch is under way or done."""
    return PowerState.DOWN if drained and state in (PowerState.BUSY, PowerState.IDLE) else state


@dataclass(frozen=True, slots=True)
class PsNode:
    name: str
    state: PowerState  # as power saving sees it (seen_state)
    idle_since: float = 0.0  # when it last became idle (or came up)
    excluded: bool = False


@dataclass(frozen=True, slots=True)
class PendingBrief:
    """A pending job as power saving sees it, in priority order: how many whole nodes it needs,
    its time limit, the scheduler's expected start (None: not computed) and its reason."""

    job_id: int
    nodes: int
    walltime_s: float
    expected_start: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PowerSaveSnap:
    now: float
    nodes: tuple[PsNode, ...]
    pending: tuple[PendingBrief, ...] = ()
    releases: tuple[tuple[float, int], ...] = ()  # running jobs: (end by time limit, whole nodes freed)
    power: PowerSnap | None = None
    suspended_last_min: int = 0
    resumed_last_min: int = 0


@dataclass(slots=True)
class Decision:
    suspend: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    memory: dict = field(default_factory=dict)


class PowerSavePolicy(Protocol):
    def decide(self, snap: PowerSaveSnap, memory: Mapping) -> Decision: ...


def switchable_idle(snap: PowerSaveSnap) -> list[PsNode]:
    """Idle nodes a policy may switch off, longest idle first (then by name)."""
    return sorted((n for n in snap.nodes if n.state == PowerState.IDLE and not n.excluded),
                  key=lambda n: (n.idle_since, n.name))


def first_start(snap: PowerSaveSnap) -> float:
    """The estimated start of the first job in the queue: the scheduler's estimate when it made
    one, else when enough nodes are free, counting those that are off as available and running
    jobs as ending at their time limits. Infinity when nothing is queued or it can never start."""
    if not snap.pending:
        return math.inf
    job = snap.pending[0]
    if job.expected_start is not None:
        return max(job.expected_start, snap.now)
    free = sum(1 for n in snap.nodes if n.state in (PowerState.IDLE, PowerState.OFF, PowerState.SWITCHING_ON,
                                                      PowerState.SWITCHING_OFF))
    if free >= job.nodes:
        return snap.now
    for end, count in sorted(snap.releases):
        free += count
        if free >= job.nodes:
            return max(end, snap.now)
    return math.inf


def queue_load(snap: PowerSaveSnap) -> float:
    """Node-seconds queued: the sum over pending jobs of nodes x time limit (Poquet 2017's Load)."""
    return sum(j.nodes * j.walltime_s for j in snap.pending)


def recent(times: collections.deque[float], now: float) -> int:
    """How many of the switch times (oldest first) fall in the last minute; older ones are dropped."""
    while times and now - times[0] >= 60:
        times.popleft()
    return len(times)


def rate_limit(names: list[str], per_minute: int, done_last_min: int) -> list[str]:
    """At most ``per_minute`` switches in any minute (0: unlimited), as SuspendRate/ResumeRate."""
    if per_minute <= 0:
        return names
    return names[:max(0, per_minute - done_last_min)]


def decide(policies: Iterable[tuple[str, PowerSavePolicy]], snap: PowerSaveSnap,
           memories: Mapping[str, Mapping], suspend_rate: int = 0, resume_rate: int = 0
           ) -> tuple[list[str], list[str], dict[str, dict]]:
    """Ask every policy, merge their answers (a node some policy wants on stays on), apply the
    rates; returns (to switch off, to switch on, each policy's memory for its next call)."""
    suspend: dict[str, None] = {}
    resume: dict[str, None] = {}
    memory_out: dict[str, dict] = {}
    for name, policy in policies:
        decision = policy.decide(snap, memories.get(name, {}))
        suspend.update(dict.fromkeys(decision.suspend))
        resume.update(dict.fromkeys(decision.resume))
        memory_out[name] = decision.memory
    states = {n.name: n for n in snap.nodes}
    off = [n for n in suspend if n not in resume and n in states and states[n].state == PowerState.IDLE
           and not states[n].excluded]
    on = [n for n in resume if n in states and states[n].state == PowerState.OFF]
    return (rate_limit(off, suspend_rate, snap.suspended_last_min),
            rate_limit(on, resume_rate, snap.resumed_last_min), memory_out)

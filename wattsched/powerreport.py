"""What power saving saved, from node power events (pure; used by the controller's report and
by the simulator).

Events are (time, node, state, reason) with the states of wattsched.states (POWERING_DOWN,
POWERED_DOWN, POWERING_UP) and POWERED_UP; a POWERING_UP whose reason is ``job N`` woke nodes
for job N. Between POWERING_DOWN and POWERING_UP a node draws its SwitchOffWatts for its
SwitchOffTime, then PowerSaveWatts; from POWERING_UP until POWERED_UP its SwitchOnWatts. An
always-on node would have drawn IdleWatts over the same time (an off node has no work, so
idle is what it would have done). Saved energy is the difference; a job's added waiting time
is the longest power-up among the nodes woken for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wattsched.nodestates import PowerFlag
from wattsched.switching import Switching

POWERED_UP = "POWERED_UP"


@dataclass(frozen=True, slots=True)
class NodeWatts:
    idle: float
    save: float
    switching: Switching


@dataclass(slots=True)
class SavingReport:
    start: float
    end: float
    nodes: int = 0
    switches_off: int = 0
    switches_on: int = 0
    off_s: float = 0.0
    switching_s: float = 0.0
    saved_j: float = 0.0
    off_period_idle_j: float = 0.0  # what the nodes would have drawn idle over those periods
    jobs_delayed: int = 0
    wait_added_s: float = 0.0

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


def saving(events: Iterable[tuple[float, str, str, str]], watts: Mapping[str, NodeWatts], start: float,
           end: float) -> SavingReport:
    report = SavingReport(start, end, nodes=len(watts))
    by_node: dict[str, list[tuple[float, str, str]]] = {}
    for when, node, state, reason in sorted(events):
        if node in watts:
            by_node.setdefault(node, []).append((when, state, reason))
    delays: dict[int, float] = {}
    for node, timeline in by_node.items():
        w = watts[node]
        for index, (when, state, reason) in enumerate(timeline):
            until = timeline[index + 1][0] if index + 1 < len(timeline) else end
            lo, hi = max(when, start), min(until, end)
            if state in (PowerFlag.POWERING_DOWN, PowerFlag.POWERED_DOWN):
                if state == PowerFlag.POWERING_DOWN and start <= when < end:
                    report.switches_off += 1
                switch_end = _switch_began(timeline, index) + w.switching.off_s
                _add(report, w, max(0.0, min(hi, switch_end) - lo), w.switching.off_watts, switching=True)
                _add(report, w, max(0.0, hi - max(lo, switch_end)), w.save, switching=False)
            elif state == PowerFlag.POWERING_UP:
                if start <= when < end:
                    report.switches_on += 1
                _add(report, w, max(0.0, hi - lo), w.switching.on_watts, switching=True)
                if reason.startswith("job "):
                    job = int(reason.split()[1])
                    delays[job] = max(delays.get(job, 0.0), until - when)
    report.jobs_delayed = len(delays)
    report.wait_added_s = sum(delays.values())
    return report


def _switch_began(timeline: list[tuple[float, str, str]], index: int) -> float:
    """When the switch-off that led to the state at ``index`` began."""
    for when, state, _reason in reversed(timeline[:index + 1]):
        if state == PowerFlag.POWERING_DOWN:
            return when
    return timeline[index][0]


def _add(report: SavingReport, w: NodeWatts, seconds: float, drawn: float, switching: bool) -> None:
    if seconds <= 0:
        return
    if switching:
        report.switching_s += seconds
    else:
        report.off_s += seconds
    report.off_period_idle_j += w.idle * seconds
    report.saved_j += (w.idle - drawn) * seconds

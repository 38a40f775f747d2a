"""What a replay comes to: every job's record, the energy by what the nodes were doing, the
power events and the draw against the cap, and the figures a run is judged by (waits, stretch,
bounded slowdown, utilisation, energy), as simulator.report writes them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from wattsched.simulator.records import JobRecord

BOUNDED_SLOWDOWN_TAU_S = 10.0


@dataclass(slots=True)
class Result:
    records: list[JobRecord]
    energy_by_state: dict[str, float]
    switches_on: int
    switches_off: int
    events: int
    passes: int
    wall_s: float
    infeasible: int
    first_submit: float
    last_end: float
    node_count: int
    cpus: int
    power_events: list[tuple[float, str, str, str]]
    pass_times: list[float]  # when the scheduler ran, as the controller's loop would have
    # the draw against the cap in force (the schedule's steps included): the most it was over, and for how long
    over_cap_w: float = 0.0
    over_cap_s: float = 0.0
    peak_w: float = 0.0
    cap_changes: list[tuple[float, float]] = field(default_factory=list)  # (time, cap in watts) as they came
    # the moving budget's orders as they came: (time, node, its limit in watts, None: lifted)
    limit_changes: list[tuple[float, str, float | None]] = field(default_factory=list)

    def summary(self) -> dict[str, float | int]:
        done = [r for r in self.records if r.end >= 0]
        waits = [r.wait for r in done]
        stretch = [r.response / r.runtime for r in done if r.runtime > 0]
        bsld = [max(1.0, r.response / max(r.runtime, BOUNDED_SLOWDOWN_TAU_S)) for r in done]
        makespan = self.last_end - self.first_submit
        busy = sum(r.runtime * sum(r.alloc_cpus.values()) for r in done)
        return {
            "jobs": len(done), "infeasible": self.infeasible, "nodes": self.node_count,
            # held to the end (a limit, such as a used-up energy budget, never let them start)
            "never_started": sum(1 for r in self.records if r.start < 0),
            "preempted": sum(1 for r in self.records if r.preempted == "PREEMPTED"),
            "timeouts": sum(1 for r in self.records if r.timed_out),
            "requeued": sum(r.requeues for r in self.records),
            "suspended": sum(r.suspensions for r in self.records),
            "makespan_s": makespan, "utilization": busy / (makespan * self.cpus) if makespan > 0 else 0.0,
            "energy_j": sum(self.energy_by_state.values()),
            **{f"energy_{k}_j": v for k, v in self.energy_by_state.items()},
            "mean_wait_s": statistics.fmean(waits) if waits else 0.0,
            "median_wait_s": statistics.median(waits) if waits else 0.0,
            "max_wait_s": max(waits, default=0.0),
            "mean_stretch": statistics.fmean(stretch) if stretch else 0.0,
            "mean_bounded_slowdown": statistics.fmean(bsld) if bsld else 0.0,
            "switches_on": self.switches_on, "switches_off": self.switches_off,
            "events": self.events, "passes": self.passes, "wall_s": self.wall_s,
            "peak_w": self.peak_w, "over_cap_w": self.over_cap_w, "over_cap_s": self.over_cap_s,
            "events_per_s": self.events / self.wall_s if self.wall_s > 0 else 0.0,
        }

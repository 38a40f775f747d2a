"""What a pass keeps current beside nodes' CPUs and memory as it starts and reserves jobs: the GPUs
of GPU nodes over time, and the cluster's power under the cap (with the frequency that lets a
--power-fit job fit)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from wattsched import capadmission
from wattsched.capadmission import PowerSnap
from wattsched.nodestates import PowerState
from wattsched.scheduling.records import Allocation, JobRequest, NodeSnap, RunningJob, Snapshot, job_end

if TYPE_CHECKING:
    from wattsched.memos import NodeMemo


class GpuLedger:
    """Free GPUs per GPU node over time during a pass: what is free now, the running jobs' GPUs
    given back at their time limits (when the snapshot brings running jobs), and the holds the
    pass adds (a job started now, a reservation made for later). Jobs without GPUs never look at
    it, and it covers only the nodes that have GPUs, so it costs nothing on a cluster without."""

    def __init__(self, nodes: Iterable[NodeSnap], running: Collection[RunningJob], now: float):
        self.free_now: dict[str, dict[str, int]] = {node.name: dict(node.free_gpus) for node in nodes}
        # (when, +count by type): running jobs' GPUs back (a job past its limit: just after now)
        self.steps: dict[str, list[tuple[float, float, Mapping[str, int]]]] = {}
        for job in running:
            if job.gpus and job.end_time is not None:
                back = max(job.end_time, now + 1)
                for name, kinds in job.gpus.items():
                    if name in self.free_now:
                        self.steps.setdefault(name, []).append((back, math.inf, {k: -c for k, c in kinds.items()}))

    def hold(self, alloc: Allocation, start: float, end: float) -> None:
        """The allocation's GPUs are taken over [start, end)."""
        for name, kinds in alloc.gpus.items():
            if name in self.free_now:
                self.steps.setdefault(name, []).append((start, end, kinds))

    def free(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """Per GPU node, the least free GPUs of each type over [start, end)."""
        result = {}
        for name, now_free in self.free_now.items():
            steps = self.steps.get(name)
            if not steps:
                result[name] = now_free
                continue
            # the level changes only where a step begins or ends: the least is at start or at one of those
            moments = [start, *(t for s, e, _k in steps for t in (s, e) if start < t < end)]
            lowest: dict[str, int] = {}
            for t in moments:
                level = dict(now_free)
                for s, e, kinds in steps:
                    if s <= t < e:
                        for kind, count in kinds.items():  # a release is a negative hold from its time on
                            level[kind] = level.get(kind, 0) - count
                for kind, count in level.items():
                    lowest[kind] = min(lowest.get(kind, count), count)
            result[name] = {kind: max(0, count) for kind, count in lowest.items()}
        return result


def gpu_ledger(snapshot: Snapshot, memo: NodeMemo) -> GpuLedger | None:
    """The pass's GPU ledger, or None on a machine without GPUs."""
    if not memo.with_gpus:
        return None
    return GpuLedger((memo.by_name[n] for n in memo.with_gpus), snapshot.running, snapshot.now)


class PowerMeter:
    """The cluster's current maximum power during a pass, as jobs start and their nodes get busy.

    A job whose nodes all stay busy with other jobs for its whole run adds nothing and always
    passes (the prototype's rule for filling busy nodes); any other job is checked."""

    def __init__(self, snap: PowerSnap, running: Collection[RunningJob] = ()):
        self.snap = snap
        busy, idle = PowerState.BUSY, PowerState.IDLE  # looked up once: every node is summed, every pass
        self.busy = {name for name, state in snap.states.items() if state == busy}
        self.current = float(sum(node.watts(snap.states.get(name, idle)) for name, node in snap.nodes.items()))
        # how long each busy node stays busy (unknown: as long as any job may need it)
        self.busy_until = dict.fromkeys(self.busy, math.inf)
        if running:
            self.busy_until = {}
            for job in running:
                end = math.inf if job.end_time is None else job.end_time
                for name in job.cpus:
                    self.busy_until[name] = max(self.busy_until.get(name, -math.inf), end)
            for name in self.busy - set(self.busy_until):
                self.busy_until[name] = math.inf

    def added(self, alloc: Allocation) -> float:
        """The watts the allocation adds now: its nodes that are not busy yet go to their busy watts
        (MaxWatts, or the watts of the allocation's CPU frequency)."""
        extra = 0.0
        for name in alloc.cpus:
            node = self.snap.nodes.get(name)
            if node is not None and name not in self.busy:
                extra += node.busy_for(alloc.cpu_freq_khz, alloc.node_watts) - \
                    node.watts(self.snap.states.get(name, PowerState.IDLE))
        return extra

    def check(self, job: JobRequest, alloc: Allocation, start: float) -> str | None:
        end = job_end(job, start)
        if all(self.busy_until.get(n, -math.inf) >= end or self.snap.nodes.get(n, _ALWAYS).always_max
               for n in alloc.cpus):
            return None
        return capadmission.admission(self.snap, self.current, self.added(alloc), start, end, job.reservation)

    def commit(self, alloc: Allocation, end: float) -> None:
        self.current += self.added(alloc)
        self.busy.update(alloc.cpus)
        for name in alloc.cpus:
            self.busy_until[name] = max(self.busy_until.get(name, -math.inf), end)


def fit_power(job: JobRequest, alloc: Allocation, snap: PowerSnap,
              check: Callable[[Allocation], str | None]) -> tuple[Allocation, str | None]:
    """The allocation and the power cap's verdict on it. A job its earlier runs predict is counted at
    their watts (PowerCapAdmission=predicted). A --power-fit job that does not fit at full speed,
    on nodes that all declare CpuFreqWatts, gets the highest frequency that fits (never when the
    user pinned --cpu-freq). Under the moving budget (``snap.balancing``) a job without
    --power-fit may start so too, its nodes held by a limit to that frequency's watts rather than
    its clock pinned: the budget raises the limit when it can. (A --power-fit job keeps its clock:
    measured, a workload ends sooner when the jobs that asked for it stay at their slower, thriftier
    clock, leaving the budget's watts to start more jobs; bench/bench_powerbudget.py.)"""
    predicted = capadmission.predicted_node_watts(snap, job.exp_watts, job.nodes_min, job.exclusive)
    if predicted is not None:
        alloc = replace(alloc, node_watts=predicted)
    reason = check(alloc)
    if reason is None or not (job.power_fit or snap.balancing) or job.cpu_freq_pinned:
        return alloc, reason
    tables = [dict(snap.nodes[n].freq_watts) for n in alloc.cpus if n in snap.nodes]
    if not tables or len(tables) < len(alloc.cpus) or not all(tables):
        return alloc, reason
    for khz in sorted(set.intersection(*(set(t) for t in tables)), reverse=True):
        fitted = replace(alloc, cpu_freq_khz=khz, limited=snap.balancing and not job.power_fit)
        if check(fitted) is None:
            return fitted, None
    return alloc, reason


_ALWAYS = capadmission.NodePower(0, 0, 0, 0, always_max=True)

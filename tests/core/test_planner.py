"""The planner under the policies (wattsched.plugins.sched.planner) against its plain oracle: a pass
planned over the fast parts (the node memo's levels for a strict pass, the numpy timeline and the
power plan that looks only where power can rise, for a backfill pass) decides exactly what the same
pass planned over plainplanner's decides, whatever the queue, the running jobs, the reservations,
the power cap, its reservations and schedule, and the backfill parameters."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched import capadmission
from wattsched.confvalues import SchedulerParams
from wattsched.nodestates import PowerState
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, ResvSnap, RunningJob, Snapshot

NOW = 1_000_000.0
MEMORY = 1000


@st.composite
def passes(draw):
    """A pass: nodes partly busy (CPUs and memory) with running jobs that end on time, late or
    never; a queue of jobs of many shapes (node counts, whole nodes, several CPUs a task, memory,
    no time limit); sometimes an advanced reservation, sometimes a power cap."""
    count, cpus = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    free = {n: [cpus, MEMORY] for n in names}
    busy = []
    for job_id in range(1000, 1000 + draw(st.integers(0, 8))):
        held = {}
        for node in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
            if free[node][0]:
                take = (draw(st.integers(1, free[node][0])), draw(st.integers(0, free[node][1])))
                free[node][0] -= take[0]
                free[node][1] -= take[1]
                held[node] = take
        if held:
            end = draw(st.one_of(st.none(), st.integers(-2, 300).map(lambda m: NOW + m * 60.0)))
            busy.append(RunningJob(job_id, {n: c for n, (c, _m) in held.items()},
                                   {n: m for n, (_c, m) in held.items()}, end))
    queue = []
    for job_id in range(1, draw(st.integers(1, 24)) + 1):
        nodes = draw(st.integers(1, count))
        shape = draw(st.sampled_from([{}, {"exclusive": True}, {"cpus_per_task": 2}, {"ntasks_per_node": 1},
                                      {"mem_per_cpu_mb": 150}, {"mem_per_node_mb": 600}]))
        minutes = draw(st.one_of(st.none(), st.integers(1, 240))) if draw(st.integers(0, 9)) == 0 \
            else draw(st.integers(1, 240))
        queue.append(JobRequest(job_id=job_id, user=draw(st.sampled_from(["u", "v"])), partition="p",
                                submit_time=job_id, ntasks=nodes * draw(st.integers(1, cpus)), nodes_min=nodes,
                                time_limit_min=minutes, **shape))
    reservations = {}
    if draw(st.booleans()):
        start = NOW + draw(st.integers(0, 120)) * 60
        reservations["maint"] = ResvSnap("maint", start, start + draw(st.integers(1, 240)) * 60,
                                         frozenset(draw(st.lists(st.sampled_from(names), min_size=1, unique=True))),
                                         users=frozenset({"v"}))
    snapshot = Snapshot(now=NOW, nodes=tuple(NodeSnap(n, cpus, c, MEMORY, m) for n, (c, m) in free.items()),
                        partitions={"p": PartitionSnap("p", tuple(names))}, pending=tuple(queue),
                        running=tuple(busy), reservations=reservations, backfill_due=draw(st.booleans()))
    if draw(st.booleans()):
        snapshot = replace(snapshot, power=draw(power_snaps(names, {n for n in names if free[n][0] < cpus})))
        if draw(st.booleans()):  # some jobs fit under the cap at a lower CPU frequency
            snapshot = replace(snapshot, pending=tuple(replace(j, power_fit=draw(st.booleans())) for j in queue))
    return snapshot


@st.composite
def power_snaps(draw, names: list[str], busy: set[str]):
    """A cap between the draw now and every node busy, nodes that declare their watts at lower CPU
    frequencies, power reservations, and the schedule's dips and raises of the cap ahead."""
    freq_watts = ((2_400_000, 300), (2_000_000, 240), (1_600_000, 180)) if draw(st.booleans()) else ()
    watts = {n: capadmission.NodePower(100, 300, 100, 300, freq_watts=freq_watts) for n in names}
    states = {n: PowerState.BUSY if n in busy else PowerState.IDLE for n in names}
    current = sum(watts[n].watts(states[n]) for n in names)
    cap = float(draw(st.integers(int(current) - 100, 300 * len(names))))
    resvs = tuple(capadmission.PowerResv(f"r{i}", NOW + draw(st.integers(0, 120)) * 60,
                                         NOW + draw(st.integers(121, 400)) * 60, draw(st.integers(50, 400)))
                  for i in range(draw(st.integers(0, 2))))
    ahead = tuple((NOW + t * 60, draw(st.sampled_from([math.inf, float(draw(st.integers(100, 300 * len(names))))])))
                  for t in sorted(draw(st.sets(st.integers(1, 400), max_size=3))))
    return capadmission.PowerSnap(watts, states, cap, resvs, ahead)


@st.composite
def backfill_params(draw):
    return SchedulerParams(bf_reservations=draw(st.sampled_from([0, 1, 2])),
                           bf_candidate=draw(st.sampled_from(["first", "first", "shortest", "most_cpus"])),
                           bf_resolution_s=draw(st.sampled_from([1, 60])),
                           bf_power=draw(st.sampled_from(["plan", "admit"])),
                           bf_max_job_test=draw(st.sampled_from([500, 5])))


def decided(snapshot: Snapshot, scheduler) -> tuple:
    decisions = schedule(snapshot, BasicPriority(), scheduler, ConsTresSelect())
    return decisions.starts, decisions.reasons, decisions.expected_start


@settings(max_examples=400, deadline=None)
@given(passes(), backfill_params(), st.sampled_from([1, 16]))
def test_a_backfill_pass_over_the_fast_timeline_decides_as_over_the_plain_one(snapshot, params, bulk_from) -> None:
    """Starts, reasons and planned starts alike: the timeline's caches, the from-now shortcuts, the
    bulk first-fit tail, the power plan's few moments and (between two backfill passes) the strict
    pass's memo levels and the select plugin's index change nothing of what is decided."""
    fast = decided(snapshot, BackfillScheduler(params, bulk_from=bulk_from))
    plain = decided(snapshot, BackfillScheduler(params, bulk_from=bulk_from, plain=True))
    assert fast == plain


@settings(max_examples=200, deadline=None)
@given(passes(), st.sampled_from([3, 100]))
def test_a_strict_pass_over_the_node_memo_decides_as_over_the_plain_timeline(snapshot, depth) -> None:
    params = SchedulerParams(default_queue_depth=depth)
    assert decided(snapshot, BuiltinScheduler(params)) == decided(snapshot, BuiltinScheduler(params, plain=True))


def test_a_job_without_a_time_limit_holds_its_nodes_forever_in_both() -> None:
    """A hand-checked case, over both timelines: one node half busy for an hour, a job without a
    limit at the head of the queue (planned at that hour, waiting on Resources) and a short job
    behind it that ends before then, so it starts now."""
    node = NodeSnap("n01", 4, 2, MEMORY, MEMORY)
    running = RunningJob(1000, {"n01": 2}, {"n01": 0}, NOW + 3600)
    queue = (JobRequest(job_id=1, user="u", partition="p", submit_time=1, ntasks=4, time_limit_min=None),
             JobRequest(job_id=2, user="u", partition="p", submit_time=2, ntasks=2, time_limit_min=30))
    snapshot = Snapshot(now=NOW, nodes=(node,), partitions={"p": PartitionSnap("p", ("n01",))}, pending=queue,
                        running=(running,))
    for plain in (False, True):
        starts, reasons, expected = decided(snapshot, BackfillScheduler(plain=plain))
        assert [job_id for job_id, _alloc in starts] == [2]
        assert expected == {1: NOW + 3600}
        assert reasons[1] == "Resources"

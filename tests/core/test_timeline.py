"""The backfill planner's timeline (wattsched.plugins.sched.timeline) against its plain oracle
(plainplanner: a walk through each node's steps in time order): the least free resources over a
window, the times resources are given back, the machine's free CPUs over time, and the running
jobs' steps kept from pass to pass."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.memos import NodeMemo
from wattsched.plugins.sched import timeline
from wattsched.plugins.sched.plainplanner import PlainLevels
from wattsched.plugins.sched.timeline import Profile, ReleaseMemo
from wattsched.scheduling.records import Allocation, NodeSnap, PartitionSnap, RunningJob, Snapshot

NOW = 1_000_000.0


@st.composite
def profiles(draw):
    """A profile from running jobs (some past their limit, some without one) and holds added in a
    random order: reservations later on, jobs started now, some never given back."""
    count = draw(st.integers(1, 5))
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    busy = []
    for job_id in range(100, 100 + draw(st.integers(0, 8))):
        nodes = draw(st.lists(st.sampled_from(names), min_size=1, max_size=count, unique=True))
        end = draw(st.one_of(st.none(), st.integers(-2, 20).map(lambda k: NOW + k * 60.0)))
        busy.append(RunningJob(job_id, {n: draw(st.integers(1, 4)) for n in nodes},
                               {n: draw(st.integers(0, 300)) for n in nodes}, end))
    snapshot = Snapshot(now=NOW, nodes=tuple(NodeSnap(n, 64, draw(st.integers(0, 8)), 4000, draw(st.integers(0, 900)))
                                             for n in names),
                        partitions={"p": PartitionSnap("p", tuple(names))}, pending=(), running=tuple(busy))
    holds = []
    for _ in range(draw(st.integers(0, 8))):
        nodes = draw(st.lists(st.sampled_from(names), min_size=1, max_size=count, unique=True))
        start = NOW + draw(st.sampled_from([0, 0, 1, 5, 7, 12])) * 60.0
        length = draw(st.one_of(st.just(math.inf), st.integers(1, 15).map(lambda k: k * 60.0)))
        end = start + length
        holds.append((Allocation(cpus={n: draw(st.integers(1, 4)) for n in nodes},
                                 tasks=dict.fromkeys(nodes, 1), mem_mb={n: draw(st.integers(0, 200)) for n in nodes}),
                      start, end))
    windows = draw(st.lists(st.tuples(st.sampled_from([0, 0, 1, 3, 5, 7, 12]), st.integers(1, 20)), min_size=1,
                            max_size=6))
    return snapshot, holds, [(NOW + a * 60.0, NOW + (a + b) * 60.0) for a, b in windows]


@settings(max_examples=300, deadline=None)
@given(profiles(), st.sampled_from([1, 60]), st.sampled_from([0, timeline._WALKED]))
def test_windows_are_the_least_free_resources_over_their_time(case, resolution, walked) -> None:
    """Against PlainLevels, a walk through every node's steps in time order (releases before holds at one time,
    holds in the order added): what is free at the window's start, lowered by every level reached
    strictly inside it, never below zero, and the CPUs free so in all; asked after every hold, as a
    pass asks. total_from_now both ways: walked in Python (a few nodes taken from) and in numpy."""
    default, timeline._WALKED = timeline._WALKED, walked
    try:
        check_windows(*case, resolution)
    finally:
        timeline._WALKED = default


def check_windows(snapshot: Snapshot, holds: list, windows: list[tuple[float, float]], resolution: float) -> None:
    profile, plain = built(snapshot, [], resolution)
    for k, (alloc, start, end) in enumerate([(None, 0, 0), *holds]):
        if alloc is not None:
            profile.hold(alloc, start, end)
            plain.hold(alloc, start, end)
        # and the windows from now that end just where a hold takes (the boundary: not inside)
        for start, end in [*windows, *((NOW, start) for _alloc, start, _end in holds if start > NOW)]:
            window, usable, total = profile.during(start, end)
            least, plain_usable, plain_total = plain.during(start, end)
            for node in profile.names:
                assert window[node] == least[node], (k, node, start, end)
            assert set(usable) == set(plain_usable)
            assert total == plain_total, (start, end)
            if start == NOW:  # what a first-fit candidate is refused on before any window is built
                assert profile.total_from_now(end) == total, end


def built(snapshot: Snapshot, holds: list, resolution: float) -> tuple[Profile, PlainLevels]:
    """The timeline and its plain oracle, from the snapshot's running jobs and the holds."""
    nodes = NodeMemo()
    nodes.refresh(snapshot)
    profile = Profile(NOW, nodes)
    profile.releases(snapshot.running, resolution, ReleaseMemo())
    plain = PlainLevels(snapshot, nodes, resolution)
    for alloc, start, end in holds:
        profile.hold(alloc, start, end)
        plain.hold(alloc, start, end)
    return profile, plain


@settings(max_examples=200, deadline=None)
@given(profiles(), st.sampled_from([1, 60]), st.integers(0, 30), st.integers(1, 30))
def test_release_times_are_the_rounded_times_something_is_given_back(case, resolution, after, span) -> None:
    snapshot, holds, _windows = case
    profile, plain = built(snapshot, holds, resolution)
    start, until = NOW + after * 60.0, NOW + (after + span) * 60.0
    assert profile.release_times(start, until, resolution) == plain.release_times(start, until, resolution)


@settings(max_examples=200, deadline=None)
@given(profiles(), st.sampled_from([1, 60]), st.lists(st.integers(0, 40), min_size=1, max_size=8))
def test_the_machines_free_cpus_over_time_sum_every_step_so_far(case, resolution, minutes) -> None:
    snapshot, holds, _windows = case
    profile, plain = built(snapshot, holds, resolution)
    times = sorted(NOW + m * 60.0 for m in minutes)
    assert profile.total_free_at(times) == plain.total_free_at(times)


@settings(max_examples=100, deadline=None)
@given(profiles(), st.data())
def test_the_release_memo_kept_across_passes_gives_the_steps_of_a_fresh_one(case, data) -> None:
    """A memo carried from a pass whose running jobs were a different set (some ended, others
    started) leaves the next profile as one built from scratch."""
    snapshot, _holds, windows = case
    names = [n.name for n in snapshot.nodes]
    kept_on = data.draw(st.lists(st.sampled_from(snapshot.running), unique=True)) if snapshot.running else []
    ended = [RunningJob(job_id, {n: 2 for n in names}, dict.fromkeys(names, 50), NOW + k * 60.0)
             for k, job_id in enumerate(range(900, 900 + data.draw(st.integers(0, 3))), 1)]
    before = [*kept_on, *ended]
    nodes = NodeMemo()
    nodes.refresh(snapshot)
    memo = Profile(NOW, nodes).releases(tuple(before), 60, ReleaseMemo())
    kept, fresh = Profile(NOW, nodes), Profile(NOW, nodes)
    kept.releases(snapshot.running, 60, memo)
    fresh.releases(snapshot.running, 60, ReleaseMemo())
    for start, end in windows:
        ours, theirs = kept.window(start, end), fresh.window(start, end)
        assert [ours[n] for n in names] == [theirs[n] for n in names] and ours.total == theirs.total
    assert kept.release_times(NOW, NOW + 3600, 60) == fresh.release_times(NOW, NOW + 3600, 60)

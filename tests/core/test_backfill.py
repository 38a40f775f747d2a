"""sched/backfill and advanced reservations in the pure core: hand-checked cases and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched import states
from wattsched.config import ConfigError
from wattsched.confvalues import SchedulerParams, parse_scheduler_params
from wattsched.nodestates import PowerState
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched import backfill, planner
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, ResvSnap, RunningJob, Snapshot

NOW = 1_000_000.0
HOUR = 3600.0


def cluster(count: int, cpus: int, running: list[RunningJob], now: float = NOW,
            pending: list[JobRequest] = (), reservations: list[ResvSnap] = ()) -> Snapshot:
    """A snapshot whose free CPUs are what the running jobs leave."""
    used: dict[str, int] = {}
    for r in running:
        for node, n in r.cpus.items():
            used[node] = used.get(node, 0) + n
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    node_snaps = tuple(NodeSnap(n, cpus, cpus - used.get(n, 0), 1000, 1000) for n in names)
    return Snapshot(now=now, nodes=node_snaps, partitions={"p": PartitionSnap("p", tuple(names))},
                    pending=tuple(pending), running=tuple(running),
                    reservations={r.name: r for r in reservations})


def job(job_id: int, ntasks: int, minutes: int | None, **kw) -> JobRequest:
    return JobRequest(job_id=job_id, user=kw.pop("user", "u"), partition="p", submit_time=job_id, ntasks=ntasks,
                      time_limit_min=minutes, **kw)


def running(job_id: int, cpus: dict[str, int], end: float | None) -> RunningJob:
    return RunningJob(job_id, cpus, dict.fromkeys(cpus, 0), end)


def plan(snapshot: Snapshot, scheduler=None):
    return schedule(snapshot, BasicPriority(), scheduler or BackfillScheduler(), ConsTresSelect())


# --- the hand-checked example ----------------------------------------------------------------------

def test_three_job_queue_where_only_backfill_runs_the_short_job_ahead() -> None:
    """4 nodes x 4 CPUs; a running job holds n01-n03 for one more hour.

    Job 1 wants all 16 CPUs for an hour: it must wait for that hour and gets a reservation
    at NOW+1h. Job 2 (4 CPUs, 2 h) would fit on n04 now but would still hold it at NOW+1h:
    starting it would delay job 1, so it waits. Job 3 (4 CPUs, 30 min) fits on n04 and ends
    before NOW+1h: backfill starts it. Strict priority order starts nothing."""
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    queue = [job(1, 16, 60), job(2, 4, 120), job(3, 4, 30)]

    strict = plan(cluster(4, 4, busy, pending=queue), BuiltinScheduler())
    assert strict.starts == []
    assert strict.reasons == {1: states.R_RESOURCES, 2: states.R_PRIORITY, 3: states.R_PRIORITY}

    easy = plan(cluster(4, 4, busy, pending=queue))
    assert [(j, dict(a.cpus)) for j, a in easy.starts] == [(3, {"n04": 4})]
    assert easy.expected_start == {1: NOW + HOUR}
    assert easy.reasons == {1: states.R_RESOURCES, 2: states.R_PRIORITY}
    assert easy.backfilled == 1


def test_conservative_backfilling_reserves_for_every_blocked_job() -> None:
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    queue = [job(1, 16, 60), job(2, 4, 120), job(3, 4, 90)]
    easy = plan(cluster(4, 4, busy, pending=queue))
    assert [j for j, _ in easy.starts] == []  # job 3 would hold n04 past NOW+1h
    conservative = plan(cluster(4, 4, busy, pending=queue), BackfillScheduler(SchedulerParams(bf_reservations=0)))
    assert conservative.expected_start == {1: NOW + HOUR, 2: NOW + 2 * HOUR, 3: NOW + 2 * HOUR}


def test_best_fit_candidates_bff_and_bbf() -> None:
    """n04 is free for one hour: of three candidates that fit, first fit takes the first in
    priority order, best fit by shortest limit or most CPUs takes another."""
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    queue = [job(1, 16, 60), job(2, 2, 50), job(3, 1, 10), job(4, 4, 40)]
    first = plan(cluster(4, 4, busy, pending=queue))
    assert [j for j, _ in first.starts] == [2, 3]
    shortest = plan(cluster(4, 4, busy, pending=queue), BackfillScheduler(SchedulerParams(bf_candidate="shortest")))
    assert [j for j, _ in shortest.starts] == [3, 2]
    most = plan(cluster(4, 4, busy, pending=queue), BackfillScheduler(SchedulerParams(bf_candidate="most_cpus")))
    assert [j for j, _ in most.starts] == [4]


def test_jobs_without_limit_never_backfill_ahead_of_a_reservation() -> None:
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    decisions = plan(cluster(4, 4, busy, pending=[job(1, 16, 60), job(2, 1, None)]))
    assert decisions.starts == []
    assert decisions.reasons[2] == states.R_PRIORITY


def test_unlimited_running_job_leaves_the_blocked_job_without_expected_start() -> None:
    busy = [running(99, {"n01": 4}, None)]
    decisions = plan(cluster(2, 4, busy, pending=[job(1, 8, 60), job(2, 4, 10)]))
    assert decisions.expected_start == {}
    assert [j for j, _ in decisions.starts] == [2]  # nothing to delay: job 1 can never start


def test_bf_max_job_test_and_per_user_limit() -> None:
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    queue = [job(1, 16, 60), job(2, 1, 10, user="a"), job(3, 1, 10, user="a"), job(4, 1, 10, user="b")]
    limited = plan(cluster(4, 4, busy, pending=queue), BackfillScheduler(SchedulerParams(bf_max_job_test=2)))
    assert [j for j, _ in limited.starts] == [2]
    per_user = plan(cluster(4, 4, busy, pending=queue), BackfillScheduler(SchedulerParams(bf_max_job_user=1)))
    assert [j for j, _ in per_user.starts] == [2, 4]


def test_between_backfill_passes_the_scheduler_is_strict() -> None:
    busy = [running(99, {"n01": 4, "n02": 4, "n03": 4}, NOW + HOUR)]
    snapshot = cluster(4, 4, busy, pending=[job(1, 16, 60), job(3, 4, 30)])
    from dataclasses import replace

    decisions = plan(replace(snapshot, backfill_due=False))
    assert decisions.starts == [] and decisions.expected_start == {}


def test_builtin_default_queue_depth() -> None:
    queue = [job(i, 1, 10) for i in range(1, 11)]
    decisions = plan(cluster(4, 4, [], pending=queue), BuiltinScheduler(SchedulerParams(default_queue_depth=3)))
    assert [j for j, _ in decisions.starts] == [1, 2, 3]


# --- advanced reservations ---------------------------------------------------------------------------

def test_reserved_nodes_are_kept_for_members_within_the_window() -> None:
    resv = ResvSnap("maint", NOW + HOUR, NOW + 2 * HOUR, frozenset({"n01", "n02"}), frozenset({"alice"}))
    queue = [job(1, 8, 120), job(2, 4, 30), job(3, 4, 30, user="alice", reservation="maint")]
    decisions = plan(cluster(4, 4, [], pending=queue, reservations=[resv]))
    started = {j: set(a.cpus) for j, a in decisions.starts}
    # job 1 (2 h) may not touch n01/n02 and takes n03-n04; job 2 ends before the window opens
    assert started == {1: {"n03", "n04"}, 2: {"n01"}}
    assert decisions.reasons[3] == states.R_RESERVATION  # not started yet


def test_active_reservation_members_run_on_its_nodes_only() -> None:
    resv = ResvSnap("r", NOW - 10, NOW + HOUR, frozenset({"n03", "n04"}), frozenset({"alice"}))
    queue = [job(1, 4, 30, user="alice", reservation="r"), job(2, 4, 30), job(3, 4, 90, user="alice",
                                                                              reservation="r")]
    for scheduler in (BuiltinScheduler(), BackfillScheduler()):
        decisions = plan(cluster(4, 4, [], pending=queue, reservations=[resv]), scheduler)
        started = {j: set(a.cpus) for j, a in decisions.starts}
        assert started[1] == {"n03"} and started[2] == {"n01"}
        assert 3 not in started  # it would overrun the reservation's end


def test_flex_reservation_lets_members_start_early_and_overrun() -> None:
    resv = ResvSnap("r", NOW + HOUR, NOW + 2 * HOUR, frozenset({"n01"}), frozenset({"alice"}),
                    flags=frozenset({"FLEX"}))
    decisions = plan(cluster(2, 4, [], pending=[job(1, 4, 600, user="alice", reservation="r")], reservations=[resv]))
    assert [j for j, _ in decisions.starts] == [1]


def test_pending_reasons_for_reservations() -> None:
    maint = ResvSnap("m", NOW - 10, NOW + HOUR, frozenset({"n01", "n02"}), frozenset({"root"}),
                     flags=frozenset({"MAINT"}))
    queue = [job(1, 8, 30), job(2, 1, 30, reservation="gone")]
    decisions = plan(cluster(2, 4, [], pending=queue, reservations=[maint]), BuiltinScheduler())
    assert decisions.reasons == {1: states.R_MAINT, 2: states.R_RESV_DELETED}
    named = plan(cluster(2, 4, [], pending=[job(3, 1, 30, req_nodes=("n01",))], reservations=[maint]))
    assert named.reasons == {3: states.R_NODE_NOT_AVAIL}


# --- SchedulerParameters -----------------------------------------------------------------------------

def test_scheduler_parameters_parse() -> None:
    params = parse_scheduler_params("bf_interval=5,bf_window=60,bf_resolution=30,bf_max_job_test=1000,"
                                    "bf_max_job_user=10,bf_continue,default_queue_depth=50,"
                                    "bf_reservations=unlimited,bf_candidate=shortest")
    assert params == SchedulerParams(5, 60, 30, 1000, 10, True, 50, 0, "shortest")
    for bad in ("bf_interval=x", "bf_candidate=random", "bogus=1", "bf_reservations=0", "bf_resolution=0"):
        with pytest.raises(ValueError):
            parse_scheduler_params(bad)


def test_bad_scheduler_parameters_name_file_and_line(tmp_path) -> None:
    from wattsched import config

    path = tmp_path / "bad.conf"
    path.write_text("ClusterName=c\nSchedulerParameters=bf_window=abc\nNodeName=n1 CPUs=1\n"
                    "PartitionName=p Nodes=n1\n")
    with pytest.raises(ConfigError, match=r"bad.conf:2: SchedulerParameters"):
        config.load(str(path))


# --- properties ----------------------------------------------------------------------------------------

@st.composite
def workloads(draw):
    count = draw(st.integers(2, 6))
    cpus = draw(st.integers(1, 8))
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    free = dict.fromkeys(names, cpus)
    busy = []
    for job_id in range(1000, 1000 + draw(st.integers(0, 6))):
        node = draw(st.sampled_from(names))
        if free[node]:
            take = draw(st.integers(1, free[node]))
            free[node] -= take
            busy.append(running(job_id, {node: take}, NOW + draw(st.integers(1, 300)) * 60))
    queue = [job(i, draw(st.integers(1, count * cpus)), draw(st.integers(1, 240)))
             for i in range(1, draw(st.integers(1, 12)) + 1)]
    return count, cpus, busy, queue


def _over_allocated(snapshot: Snapshot, decisions) -> bool:
    free = {n.name: n.free_cpus for n in snapshot.nodes}
    for _job, alloc in decisions.starts:
        for node, n in alloc.cpus.items():
            free[node] -= n
    return any(v < 0 for v in free.values())


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from([1, 0]), st.sampled_from(["first", "shortest", "most_cpus"]))
def test_backfill_never_over_allocates(work, reservations, candidate) -> None:
    count, cpus, busy, queue = work
    snapshot = cluster(count, cpus, busy, pending=queue)
    decisions = plan(snapshot, BackfillScheduler(SchedulerParams(bf_reservations=reservations,
                                                                 bf_candidate=candidate)))
    assert not _over_allocated(snapshot, decisions)


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from([1, 60]))
def test_easy_never_starts_the_reserved_job_later_than_its_reservation(work, resolution) -> None:
    """Run the queue forward with exact runtimes (every job runs its whole limit), calling the
    scheduler at every job end: the top job starts no later than its first expected start."""
    count, cpus, busy, queue = work
    scheduler = BackfillScheduler(SchedulerParams(bf_resolution_s=resolution))
    now, pending, active = NOW, list(queue), list(busy)
    promised: dict[int, float] = {}
    started: dict[int, float] = {}
    for _ in range(200):
        snapshot = cluster(count, cpus, active, now, pending)
        decisions = plan(snapshot, scheduler)
        assert not _over_allocated(snapshot, decisions)
        for job_id, when in decisions.expected_start.items():
            promised.setdefault(job_id, when)
        for job_id, alloc in decisions.starts:
            request = next(j for j in pending if j.job_id == job_id)
            pending.remove(request)
            started[job_id] = now
            active.append(running(job_id, dict(alloc.cpus), now + request.time_limit_min * 60))
        if not pending:
            break
        now = min(r.end_time for r in active)
        active = [r for r in active if r.end_time > now]
    for job_id, when in promised.items():
        if job_id in started:
            assert started[job_id] <= when, (job_id, started[job_id] - NOW, when - NOW)


@settings(max_examples=150, deadline=None)
@given(workloads(), st.integers(0, 120), st.integers(10, 240), st.sampled_from(["builtin", "backfill"]))
def test_reserved_nodes_are_never_used_by_others_in_the_window(work, offset, length, kind) -> None:
    count, cpus, busy, queue = work
    resv = ResvSnap("r", NOW + offset * 60, NOW + (offset + length) * 60, frozenset({"n01", "n02"}),
                    frozenset({"alice"}))
    snapshot = cluster(count, cpus, busy, pending=queue, reservations=[resv])
    decisions = plan(snapshot, BuiltinScheduler() if kind == "builtin" else BackfillScheduler())
    by_id = {j.job_id: j for j in queue}
    for job_id, alloc in decisions.starts:
        end = NOW + by_id[job_id].time_limit_min * 60
        if resv.overlaps(NOW, end):
            assert resv.nodes.isdisjoint(alloc.cpus)


# --- power capping ------------------------------------------------------------------------------------

@st.composite
def capped(draw):
    from wattsched import capadmission

    count, cpus, busy, queue = draw(workloads())
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    watts = {n: capadmission.NodePower(100, 300, 100, 300, always_max=draw(st.booleans()) and n == "n01")
             for n in names}
    used = {node for r in busy for node in r.cpus}
    states_ = {n: PowerState.BUSY if n in used else PowerState.IDLE for n in names}
    current = sum(watts[n].watts(states_[n]) for n in names)
    cap = draw(st.sampled_from([math.inf, float(draw(st.integers(current - 100, 300 * count)))]))
    resvs = tuple(capadmission.PowerResv(f"r{i}", NOW + draw(st.integers(0, 120)) * 60,
                                  NOW + draw(st.integers(121, 400)) * 60, draw(st.integers(50, 400)))
                  for i in range(draw(st.integers(0, 2))))
    # the schedule's changes of the cap ahead: dips and raises (wattsched.capschedule)
    times = sorted(draw(st.sets(st.integers(1, 400), max_size=3)))
    ahead = tuple((NOW + t * 60, draw(st.sampled_from([math.inf, float(draw(st.integers(100 * count, 300 * count)))])))
                  for t in times)
    return count, cpus, busy, queue, capadmission.PowerSnap(watts, states_, cap, resvs, ahead)


def _busy_power(snap, busy_nodes) -> float:
    """Power with ``busy_nodes`` busy; the others in their state now, or idle if they are busy now."""

    return sum(node.max if name in busy_nodes else
               node.watts(PowerState.IDLE if snap.states[name] == PowerState.BUSY else snap.states[name])
               for name, node in snap.nodes.items())


@settings(max_examples=200, deadline=None)
@given(capped(), st.sampled_from(["builtin", "plan", "admit"]))
def test_power_never_exceeds_the_cap_or_a_planned_cap(work, kind) -> None:
    from dataclasses import replace

    count, cpus, busy, queue, snap = work
    snapshot = replace(cluster(count, cpus, busy, pending=queue), power=snap)
    scheduler = BuiltinScheduler() if kind == "builtin" else BackfillScheduler(SchedulerParams(bf_power=kind))
    decisions = plan(snapshot, scheduler)
    by_id = {j.job_id: j for j in queue}
    limit = snap.limit()
    running_nodes = {node for r in busy for node in r.cpus}
    starts = [(by_id[j], a, NOW + by_id[j].time_limit_min * 60) for j, a in decisions.starts]
    adders = [(job, a, end) for job, a, end in starts if any(n not in running_nodes and not snap.nodes[n].always_max
                                                             for n in a.cpus)]
    if adders:
        assert _busy_power(snap, running_nodes | {n for _j, a, _e in starts for n in a.cpus}) <= limit
    for t in {*(r.start for r in snap.reservations), *(when for when, _cap in snap.ahead)}:
        overlapping = [j for j, _a, end in adders if end > t]
        if not overlapping:
            continue
        busy_at = {n for r in busy if r.end_time is None or r.end_time > t for n in r.cpus}
        busy_at |= {n for _j, a, end in starts if end > t for n in a.cpus}
        reserved = sum(r.watts for r in snap.reservations if r.start <= t < r.end)
        assert _busy_power(snap, busy_at) <= snap.limit_at(t) - reserved, (kind, t - NOW)


def test_a_job_filling_a_node_about_to_be_freed_does_not_keep_it_busy_over_a_lowered_cap() -> None:
    """The cap was lowered to 500 W under a draw of 600 W (two nodes busy at 300 W). Job 1 fits on
    n02's free CPU beside a job that ends now: at the start it adds nothing (n02 is busy anyway),
    but it would keep n02 busy once that job is gone, the cluster then over the cap by its own
    doing. Likewise, once n02 is free, a job planned beside another one's reservation there must
    not keep n02 busy once that one ends. The power plan looks at the moments a job's node is given
    back by the running or held jobs on it (it once looked only where the power can rise)."""
    from dataclasses import replace

    from wattsched import capadmission

    busy = [running(1000, {"n01": 2}, None), running(1001, {"n02": 1}, NOW)]
    levels = ((2_400_000, 300), (2_000_000, 240), (1_600_000, 180))
    watts = {n: capadmission.NodePower(100, 300, 100, 300, freq_watts=levels) for n in ("n01", "n02")}
    lowered = capadmission.PowerSnap(watts, dict.fromkeys(watts, PowerState.BUSY), 500.0)
    snapshot = replace(cluster(2, 2, busy, pending=[job(1, 1, None)]), power=lowered)
    decisions = plan(snapshot, BackfillScheduler(SchedulerParams(bf_resolution_s=1)))
    assert decisions.starts == [] and decisions.reasons == {1: states.R_POWER}

    # n02 is a maintenance reservation's for a minute; job 1 fits after it at 1.6 GHz (80 W more)
    # for a minute, job 2 (no limit) on n02's other CPU only while job 1 keeps n02 busy: never
    maint = ResvSnap("maint", NOW, NOW + 60, frozenset({"n02"}), users=frozenset({"v"}))
    queue = [job(1, 1, 1, power_fit=True), job(2, 1, None)]
    snapshot = replace(cluster(2, 2, busy, pending=queue, reservations=[maint]), power=lowered)
    decisions = plan(snapshot, BackfillScheduler(SchedulerParams(bf_resolution_s=1, bf_reservations=0)))
    assert decisions.starts == [] and decisions.expected_start == {1: NOW + 60}


@pytest.mark.parametrize("kind", ["builtin", "plan", "admit"])
def test_power_fit_picks_the_highest_frequency_under_the_cap(kind) -> None:
    from dataclasses import replace

    from wattsched import capadmission

    table = ((2_000_000, 300), (1_500_000, 220), (1_000_000, 160))
    watts = {n: capadmission.NodePower(100, 300, 100, 300, freq_watts=table) for n in ("n01", "n02")}
    snap = capadmission.PowerSnap(watts, {"n01": PowerState.IDLE, "n02": PowerState.IDLE}, 350.0)
    scheduler = BuiltinScheduler() if kind == "builtin" else BackfillScheduler(SchedulerParams(bf_power=kind))
    queue = [job(1, 4, 30, power_fit=True), job(2, 4, 30), job(3, 4, 30, power_fit=True, cpu_freq_pinned=True)]
    for request in queue:
        decisions = plan(replace(cluster(2, 4, [], pending=[request]), power=snap), scheduler)
        if request.job_id == 1:
            (_, alloc), = decisions.starts
            assert alloc.cpu_freq_khz == 1_500_000  # 100 + 100 + 120 = 320 <= 350; at 2 GHz 400 would not fit
        else:
            assert decisions.starts == [] and decisions.reasons[request.job_id] == states.R_POWER
    # a node already running at 1.5 GHz counts 220 W, not MaxWatts
    busy = replace(snap, nodes={**watts, "n01": replace(watts["n01"], busy=220)},
                   states={"n01": PowerState.BUSY, "n02": PowerState.IDLE})
    assert capadmission.summary(busy.nodes, busy.states)["current_watts"] == 320


@st.composite
def varied_queues(draw):
    """Queues of many shapes: held and future jobs, array tasks under a throttle, several CPUs per
    task, jobs without a time limit."""
    count, cpus, busy, _queue = draw(workloads())
    queue = []
    for i in range(1, draw(st.integers(1, 40)) + 1):
        extra = draw(st.sampled_from([{}, {}, {}, {"hold": "user"}, {"begin_time": NOW + 600},
                                      {"array_job_id": 7, "array_throttle": 1}, {"cpus_per_task": 2}]))
        minutes = draw(st.one_of(st.none(), st.integers(1, 240)))
        queue.append(job(i, draw(st.integers(1, count * cpus)), minutes, **extra))
    return count, cpus, busy, queue


@settings(max_examples=200, deadline=None)
@given(varied_queues(), st.sampled_from([1, 3, 8, 500]))
def test_the_bulk_first_fit_tail_decides_as_the_job_by_job_loop(work, max_job_test) -> None:
    """A per-user limit no user reaches sends every job through the loop one at a time: the
    decisions (starts, reasons, expected starts, depth) must be the same as in bulk."""
    count, cpus, busy, queue = work
    snapshot = cluster(count, cpus, busy, pending=queue)
    bulk = plan(snapshot, BackfillScheduler(SchedulerParams(bf_max_job_test=max_job_test), bulk_from=1))
    one_by_one = plan(snapshot, BackfillScheduler(SchedulerParams(bf_max_job_test=max_job_test,
                                                                  bf_max_job_user=10**6)))
    assert bulk.starts == one_by_one.starts
    assert bulk.reasons == one_by_one.reasons
    assert bulk.expected_start == one_by_one.expected_start
    assert (bulk.backfilled, bulk.backfill_depth) == (one_by_one.backfilled, one_by_one.backfill_depth)


@st.composite
def node_count_queues(draw):
    """Queues whose jobs ask for node counts, whole nodes or several CPUs per task: requests that
    the failure frontier compares across node counts."""
    count, cpus, busy, _queue = draw(workloads())
    queue = []
    for i in range(1, draw(st.integers(1, 30)) + 1):
        nodes = draw(st.integers(1, count))
        extra = draw(st.sampled_from([{}, {"exclusive": True}, {"cpus_per_task": 2}, {"ntasks_per_node": 1}]))
        queue.append(job(i, nodes * draw(st.integers(1, cpus)), draw(st.integers(1, 240)), nodes_min=nodes,
                         **extra))
    return count, cpus, busy, queue


@settings(max_examples=200, deadline=None)
@given(node_count_queues(), st.sampled_from([1, 2]))
def test_the_failure_frontier_rules_out_only_requests_that_do_not_fit(work, reservations) -> None:
    """A request is rejected unsearched when one of its shape with no more nodes, no more tasks and
    no later end failed in the pass: a pass where every request is a shape of its own (so nothing
    is ruled out) must decide the same."""
    count, cpus, busy, queue = work
    snapshot = cluster(count, cpus, busy, pending=queue)
    pruned = plan(snapshot, BackfillScheduler(SchedulerParams(bf_reservations=reservations)))
    shape = planner.shape
    backfill.shape = planner.shape = lambda request: (request.job_id,)
    try:
        searched = plan(snapshot, BackfillScheduler(SchedulerParams(bf_reservations=reservations)))
    finally:
        backfill.shape = planner.shape = shape
    assert pruned.starts == searched.starts
    assert pruned.reasons == searched.reasons
    assert pruned.expected_start == searched.expected_start


@pytest.mark.parametrize("kind", ["builtin", "plan", "admit"])
def test_jobs_admitted_at_their_predicted_power_let_more_run_under_the_cap(kind) -> None:
    from dataclasses import replace

    from wattsched import capadmission, capshed
    from wattsched.scheduling.records import PreemptSettings

    watts = {n: capadmission.NodePower(100, 300, 100, 300) for n in ("n01", "n02", "n03", "n04")}
    idle = dict.fromkeys(watts, PowerState.IDLE)
    # earlier runs drew 150 W a node: with a 20 % margin each node counts 180 W, 80 over idle, not 200
    queue = [job(i, 4, 30, exclusive=True, exp_watts=150.0) for i in range(1, 5)]
    scheduler = BuiltinScheduler() if kind == "builtin" else BackfillScheduler(SchedulerParams(bf_power=kind))
    at_max = plan(replace(cluster(4, 4, [], pending=queue), power=capadmission.PowerSnap(watts, idle, 1000.0)),
                  scheduler)
    assert len(at_max.starts) == 3 and at_max.reasons[4] == states.R_POWER  # 400 + 3 x 200 W
    predicted = capadmission.PowerSnap(watts, idle, 1000.0, margin=0.2)
    decisions = plan(replace(cluster(4, 4, [], pending=queue), power=predicted), scheduler)
    assert len(decisions.starts) == 4 and all(a.node_watts == pytest.approx(180.0) for _j, a in decisions.starts)
    # a job sharing its nodes, or with no earlier run, is counted at MaxWatts still
    for other in (job(5, 1, 30, exp_watts=150.0), job(6, 4, 30, exclusive=True)):
        (_, alloc), = plan(replace(cluster(4, 4, [], pending=[other]), power=predicted), scheduler).starts
        assert alloc.node_watts is None
    # the cap's shedding counts the running jobs as they were admitted: nothing to shed at 1000 W
    running_jobs = [RunningJob(j, dict(a.cpus), {}, NOW + 1800, node_watts=a.node_watts) for j, a in decisions.starts]
    busy = replace(predicted, states=dict.fromkeys(watts, PowerState.BUSY),
                   nodes={n: replace(w, busy=180.0) for n, w in watts.items()})
    assert capadmission.summary(busy.nodes, busy.states)["current_watts"] == 720
    assert capshed.shed(busy, running_jobs, {}, PreemptSettings(), ["cpufreq", "suspend"]) == []
    assert capshed.Model(busy, running_jobs).total == 720

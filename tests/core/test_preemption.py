"""Preemption's choice (wattsched.preemption), pure: who may preempt whom under preempt/qos and
preempt/partition_prio, in which order, and partitions' PriorityTier in the scheduling order."""

from __future__ import annotations

from wattsched import preemption, states
from wattsched.limits import AccountsSnap, AssocLimits, Qos
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, PreemptSettings, RunningJob, Snapshot

QOS = {"normal": Qos("normal"), "low": Qos("low"), "high": Qos("high", priority=10, preempt=frozenset({"low"}))}
ASSOCS = {("root", ""): AssocLimits("root", "", "")}
NODES = (NodeSnap("n1", 4, 0, 1000, 1000), NodeSnap("n2", 4, 0, 1000, 1000))
PARTS = {"low": PartitionSnap("low", ("n1", "n2"), priority_tier=1, preempt_mode="REQUEUE"),
         "high": PartitionSnap("high", ("n1", "n2"), priority_tier=2)}


def _running(job_id: int, node: str, partition: str = "low", qos: str = "low", start: float = 0.0) -> RunningJob:
    return RunningJob(job_id, {node: 4}, {node: 0}, None, qos=qos, start=start, partition=partition)


def _victims(kind: str, pending: JobRequest, running: tuple[RunningJob, ...], now: float = 100.0,
             exempt_s: float = 0.0) -> dict[int, int]:
    snap = Snapshot(now=now, nodes=NODES, partitions=PARTS, pending=(pending,), running=running,
                    accounts=AccountsSnap(QOS, ASSOCS), preempt=PreemptSettings(kind, "CANCEL", exempt_s))
    decisions = schedule(snap, BasicPriority(), BuiltinScheduler(), ConsTresSelect())
    assert decisions.reasons[pending.job_id] == states.R_RESOURCES
    return preemption.preemptees(snap, decisions, ConsTresSelect())


def test_preempt_qos_takes_the_youngest_of_a_qos_it_may_preempt() -> None:
    running = (_running(1, "n1", start=10.0), _running(2, "n2", start=20.0))
    high = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="high")
    assert _victims("preempt/qos", high, running) == {2: 9}
    normal = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="normal")
    assert _victims("preempt/qos", normal, running) == {}
    assert _victims("preempt/qos", high, running, now=100.0, exempt_s=600.0) == {}  # PreemptExemptTime


def test_partition_prio_takes_from_a_lower_tier_by_its_partitions_mode() -> None:
    running = (_running(1, "n1", qos="normal", start=10.0), _running(2, "n2", "high", "normal", start=20.0))
    pending = JobRequest(9, "u", "high", 50.0, ntasks=4, qos="normal")
    # job 2 runs in the same tier: only job 1 (the low partition's) may go
    assert _victims("preempt/partition_prio", pending, running) == {1: 9}
    assert preemption.mode_of(QOS["normal"], PreemptSettings("preempt/partition_prio", "CANCEL"),
                              PARTS["low"]) == "REQUEUE"
    same_tier = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="normal")
    assert _victims("preempt/partition_prio", same_tier, running[:1]) == {}


def test_a_higher_tier_is_scheduled_first() -> None:
    nodes = (NodeSnap("n1", 4, 4, 1000, 1000),)
    parts = {"low": PartitionSnap("low", ("n1",), priority_tier=1), "high": PartitionSnap("high", ("n1",),
                                                                                           priority_tier=2)}
    first = JobRequest(1, "u", "low", 0.0, ntasks=4)  # submitted first: ahead under priority/basic
    second = JobRequest(2, "u", "high", 10.0, ntasks=4)
    snap = Snapshot(now=20.0, nodes=nodes, partitions=parts, pending=(first, second))
    decisions = schedule(snap, BasicPriority(), BuiltinScheduler(), ConsTresSelect())
    assert [job_id for job_id, _a in decisions.starts] == [2]


def test_backfill_plans_a_preemptor_now_and_backfills_nothing_onto_its_nodes() -> None:
    # n1 runs a low job for an hour; n2 is idle. The high job needs both nodes: without preemption
    # its reservation would be in an hour, and the short low job would be backfilled onto n2 now,
    # delaying it again once its preemptee is gone
    running = (RunningJob(1, {"n1": 4}, {"n1": 0}, 100.0 + 3600, qos="low", start=10.0, partition="low"),)
    nodes = (NodeSnap("n1", 4, 0, 1000, 1000), NodeSnap("n2", 4, 4, 1000, 1000))
    high = JobRequest(8, "u", "low", 40.0, ntasks=8, qos="high", time_limit_min=60)
    short = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="low", time_limit_min=10)
    for kind, backfilled in (("preempt/none", True), ("preempt/qos", False)):
        snap = Snapshot(now=100.0, nodes=nodes, partitions=PARTS, pending=(high, short), running=running,
                        accounts=AccountsSnap(QOS, ASSOCS), preempt=PreemptSettings(kind, "CANCEL"))
        decisions = schedule(snap, BasicPriority(), BackfillScheduler(), ConsTresSelect())
        assert (9 in dict(decisions.starts)) is backfilled
        assert decisions.expected_start[8] == (3700.0 if backfilled else 100.0)
        assert decisions.reasons[8] == states.R_RESOURCES
        assert preemption.preemptees(snap, decisions, ConsTresSelect()) == ({} if backfilled else {1: 8})


def test_a_job_to_be_suspended_lends_its_cpus_but_keeps_its_memory() -> None:
    running = (RunningJob(1, {"n1": 4}, {"n1": 800}, None, qos="low", start=10.0, partition="low"),
               RunningJob(2, {"n2": 4}, {"n2": 800}, None, qos="low", start=20.0, partition="low"))
    small = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="high", mem_per_node_mb=100)
    large = JobRequest(9, "u", "low", 50.0, ntasks=4, qos="high", mem_per_node_mb=500)
    for mode, fits in (("SUSPEND", {small: {2: 9}, large: {}}), ("CANCEL", {small: {2: 9}, large: {2: 9}})):
        for job, victims in fits.items():
            snap = Snapshot(now=100.0, nodes=(NodeSnap("n1", 4, 0, 1000, 200), NodeSnap("n2", 4, 0, 1000, 200)),
                            partitions=PARTS, pending=(job,), running=running,
                            accounts=AccountsSnap(QOS, ASSOCS), preempt=PreemptSettings("preempt/qos", mode))
            decisions = schedule(snap, BasicPriority(), BuiltinScheduler(), ConsTresSelect())
            assert preemption.preemptees(snap, decisions, ConsTresSelect()) == victims, (mode, job.mem_per_node_mb)

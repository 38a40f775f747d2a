"""The memos kept from pass to pass (QueueMemo, NodeMemo, the backfill ReleaseMemo)
change no decision: pass after pass over an evolving cluster (jobs arriving, starting, ending,
nodes leaving and coming back, requests replaced by an update, nodes that say what changed or
not), plugins that keep their memos decide exactly what fresh plugins with none decide."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.confvalues import SchedulerParams
from wattsched.memos import QueueMemo
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import Decisions, JobRequest, NodeSnap, PartitionSnap, RunningJob, Snapshot
from wattsched.snapbuild import JobTable, Series

NAMES = tuple(f"n{i:02d}" for i in range(1, 7))
CPUS = 4
PARTITIONS = {"p": PartitionSnap("p", NAMES)}


def _decided(decisions: Decisions) -> tuple:
    return (decisions.starts, decisions.reasons, decisions.priorities, decisions.expected_start,
            decisions.backfilled)


class Cluster:
    """Six 4-CPU nodes, as a shell keeps them: a node's snapshot object stays while it is unchanged."""

    def __init__(self) -> None:
        self.nodes = {n: NodeSnap(n, CPUS, CPUS, 1000, 1000) for n in NAMES}
        self.touched: set[str] = set()  # the nodes changed since the last snapshot
        self.series = Series()
        self.pending = JobTable[JobRequest]()  # the memo works on the changes of this table
        self.running = JobTable[RunningJob]()  # and the backfill release memo on this one's

    def take(self, cpus: dict[str, int], sign: int) -> None:
        for name, n in cpus.items():
            node = self.nodes[name]
            self.nodes[name] = replace(node, free_cpus=node.free_cpus - sign * n)
            self.touched.add(name)

    def snapshot(self, now: float, backfill_due: bool, hint: bool) -> Snapshot:
        """With ``hint``, the snapshot's changes say which nodes changed since the last snapshot;
        without, they do not, and the memos compare the nodes."""
        changed = [NAMES.index(name) for name in self.touched] if hint else None
        self.touched = set()
        return Snapshot(now=now, nodes=tuple(self.nodes.values()), partitions=PARTITIONS,
                        pending=self.pending, running=self.running, backfill_due=backfill_due,
                        changes=self.series.changes(self.pending, self.running, changed))


@settings(max_examples=120, deadline=None)
@given(st.data(), st.sampled_from(["builtin", "easy", "conservative", "shortest"]))
def test_memos_change_no_decision(data, kind: str) -> None:
    params = {"builtin": SchedulerParams(default_queue_depth=3), "easy": SchedulerParams(bf_max_job_test=6),
              "conservative": SchedulerParams(bf_reservations=0), "shortest": SchedulerParams(bf_candidate="shortest")}
    scheduler_class = BuiltinScheduler if kind == "builtin" else BackfillScheduler

    def plugins():
        return BasicPriority(), scheduler_class(params[kind]), ConsTresSelect()

    kept, memo = plugins(), QueueMemo()
    cluster = Cluster()
    now, next_id = 1_000_000.0, 1
    for _pass in range(data.draw(st.integers(1, 14), label="passes")):
        for _ in range(data.draw(st.integers(0, 4), label="arrivals")):
            cluster.pending.put(JobRequest(
                job_id=next_id, user=data.draw(st.sampled_from("ab")), partition="p", submit_time=now,
                ntasks=data.draw(st.integers(1, 2 * CPUS)), time_limit_min=data.draw(st.integers(1, 90))))
            next_id += 1
        running_ids = sorted(job.job_id for job in cluster.running)
        for job_id in data.draw(st.lists(st.sampled_from(running_ids), unique=True), label="ends") \
                if running_ids else []:
            cluster.take(cluster.running.remove(job_id).cpus, -1)
        if cluster.running and data.draw(st.booleans(), label="a running job's end moves"):
            job = data.draw(st.sampled_from(sorted(cluster.running, key=lambda j: j.job_id)))
            cluster.running.put(replace(job, end_time=job.end_time + data.draw(st.sampled_from([-60.0, 600.0]))))
        if cluster.pending and data.draw(st.booleans(), label="update a request"):
            job = data.draw(st.sampled_from(sorted(cluster.pending, key=lambda j: j.job_id)))
            cluster.pending.put(replace(job, hold="user" if data.draw(st.booleans()) else ""))
        if data.draw(st.booleans(), label="a node leaves or comes back"):
            name = data.draw(st.sampled_from(NAMES))
            cluster.nodes[name] = replace(cluster.nodes[name], schedulable=not cluster.nodes[name].schedulable)
            cluster.touched.add(name)
        if data.draw(st.booleans(), label="a snapshot no pass sees"):
            cluster.snapshot(now, False, True)
        snap = cluster.snapshot(now, data.draw(st.booleans(), label="backfill due"),
                                data.draw(st.booleans(), label="nodes say what changed"))
        with_memos = schedule(snap, *kept, memo)
        fresh = replace(snap, nodes=tuple(snap.nodes), pending=tuple(snap.pending), running=tuple(snap.running),
                        changes=None)
        assert _decided(with_memos) == _decided(schedule(fresh, *plugins()))
        for job_id, alloc in with_memos.starts:
            job = cluster.pending.remove(job_id)
            cluster.running.put(RunningJob(job_id, alloc.cpus, alloc.mem_mb, now + job.time_limit_min * 60))
            cluster.take(alloc.cpus, 1)
        now += data.draw(st.sampled_from([0.0, 1.0, 60.0, 600.0]), label="time passes")

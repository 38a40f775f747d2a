"""The policy core's view of the live state: the immutable Snapshot a scheduling pass runs on
(nodes, partitions, pending requests, running jobs, reservations, fair share, power), the
power views the cap is computed from, and the memos that spare rebuilding unchanged parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from wattsched import capadmission, licenses, memos, snapbuild, states
from wattsched.controller import acctpolicy, resources, views
from wattsched.model import Job, Node
from wattsched.nodestates import PowerState
from wattsched.scheduling.records import JobBrief, JobRequest, NodeSnap, PartitionSnap, RunningJob, Snapshot

T = TypeVar("T")

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


@dataclass
class Memos:
    """What a pass would otherwise rebuild for every job each time: each pending job's request and
    listing record (dropped when the job changes), each node's snapshot and watts (kept while the
    node is the same), the partitions (from the configuration alone),
    and the queue memo that keeps the core's eligibility verdicts from pass to pass. A
    reconfiguration drops them all."""

    requests: dict[int, JobRequest] = field(default_factory=dict)
    briefs: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    nodes: dict[str, tuple[tuple, NodeSnap]] = field(default_factory=dict)  # what each was built from
    # by its jobs' frequencies
    node_power: dict[str, tuple[tuple, capadmission.NodePower]] = field(default_factory=dict)
    partitions: dict[str, PartitionSnap] | None = None
    queue: memos.QueueMemo = field(default_factory=memos.QueueMemo)
    watts_per_cpu: dict[str, float] | None = None  # per partition (acctpolicy), from the configuration
    cpu_watts: dict[str, float] = field(default_factory=dict)  # per node: MaxWatts / CPUs
    budgets_read: object = None  # the use (state.shares) the budgets were last checked against

    def job_changed(self, job_id: int, request_changed: bool = True) -> None:
        self.briefs.pop(job_id, None)
        if request_changed:
            self.requests.pop(job_id, None)


def brief(state: ClusterState, job: Job, now: float) -> tuple[Any, ...]:
    """The job's listing record (views.BRIEF_KEYS' values), built once per change (squeue asks for
    10,000 of them)."""
    cached = state.memo.briefs.get(job.job_id)
    if cached is None:
        cached = state.memo.briefs[job.job_id] = views.brief_values(job, now)
    if job.state in (states.RUNNING, states.COMPLETING):
        at = views.RUN_TIME
        return (*cached[:at], views.run_time(job, now), *cached[at + 1:])
    return cached


def partition_snaps(state: ClusterState) -> dict[str, PartitionSnap]:
    """Built once: partitions come from the configuration alone, and one mapping from pass to
    pass lets the queue memo keep its eligibility verdicts."""
    if state.memo.partitions is None:
        state.memo.partitions = snapbuild.partitions(state.config)
    return state.memo.partitions


def node_snaps(state: ClusterState) -> dict[str, NodeSnap]:
    """Each node as the policies see it. A node's NodeSnap is kept while what it is built from is
    the same (its configured fields change only with a reconfiguration, which drops the memos), so
    a pass builds only the changed nodes' and the core's node memo looks again only at those."""
    kept, memory = state.memo.nodes, state.config.memory_consumable
    return {n.name: _kept(kept, n, (n.alloc_cpus, n.alloc_mem_mb if memory else 0, n.power, n.base_state, n.drain,
                                    n.not_responding, n.free_gpus()), _node_snap)
            for n in state.nodes.values()}


def _kept(memo: dict[str, tuple[tuple, T]], node: Node, key: tuple, build: Callable[[Node, tuple], T]) -> T:
    """``memo``'s value for ``node`` while it was built from the same ``key``, else ``build(node, key)``, kept."""
    have = memo.get(node.name)
    if have is None or have[0] != key:
        have = memo[node.name] = (key, build(node, key))
    return have[1]


def _node_snap(node: Node, key: tuple) -> NodeSnap:
    return snapbuild.node_snap(node, *key)


def request(state: ClusterState, job: Job) -> JobRequest:
    """A pending job as the policies see it (snapbuild.request), built once per change of the job."""
    cached = state.memo.requests.get(job.job_id)
    if cached is None:
        cached = state.memo.requests[job.job_id] = snapbuild.request(
            job, state.config.memory_consumable, job.partition in state.config.whole_node_partitions())
    return cached


def snapshot(state: ClusterState, now: float, backfill_due: bool = True) -> Snapshot:
    # a requeued job waits until its previous run is gone from every node (Slurm's COMPLETING flag)
    # (one pass over every job, 100,000 on the largest queues: the memo is read inline)
    kept = state.memo.requests
    pending = tuple(kept.get(j.job_id) or request(state, j) for j in state.jobs.values()
                    if j.state == states.PENDING and not j.alloc.completing_nodes
                    and not (j.preempted_by and preemptor_waits(state, j)))
    needs_briefs = any(r.dependency or r.array_throttle for r in pending)
    briefs = {j.job_id: JobBrief(j.job_id, j.state, j.user, j.name, j.exit_code, j.term_signal,
                                 j.array_job_id, j.array_task_id, j.start_time)
              for j in state.jobs.values()} if needs_briefs else {}
    running = tuple(running_job(state, j) for j in state.jobs.values()
                    if j.state != states.PENDING and j.holds_nodes and not resources.lent(j)) \
        if snapbuild.carries_running(backfill_due, state.capping,
                                     snapbuild.preempt_settings(state.config).on) else ()
    return snapbuild.snapshot(state.config, now, tuple(node_snaps(state).values()), partition_snaps(state), pending,
                              running, backfill_due, power_snap(state, now), briefs, state.resv.snapshots(),
                              state.shares.factors, accounts=acctpolicy.snapshot(state),
                              greenness=greenness(state, now), license_snap=license_snap(state))


def license_snap(state: ClusterState) -> licenses.LicenseSnap | None:
    """The cluster's licenses and the allocated jobs' holdings (Slurm's jobs hold theirs from
    their start until their nodes are clean, suspended or not); None when none are configured."""
    if not state.config.licenses:
        return None
    held = ((j.request.licenses, j.start_time, j.time_limit_min)
            for j in state.jobs.values() if j.request.licenses and holds_licenses(j))
    return snapbuild.license_snap(state.config, held)


def holds_licenses(job: Job) -> bool:
    return job.holds_nodes or job.state == states.SUSPENDED


def greenness(state: ClusterState, now: float) -> float:
    """How green the grid is now (0 without a carbon-intensity series, or when nothing weighs it)."""
    series = state.carbon.series if state.carbon is not None else None
    if series is None or not state.config.priority_weight_carbon:
        return 0.0
    return series.greenness(now)


def running_job(state: ClusterState, job: Job) -> RunningJob:
    """A job that holds nodes as the policies see it (snapbuild.running_job)."""
    alloc = job.alloc
    return snapbuild.running_job(job.job_id, alloc.alloc_cpus, {n: alloc.alloc_mem_mb for n in alloc.alloc_cpus},
                                 job.start_time, job.time_limit_min, gpus_by_type(state, job), job.qos,
                                 job.cancelled_by is not None or bool(job.preempted) or job.state != states.RUNNING,
                                 job.capping.cpu_freq_khz, bool(job.request.cpu_freq), bool(job.suspended_at),
                                 job.reservation, job.partition, job.capping.admit_watts or None)


def preemptor_waits(state: ClusterState, job: Job) -> bool:
    """A requeued victim of preemption waits until its preemptor has started."""
    if not job.preempted_by:
        return False
    preemptor = state.jobs.get(job.preempted_by)
    return preemptor is not None and preemptor.state == states.PENDING


def gpus_by_type(state: ClusterState, job: Job) -> dict[str, dict[str, int]]:
    """The job's GPUs per node, counted by type (as a policy sees them)."""
    result: dict[str, dict[str, int]] = {}
    for name, indices in job.alloc.alloc_gpus.items():
        node = state.nodes.get(name)
        if node is None:
            continue
        kinds = {d.index: d.kind for d in node.gpus}
        counts = result.setdefault(name, {})
        for index in indices:
            counts[kinds.get(index, "")] = counts.get(kinds.get(index, ""), 0) + 1
    return result


def node_power(state: ClusterState) -> dict[str, capadmission.NodePower]:
    """Each node's watts; a busy node counts its jobs' watts (their frequencies, and the watts a
    node they were admitted at under PowerCapAdmission=predicted)."""
    draws: dict[str, list[tuple[int | None, float | None]]] = {}
    for job in state.jobs.values():
        if job.state != states.PENDING and job.holds_nodes:
            for name in job.alloc.alloc_cpus:
                khz = job.capping.cpu_freq_khz
                if job.capping.start_limit_khz is not None and (node := state.nodes.get(name)) is not None \
                        and node.counted_limit is None:  # its nodes' limit sent, not yet reported held
                    khz = job.capping.start_limit_khz
                draws.setdefault(name, []).append((khz, job.capping.admit_watts or None))
    kept = state.memo.node_power  # a node's watts change with its jobs' draws and its limit alone
    return {n.name: _kept(kept, n, (tuple(draws.get(n.name, ())), n.counted_limit), _node_power)
            for n in state.nodes.values()}


def _node_power(node: Node, key: tuple) -> capadmission.NodePower:
    return snapbuild.node_power(node, *key)


def power_states(state: ClusterState) -> dict[str, PowerState]:
    """Each node as the cap counts it: its power state (busy, idle, off, down; a switch under way
    by what it holds)."""
    return {n.name: snapbuild.cap_state(n.power, n.alloc_cpus > 0, n.base_state, n.not_responding)
            for n in state.nodes.values()}


def power_snap(state: ClusterState, now: float) -> capadmission.PowerSnap | None:
    if not state.capping:
        return None
    return snapbuild.power_snap(state.power_cap, node_power(state), power_states(state),
                                state.resv.power_snapshots(), [*state.cap_steps, *state.cap_file_steps], now,
                                snapbuild.admission_margin(state.config), state.config.power_plugin == "power/balance")

"""The one builder of the policy core's snapshots, used by both shells: the controller
(wattsched.controller.snapshots, over its live jobs and nodes) and the simulator (over its
virtual ones).

What a policy sees of a node (its free CPUs, memory and GPUs, whether work may land on it, how
far it is from running), its watts and power state under the cap, the partitions, a running
job's holdings and the Snapshot itself are made here and only here: the two shells differ only
in where their records keep the facts, so "the simulator and the controller see the same
snapshot" holds by construction. A pending job's request comes from a job (:func:`request`, for
the controller's jobs and for a submission's feasibility check alike); the simulator's come from
trace records (Simulation._request), which are not jobs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeVar

from wattsched import capadmission, capschedule, gres, licenses, limits, nodestates
from wattsched.capadmission import INFINITE, NodePower, PowerResv, PowerSnap
from wattsched.capschedule import CapStep
from wattsched.config import Config
from wattsched.model import JOB_FIELD_PATHS, Job
from wattsched.nodestates import NodeBase, PowerFlag, PowerState
from wattsched.scheduling.records import (
    Changes,
    Delta,
    JobBrief,
    JobRequest,
    NodeDelta,
    NodeSnap,
    PartitionSnap,
    PreemptSettings,
    ResvSnap,
    RunningJob,
    Snapshot,
    wake,
)


class NodeShape(Protocol):
    """A node's configured facts, as both shells' records carry them (NodeConf, model.Node)."""

    @property
    def name(self) -> str: ...
    @property
    def cpus(self) -> int: ...
    @property
    def real_memory_mb(self) -> int: ...
    @property
    def weight(self) -> int: ...
    @property
    def tmp_disk_mb(self) -> int: ...
    @property
    def features(self) -> Iterable[str]: ...
    @property
    def gres(self) -> gres.Inventory: ...
    @property
    def idle_watts(self) -> int | None: ...
    @property
    def max_watts(self) -> int | None: ...
    @property
    def power_save_watts(self) -> int | None: ...
    @property
    def down_watts(self) -> int | None: ...
    @property
    def power_cap_priority(self) -> int | None: ...
    @property
    def cpu_freq_watts(self) -> tuple[tuple[int, int], ...]: ...


def partitions(config: Config) -> dict[str, PartitionSnap]:
    """The partitions, from the configuration alone (a shell keeps the mapping from pass to pass:
    the queue memo keeps its eligibility verdicts while it is the same object)."""
    return {p.name: PartitionSnap(p.name, p.nodes, p.state, p.max_time_min, p.max_nodes, p.priority_job_factor,
                                  p.priority_tier, p.preempt_mode, p.min_nodes)
            for p in config.partitions}


def node_snap(node: NodeShape, alloc_cpus: int, alloc_mem_mb: int, flag: PowerFlag,
              base: NodeBase = NodeBase.IDLE, drain: bool = False, not_responding: bool = False,
              free_gpus: gres.Inventory | None = None) -> NodeSnap:
    """A node as a policy sees it. ``free_gpus``: None when no job holds any of its GPUs."""
    # (a job resumed from scontrol suspend takes its CPUs again whoever holds them: none is free then)
    return NodeSnap(node.name, node.cpus, max(0, node.cpus - alloc_cpus), node.real_memory_mb,
                    node.real_memory_mb - alloc_mem_mb, node.weight, frozenset(node.features),
                    nodestates.schedulable(flag, base, drain, not_responding), wake(flag), node.gres,
                    node.gres if free_gpus is None else free_gpus, node.tmp_disk_mb)


def node_power(node: NodeShape, job_draws: Collection[tuple[int | None, float | None]] = (),
               limit: float | None = None) -> NodePower:
    """A node's watts by state (PowerSaveWatts defaults to IdleWatts, DownWatts to MaxWatts); a
    busy node counts the most of its jobs' watts (``job_draws``: each job's CPU frequency, None at
    full speed, and the watts a node it was admitted at, None for MaxWatts). A node its hardware
    holds to ``limit`` watts (noded.powerlimits) draws no more than that, however busy."""
    idle, most = node.idle_watts or 0, node.max_watts or 0
    freq_watts = node.cpu_freq_watts
    if limit is not None and limit < most:
        most = max(idle, int(limit))
        freq_watts = tuple((khz, min(w, most)) for khz, w in freq_watts)
    watts = NodePower(idle, most, idle if node.power_save_watts is None else node.power_save_watts,
                      most if node.down_watts is None else node.down_watts, node.power_cap_priority == 0,
                      freq_watts=freq_watts)
    if job_draws:
        busy = max(watts.busy_for(khz, predicted) for khz, predicted in job_draws)
        return watts if busy == most else replace(watts, busy=busy)
    return watts


def cap_state(flag: PowerFlag, held: bool, base: NodeBase = NodeBase.IDLE, not_responding: bool = False) -> PowerState:
    """A node as the cap counts it: its power state (nodestates.power_state), a switch under way
    counted by what it holds (capadmission.cap_state)."""
    return capadmission.cap_state(nodestates.power_state(flag, base, not_responding, held), held)


def request(job: Job, memory: bool = True, whole_nodes: bool = False) -> JobRequest:
    """A pending job as the policies see it: the request's fields named as the job's take them
    (model.Job is their one declaration); _REQUEST_VALUES lists the rest. Without ``memory`` (not a
    consumable: SelectTypeParameters=CR_CPU) the job asks its nodes for none; with ``whole_nodes``
    (its partition's OverSubscribe=EXCLUSIVE) it asks for its nodes whole, as --exclusive."""
    made = JobRequest(**dict(zip(_SAME_AS_JOB, _same_values(job), strict=True)),
                      **{name: compute(job) for name, compute in _REQUEST_VALUES.items()})
    if whole_nodes and not made.exclusive:
        made = replace(made, exclusive=True)
    return made if memory else replace(made, mem_per_node_mb=0, mem_per_cpu_mb=0)


# the one place a request differs from its job: immutable lists, and what is derived
_REQUEST_VALUES: dict[str, Callable[[Job], Any]] = {
    "req_nodes": lambda j: tuple(j.request.req_nodes), "exc_nodes": lambda j: tuple(j.request.exc_nodes),
    "features": lambda j: tuple(j.request.features), "cpu_freq_pinned": lambda j: bool(j.request.cpu_freq),
    "gpus": lambda j: j.gpu_request,
    "licenses": lambda j: licenses.parse(j.request.licenses) if j.request.licenses else (),
    # --overcommit: the CPUs of one task per node (of -c CPUs each), whatever the tasks' count
    "ntasks": lambda j: j.request.nodes_min if j.request.overcommit else j.request.ntasks,
    "ntasks_per_node": lambda j: (min(j.request.ntasks_per_node, 1) if j.request.overcommit
                                  else j.request.ntasks_per_node),
}
_SAME_AS_JOB = tuple(f.name for f in fields(JobRequest) if f.name in JOB_FIELD_PATHS and f.name not in _REQUEST_VALUES)
_same_values = attrgetter(*(JOB_FIELD_PATHS[name] for name in _SAME_AS_JOB))
if _UNDERIVED := {f.name for f in fields(JobRequest)} - set(_SAME_AS_JOB) - set(_REQUEST_VALUES):
    raise TypeError(f"JobRequest fields neither on the job nor derived from it: {sorted(_UNDERIVED)}")


def running_job(job_id: int, cpus: Mapping[str, int], mem_mb: Mapping[str, int], start: float,
                time_limit_min: int | None, gpus: Mapping[str, Mapping[str, int]] | None = None, qos: str = "",
                ending: bool = False, freq_khz: int | None = None, pinned: bool = False, suspended: bool = False,
                reservation: str = "", partition: str = "", node_watts: float | None = None) -> RunningJob:
    """What a running job holds, and when its time limit gives it back (None: no limit); its QOS
    and whether it is already on its way out (for preemption); its frequency, and whether it is
    frozen (for the cap's shedding)."""
    return RunningJob(job_id, cpus, mem_mb, start + time_limit_min * 60 if time_limit_min is not None else None,
                      gpus if gpus is not None else {}, qos, start, ending, partition, freq_khz, pinned, suspended,
                      reservation, node_watts)


def license_snap(config: Config, held: Iterable[tuple[str, float, int | None]]) -> licenses.LicenseSnap | None:
    """The cluster's licenses, and what the allocated jobs hold of them (``held``: each one's
    licenses as its job shows them, its start and time limit); None when none are configured."""
    if not config.licenses:
        return None
    return licenses.LicenseSnap(config.license_totals, tuple(
        licenses.Holding(licenses.parse(text), start + limit * 60 if limit is not None else None)
        for text, start, limit in held))


def preempt_settings(config: Config) -> PreemptSettings:
    return PreemptSettings(config.preempt_type, config.preempt_mode, config.preempt_exempt_time_s)


def snapshot(config: Config, now: float, nodes: tuple[NodeSnap, ...], partition_snaps: Mapping[str, PartitionSnap],
             pending: Collection[JobRequest], running: Collection[RunningJob], backfill_due: bool,
             power_snap: PowerSnap | None, jobs: Mapping[int, JobBrief] | None = None,
             reservations: Mapping[str, ResvSnap] | None = None,
             fairshare: Mapping[tuple[str, str], tuple[float, float]] | None = None,
             changes: Changes | None = None, accounts: limits.AccountsSnap | None = None,
             greenness: float = 0.0, license_snap: licenses.LicenseSnap | None = None) -> Snapshot:
    """The snapshot of one pass. Running jobs are given only when a policy reads them: for a
    backfill plan (``backfill_due``) or under a power cap (see :func:`carries_running`)."""
    preempt = preempt_settings(config)
    return Snapshot(now=now, nodes=nodes, partitions=partition_snaps, pending=pending, jobs=jobs or {},
                    def_mem_per_cpu_mb=config.def_mem_per_cpu_mb if config.memory_consumable else 0,
                    running=running if carries_running(backfill_due, power_snap is not None, preempt.on) else (),
                    backfill_due=backfill_due, reservations=reservations or {}, fairshare=fairshare or {},
                    power=power_snap, changes=changes, accounts=accounts, preempt=preempt, greenness=greenness,
                    licenses=license_snap)


def carries_running(backfill_due: bool, capped: bool, preempting: bool = False) -> bool:
    """Whether a pass's snapshot carries the running jobs (the backfill plan, the cap and
    preemption read them)."""
    return backfill_due or capped or preempting


def power_snap(cap: float | None, watts: Mapping[str, NodePower], node_states: Mapping[str, PowerState],
               reservations: tuple[PowerResv, ...] = (), steps: Sequence[CapStep] = (),
               now: float = 0.0, margin: float | None = None, balancing: bool = False) -> PowerSnap | None:
    """What the cap needs: the cap in force at ``now``, the schedule's changes ahead, the margin
    over predictions when jobs are admitted at them, and whether the moving budget may start jobs
    under limits (None when capping is off and no step of the schedule is in force or to come)."""
    if not steps:
        return None if cap is None else PowerSnap(watts, node_states, cap, reservations, margin=margin,
                                                  balancing=balancing)
    max_watts = sum(n.max for n in watts.values())
    cap_now, ahead = capschedule.timeline(cap, steps, now, max_watts)
    return PowerSnap(watts, node_states, INFINITE if cap_now is None else cap_now, reservations, ahead, margin,
                     balancing)


def limit_watts(node: NodeShape, khz: int) -> int:
    """The limit that holds a busy node to what it draws at ``khz`` (its CpuFreqWatts), whole watts."""
    return int(node_power(node).busy_at(khz))


def admission_margin(config: Config) -> float | None:
    """PowerCapMargin when jobs are admitted at their predictions (PowerCapAdmission=predicted)."""
    return config.power_cap_margin if config.power_cap_admission == "predicted" else None


# --- for a shell that keeps its jobs and nodes from pass to pass (the simulator) -------------------

_T = TypeVar("_T", JobRequest, RunningJob)
_SERIES = itertools.count(1)


class JobTable(Collection[_T], Generic[_T]):
    """Jobs by id (pending requests, or running jobs' holdings), as a shell keeps them from pass to
    pass, with what changed since the snapshot that last carried them (:meth:`delta`). Only the
    shell changes it, and only between passes; a snapshot carries it as its collection."""

    def __init__(self) -> None:
        self._jobs: dict[int, _T] = {}
        self._gone: set[_T] = set()
        self._new: set[_T] = set()
        self._since = -1  # the snapshot that last carried the table (none yet)

    def put(self, job: _T) -> None:
        """Add a job, or replace its entry."""
        old = self._jobs.get(job.job_id)
        if old is not None:
            self._dropped(old)
        self._jobs[job.job_id] = job
        self._new.add(job)

    def remove(self, job_id: int) -> _T:
        job = self._jobs.pop(job_id)
        self._dropped(job)
        return job

    def _dropped(self, job: _T) -> None:
        if job in self._new:  # added and dropped between two snapshots: in neither set
            self._new.discard(job)
        else:
            self._gone.add(job)

    def get(self, job_id: int) -> _T | None:
        return self._jobs.get(job_id)

    def delta(self, seq: int) -> Delta[_T]:
        """What changed since the snapshot that last carried the table; snapshot ``seq`` carries it
        now. The sets are handed over, not copied: the table starts new ones."""
        since, self._since = self._since, seq
        if not self._gone and not self._new:
            return Delta(since)
        delta = Delta(since, self._gone, self._new)
        self._gone, self._new = set(), set()
        return delta

    def __iter__(self) -> Iterator[_T]:
        return iter(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job: object) -> bool:
        return self._jobs.get(getattr(job, "job_id", None)) is job  # type: ignore[arg-type]


class Series:
    """A shell's snapshots, numbered, so that the memos can tell whether a snapshot's Changes
    follow the one they last read."""

    def __init__(self) -> None:
        self.id = next(_SERIES)
        self.seq = 0

    def changes(self, pending: JobTable[JobRequest], running: JobTable[RunningJob] | None,
                nodes_changed: Iterable[int] | None) -> Changes:
        """The next snapshot's Changes: the tables' deltas (``running`` None when the snapshot does
        not carry the running jobs) and the positions of the nodes changed since the last one
        (None: not said, the memos compare the nodes)."""
        self.seq += 1
        return Changes(self.id, self.seq, pending.delta(self.seq),
                       running.delta(self.seq) if running is not None else None,
                       NodeDelta(self.seq - 1, tuple(sorted(nodes_changed))) if nodes_changed is not None else None)

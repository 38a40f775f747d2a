"""The policy core's records: what a pass reads (the Snapshot of nodes, partitions, pending
requests, running jobs, reservations, power and accounts, with ``now``) and what it decides
(Allocation, Decisions), and the Changes a shell that keeps its tables from pass to pass says
happened since its earlier snapshots. Immutable, and built by wattsched.snapbuild alone."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from wattsched import gres, limits
from wattsched import licenses as licenses_mod
from wattsched.capadmission import PowerSnap
from wattsched.nodestates import PowerFlag

if TYPE_CHECKING:
    pass


# How far a node is from running new work, for node selection: nodes that are on come first,
# then the ones already powering up, then the powered-down ones (waking a node costs minutes and
# energy). Slurm, too, places powered-down nodes after all others, whatever their Weight.
POWERED_ON, POWERING_UP, POWERED_DOWN = 0, 1, 2
_WAKE = {PowerFlag.POWERING_UP: POWERING_UP, PowerFlag.POWERED_DOWN: POWERED_DOWN}


def wake(flag: PowerFlag) -> int:
    """How far a node with this power flag is from running work (NodeSnap.wake)."""
    return _WAKE.get(flag, POWERED_ON)


@dataclass(frozen=True, slots=True)
class NodeSnap:
    """A node as a policy sees it: size, what is free, whether new work may land on it (now or,
    when it is busy, once it is free)."""

    name: str
    cpus: int
    free_cpus: int
    real_memory_mb: int
    free_mem_mb: int
    weight: int = 1
    features: frozenset[str] = frozenset()
    schedulable: bool = True
    wake: int = POWERED_ON  # how far from running work it is: used after the nodes nearer to it
    gpus: gres.Inventory = ()  # its GPUs by type (wattsched.gres)
    free_gpus: gres.Inventory = ()  # those no job holds now
    tmp_disk_mb: int = 0


@dataclass(frozen=True, slots=True)
class PartitionSnap:
    name: str
    nodes: tuple[str, ...]
    state: str = "UP"
    max_time_min: int | None = None
    max_nodes: int | None = None
    priority_job_factor: int = 1
    # Slurm's PriorityTier: a higher tier's jobs are scheduled first and, with
    # preempt/partition_prio, may preempt a lower tier's; PreemptMode ("": the cluster's)
    priority_tier: int = 1
    preempt_mode: str = ""
    min_nodes: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class JobRequest:
    """What a pending job asks for. Compared and hashed by identity: a shell keeps one request
    per job for as long as the job is unchanged (see :class:`QueueMemo`)."""

    job_id: int
    user: str
    partition: str
    submit_time: float
    name: str = ""
    nodes_min: int = 1
    nodes_max: int = 0
    ntasks: int = 1
    ntasks_set: bool = False
    ntasks_per_node: int = 0
    cpus_per_task: int = 1
    mem_per_node_mb: int = 0
    mem_per_cpu_mb: int = 0
    min_cpus_per_node: int = 0
    tmp_mb: int = 0
    exclusive: bool = False
    req_nodes: tuple[str, ...] = ()
    exc_nodes: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    time_limit_min: int | None = None
    begin_time: float = 0.0
    dependency: str = ""
    hold: str = ""
    admin_priority: int | None = None
    nice: int = 0
    array_job_id: int = 0
    array_throttle: int = 0
    account: str = ""
    qos: str = ""
    reservation: str = ""
    cpu_freq_pinned: bool = False  # --cpu-freq given: the frequency is the user's
    power_fit: bool = False  # --power-fit: may run at a lower frequency to fit under the cap
    gpus: gres.GpuRequest = gres.NO_GPUS
    exp_watts: float = 0.0  # its earlier runs' mean watts (wattsched.prediction; 0: none)
    deadline: float = 0.0  # --deadline (0: none)
    licenses: licenses_mod.Counts = ()  # -L: the cluster's licenses it takes while it runs

    @property
    def min_cpus(self) -> int:
        """The CPUs it needs at least, wherever it runs: a task takes one at least. No policy starts
        it with fewer free (the simulator skips the passes where none could start on that ground)."""
        return self.ntasks * max(1, self.cpus_per_task)


@dataclass(frozen=True, slots=True)
class JobBrief:
    """Another job's public facts, as dependencies and array throttles need them."""

    job_id: int
    state: str
    user: str = ""
    name: str = ""
    exit_code: int = 0
    term_signal: int = 0
    array_job_id: int = 0
    array_task_id: int | None = None
    start_time: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class RunningJob:
    """What a running job holds and when it will give it back (None: no time limit). Compared and
    hashed by identity, as :class:`JobRequest`."""

    job_id: int
    cpus: Mapping[str, int]
    mem_mb: Mapping[str, int]
    end_time: float | None
    gpus: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> GPUs held by type
    qos: str = ""
    start: float = 0.0
    ending: bool = False  # being cancelled or preempted: its nodes come back soon
    # for the power cap's shedding (wattsched.capshed)
    partition: str = ""
    freq_khz: int | None = None  # the frequency the controller set it to (None: full speed)
    pinned: bool = False  # --cpu-freq given: its frequency is the user's
    suspended: bool = False  # frozen: it holds its nodes but draws nothing
    reservation: str = ""
    node_watts: float | None = None  # admitted at these watts a node (its prediction), not MaxWatts


@dataclass(frozen=True, slots=True)
class ResvSnap:
    """An advanced reservation as a policy sees it: nodes held over [start, end) for its members."""

    name: str
    start: float
    end: float
    nodes: frozenset[str]
    users: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()

    def overlaps(self, start: float, end: float) -> bool:
        return self.start < end and start < self.end


@dataclass(frozen=True, slots=True)
class PreemptSettings:
    """The cluster's preemption settings (PreemptType, PreemptMode, PreemptExemptTime); the policy
    that reads them is :mod:`wattsched.preemption`."""

    kind: str = "preempt/none"
    mode: str = "OFF"
    exempt_s: float = 0.0

    @property
    def on(self) -> bool:
        return self.kind in ("preempt/qos", "preempt/partition_prio") and self.mode != "OFF"

    @property
    def by_partition(self) -> bool:
        return self.kind == "preempt/partition_prio"


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeSnap, ...]
    partitions: Mapping[str, PartitionSnap]
    pending: Collection[JobRequest]
    jobs: Mapping[int, JobBrief] = field(default_factory=dict)
    def_mem_per_cpu_mb: int = 0
    running: Collection[RunningJob] = ()
    backfill_due: bool = True
    reservations: Mapping[str, ResvSnap] = field(default_factory=dict)
    # (FairShare, EnergyFairShare) per (account, user), from wattsched.fairshare
    fairshare: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    # watts per node and the cap, when PowerCap is configured (wattsched.capadmission)
    power: PowerSnap | None = None
    # what the shell says changed since its earlier snapshots, for the memos alone (see Changes)
    changes: Changes | None = None
    # the QOS, the associations' limits, their use and the active jobs (None: no accounting)
    accounts: limits.AccountsSnap | None = None
    preempt: PreemptSettings = PreemptSettings()
    # how green the grid is now, 0 (the day's dirtiest hour) to 1 (its greenest) (wattsched.carbon)
    greenness: float = 0.0
    # the cluster's licenses and the allocated jobs' holdings (None: no Licenses configured)
    licenses: licenses_mod.LicenseSnap | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a job runs: CPUs and tasks per node, memory per node."""

    cpus: Mapping[str, int]
    tasks: Mapping[str, int]
    mem_mb: Mapping[str, int]
    cpu_freq_khz: int | None = None  # set when the job must run at a lower frequency to fit a power cap
    gpus: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> GPUs by type
    # under PowerCapAdmission=predicted: the watts each node is counted busy at (None: MaxWatts)
    node_watts: float | None = None
    # under the moving budget: cpu_freq_khz is not a clock to pin but the one whose watts its nodes
    # are held to by a limit when it starts (the budget moves the limit afterwards)
    limited: bool = False


@dataclass(slots=True)
class Decisions:
    starts: list[tuple[int, Allocation]] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    priorities: Mapping[int, int] = field(default_factory=dict)
    expected_start: dict[int, float] = field(default_factory=dict)
    backfilled: int = 0
    backfill_depth: int = 0




_Job = TypeVar("_Job", JobRequest, RunningJob)


class Delta(NamedTuple, Generic[_Job]):
    """The entries gone from one of a snapshot's collections, and those new, since the shell's
    snapshot numbered ``since`` (of the same series). Read-only: the shell hands its sets over."""

    since: int
    gone: AbstractSet[_Job] = frozenset()
    new: AbstractSet[_Job] = frozenset()


class NodeDelta(NamedTuple):
    """The positions in Snapshot.nodes whose NodeSnap changed since the snapshot ``since``."""

    since: int
    changed: tuple[int, ...] = ()


class Changes(NamedTuple):
    """What a shell that keeps its jobs and nodes from pass to pass says changed, read-only: this
    is snapshot ``seq`` of the shell's ``series``; a delta tells what changed since an earlier one.
    A memo that read that earlier snapshot applies the delta and works on the changes alone (a
    simulated queue of thousands of jobs is otherwise ranked again at every one of a hundred
    thousand passes); any other memo compares whole collections. Decisions are the same either
    way: a snapshot without changes (the controller's) is as good as one with. (Named tuples: a
    simulation builds one per pass, a hundred thousand times.)"""

    series: int
    seq: int
    pending: Delta[JobRequest] | None = None
    running: Delta[RunningJob] | None = None
    nodes: NodeDelta | None = None


def job_end(job: JobRequest, start: float) -> float:
    """When a job starting at ``start`` must end at the latest (infinity: no time limit)."""
    return start + job.time_limit_min * 60 if job.time_limit_min is not None else math.inf

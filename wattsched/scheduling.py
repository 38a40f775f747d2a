"""The pure scheduling core: an immutable snapshot of the cluster and ``now`` in, decisions out.

The controller builds a :class:`Snapshot` from its live state, the simulator from its event
queue; both call :func:`schedule` with the plugins the configuration names. Nothing here
reads the clock, the network or a database, so a pass is deterministic for its inputs.

A pass: (1) the priority plugin gives each pending job its priority; (2) each job is checked
for eligibility (hold, begin time, dependencies, array throttle, partition state and
limits), which yields Slurm's pending reasons; (3) the scheduler plugin walks the eligible
jobs in priority order and asks the selection plugin for nodes.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from wattsched import gres, ledger, limits, states
from wattsched import licenses as licenses_mod
from wattsched import power as power_mod
from wattsched.nodestates import PowerFlag, PowerState
from wattsched.power import PowerSnap

if TYPE_CHECKING:
    from wattsched.memos import NodeMemo, QueueMemo

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
    # watts per node and the cap, when PowerCap is configured (wattsched.power)
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


@dataclass(slots=True)
class Decisions:
    starts: list[tuple[int, Allocation]] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    priorities: Mapping[int, int] = field(default_factory=dict)
    expected_start: dict[int, float] = field(default_factory=dict)
    backfilled: int = 0
    backfill_depth: int = 0


@runtime_checkable
class PriorityPlugin(Protocol):
    # a job's priority depends on the job alone (priority/basic, not priority/multifactor): the
    # queue memo then keeps each job's priority and rank from pass to pass (QueueMemo)
    static: bool

    def priorities(self, snapshot: Snapshot) -> dict[int, int]: ...


@runtime_checkable
class SelectPlugin(Protocol):
    def select(self, job: JobRequest, candidates: list[NodeSnap], free: Mapping[str, tuple[int, int]],
               def_mem_per_cpu_mb: int, gpus: Mapping[str, Mapping[str, int]] | None = None) -> Allocation | None:
        """Where the job fits, given each candidate's free CPUs and memory and, for a job that asks
        for GPUs, each GPU node's free GPUs by type (:class:`GpuLedger`)."""
        ...

    def quick_select(self, job: JobRequest, candidates: Candidates, def_mem_per_cpu_mb: int) -> Allocation | None:
        """What select() would choose for a job of a common shape, found through an index the plugin
        keeps in the memo (:meth:`Candidates.index`) instead of a scan of every candidate; None when
        the job is not of such a shape or the index finds nothing (then select() decides)."""
        ...


class NodeIndex(Protocol):
    """A select plugin's index over one candidate list, kept by :class:`NodeMemo` from pass to pass."""

    def update(self, node: NodeSnap, free: tuple[int, int]) -> None:
        """The node (perhaps not in the index's list) now has these free CPUs and memory."""
        ...


# the reasons a backfill plan looks past: the job is planned for when its power or licenses come back
PLANNED_REASONS = ledger.POWER_REASONS | {states.R_LICENSES}


class Throttle:
    """What else than nodes decides whether a job may start in a pass, kept current while the
    pass starts jobs: the array throttle (running tasks per job array), when the snapshot
    carries accounts with limits on, the QOS and association limits (:class:`ledger.Ledger`),
    and the cluster's licenses (:class:`licenses.Book`)."""

    __slots__ = ("_asks", "ledger", "licenses", "now", "running", "watts_per_cpu")

    def __init__(self, running: dict[int, int], accounts: limits.AccountsSnap | None = None, now: float = 0.0,
                 fairshare: Mapping[tuple[str, str], tuple[float, float]] | None = None,
                 licenses: licenses_mod.LicenseSnap | None = None):
        self.running, self.now = running, now
        self.ledger = ledger.Ledger(accounts, now, fairshare or {}) \
            if accounts is not None and accounts.limits_on else None
        self.watts_per_cpu = accounts.watts_per_cpu if accounts is not None else {}
        self._asks: dict[int, limits.Ask] = {}
        # a job may ask for a license the configuration no longer has: it waits, with no book to fit
        self.licenses = licenses_mod.Book(licenses or licenses_mod.LicenseSnap({}), now)

    @property
    def limits_on(self) -> bool:
        return self.ledger is not None

    def refusal(self, job: JobRequest) -> str | None:
        """Why the job may not start now besides its nodes, or None. Its licenses are checked
        after its limits, as Slurm's: over its whole run, so that it takes none a job the plan
        reserved was promised."""
        if job.array_throttle and self.running.get(job.array_job_id, 0) >= job.array_throttle:
            return states.R_ARRAY_LIMIT
        if self.ledger is not None and (refused := self.ledger.refusal(self._ask(job))) is not None:
            return refused
        if job.licenses and not self.licenses.fits(job.licenses, self.now, job_end(job, self.now)):
            return states.R_LICENSES
        return None

    def return_times(self, job: JobRequest, until: float) -> list[float]:
        """When power comes back to the groups whose power limits hold the job, and licenses to the
        cluster when it asks for some, up to ``until`` (none: [])."""
        times = [t for t in self.ledger.power_times(self._ask(job)) if t <= until] if self.ledger is not None else []
        return times + self.licenses.release_times(until) if job.licenses else times

    def fits_at(self, job: JobRequest, start: float) -> bool:
        """Whether the job's power fits its power limits, and its licenses are free, over its run
        from ``start``."""
        return (self.ledger is None or self.ledger.power_fits(self._ask(job), start)) and \
            (not job.licenses or self.licenses.fits(job.licenses, start, job_end(job, start)))

    def planned(self, job: JobRequest, start: float) -> None:
        """The backfill plan reserved the job from ``start``: its power and licenses are kept for it."""
        if self.ledger is not None:
            self.ledger.plan(self._ask(job), start)
        self.licenses.hold(job.licenses, start, job_end(job, start))

    def started(self, job: JobRequest) -> None:
        if job.array_job_id:
            self.running[job.array_job_id] = self.running.get(job.array_job_id, 0) + 1
        if self.ledger is not None:
            self.ledger.started(self._ask(job))
        self.licenses.hold(job.licenses, self.now, job_end(job, self.now))

    def _ask(self, job: JobRequest) -> limits.Ask:
        ask = self._asks.get(job.job_id)
        if ask is None:
            ask = self._asks[job.job_id] = limits_ask(job, self.watts_per_cpu.get(job.partition, 0.0))
        return ask


def limits_ask(job: JobRequest, watts_per_cpu: float) -> limits.Ask:
    """A pending job as the limits count it."""
    tres, per_node = limits.request_tres(job.ntasks, job.cpus_per_task, job.nodes_min, job.mem_per_node_mb,
                                         job.mem_per_cpu_mb, job.gpus, watts_per_cpu)
    return limits.Ask(job.user, job.account, job.qos, tres, per_node, job.time_limit_min, job.partition)


@runtime_checkable
class SchedulerPlugin(Protocol):
    """Walks ``order`` (the pending jobs, highest priority first), skipping the ``ineligible`` ones
    (job id -> their reason; both read-only), and records what to start and why others wait."""

    # plans the whole queue when Snapshot.backfill_due (every bf_interval, strict passes between),
    # from the running jobs' ends: the shells then give it Snapshot.running at those passes
    backfill: bool

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None: ...


def schedule(snapshot: Snapshot, priority: PriorityPlugin, scheduler: SchedulerPlugin,
             select: SelectPlugin, memo: QueueMemo | None = None) -> Decisions:
    """Run one scheduling pass over ``snapshot`` and return what to start and why others wait.
    A shell that calls it pass after pass may keep a :class:`QueueMemo` for it; the decisions'
    priorities are then a view of the memo's, good until the next pass."""
    if memo is not None and priority.static:
        prio, order, ineligible = memo.update(snapshot, priority)
    else:
        prio = priority.priorities(snapshot)
        order = sorted(snapshot.pending, key=lambda j: (-tier(snapshot.partitions, j), -prio.get(j.job_id, 0),
                                                        j.submit_time, j.job_id))
        ineligible = {job.job_id: reason for job in order if (reason := ineligibility(job, snapshot)) is not None}
    decisions = Decisions(priorities=prio)
    throttle = Throttle(_running_per_array(snapshot.jobs), snapshot.accounts, snapshot.now, snapshot.fairshare,
                        snapshot.licenses)
    scheduler.plan(snapshot, order, ineligible, select, throttle, decisions)
    return decisions


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


def tier(partitions: Mapping[str, PartitionSnap], job: JobRequest) -> int:
    """The PriorityTier of the job's partition (jobs of a higher tier are scheduled first)."""
    part = partitions.get(job.partition)
    return part.priority_tier if part is not None else 1


def _running_per_array(jobs: Mapping[int, JobBrief]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for brief in jobs.values():
        if brief.array_job_id and brief.state in (states.RUNNING, states.COMPLETING):
            counts[brief.array_job_id] = counts.get(brief.array_job_id, 0) + 1
    return counts


def ineligibility(job: JobRequest, snapshot: Snapshot) -> str | None:
    """The reason a pending job may not be considered now, or None if it may.

    The array throttle is not checked here: it changes as a pass starts tasks
    (see :class:`Throttle`)."""
    if job.hold:
        return states.R_HELD_ADMIN if job.hold == "admin" else states.R_HELD_USER
    if job.begin_time > snapshot.now:
        return states.R_BEGIN
    if job.deadline and snapshot.now + (job.time_limit_min if job.time_limit_min is not None else 1) * 60 \
            > job.deadline:  # it would end after its deadline: never started (the shell removes it)
        return states.R_DEADLINE
    if job.dependency:
        verdict = dependency_state(job, snapshot.jobs)
        if verdict is not None:
            return verdict
    if job.reservation:
        resv = snapshot.reservations.get(job.reservation)
        if resv is None:
            return states.R_RESV_DELETED
        if resv.start > snapshot.now and "FLEX" not in resv.flags:
            return states.R_RESERVATION
    part = snapshot.partitions.get(job.partition)
    if part is None or part.state != "UP":
        return states.R_PART_DOWN
    if part.max_time_min is not None and (job.time_limit_min is None or job.time_limit_min > part.max_time_min) \
            and not qos_flag(snapshot, job, "PartitionTimeLimit"):  # a QOS that may go over MaxTime
        return states.R_PART_TIME
    if part.max_nodes is not None and job.nodes_min > part.max_nodes:
        return states.R_PART_NODES
    return None


def qos_flag(snapshot: Snapshot, job: JobRequest, flag: str) -> bool:
    """Whether the job's QOS has this flag (wattsched.limits.QOS_FLAGS)."""
    accounts = snapshot.accounts
    qos = accounts.qos.get(job.qos) if accounts is not None and job.qos else None
    return qos is not None and flag in qos.flags


_DEP_ITEM = re.compile(r"^(after|afterany|afterok|afternotok|aftercorr|singleton)((?::\d+(?:_\d+)?(?:\+\d+)?)*)$")


def parse_dependency(text: str) -> tuple[str, list[tuple[str, list[tuple[str, int]]]]]:
    """Parse ``--dependency``: returns the joiner (',' = all, '?' = any) and (type, [(id, minutes)])."""
    text = text.strip()
    joiner = "?" if "?" in text else ","
    items = []
    for part in text.split(joiner):
        match = _DEP_ITEM.match(part)
        if not match or (match.group(1) != "singleton" and not match.group(2)):
            raise ValueError(f"Job dependency problem: invalid dependency '{part}'")
        targets = []
        for target in filter(None, match.group(2).split(":")):
            job_ref, _, delay = target.partition("+")
            targets.append((job_ref, int(delay or 0)))
        items.append((match.group(1), targets))
    return joiner, items


def _targets(ref: str, jobs: Mapping[int, JobBrief]) -> list[JobBrief]:
    """The jobs a dependency reference names: one job, or every task of an array."""
    if "_" in ref:
        array_id, task = ref.split("_", 1)
        return [b for b in jobs.values() if b.array_job_id == int(array_id) and str(b.array_task_id) == task]
    job_id = int(ref)
    brief = jobs.get(job_id)
    tasks = [b for b in jobs.values() if b.array_job_id == job_id] if brief is None or brief.array_job_id \
        else []
    if tasks:
        return tasks
    return [brief] if brief else []


def dependency_state(job: JobRequest, jobs: Mapping[int, JobBrief]) -> str | None:
    """None when the job's dependencies are satisfied, else Dependency or DependencyNeverSatisfied."""
    try:
        joiner, items = parse_dependency(job.dependency)
    except ValueError:
        return states.R_DEP_NEVER
    verdicts = [_item_state(kind, targets, job, jobs) for kind, targets in items]
    if joiner == "?":
        if any(v is None for v in verdicts):
            return None
        return states.R_DEP_NEVER if all(v == states.R_DEP_NEVER for v in verdicts) else states.R_DEPENDENCY
    if any(v == states.R_DEP_NEVER for v in verdicts):
        return states.R_DEP_NEVER
    return states.R_DEPENDENCY if any(v is not None for v in verdicts) else None


def _item_state(kind: str, targets: list[tuple[str, int]], job: JobRequest,
                jobs: Mapping[int, JobBrief]) -> str | None:
    if kind == "singleton":
        for other in jobs.values():
            if other.job_id != job.job_id and other.user == job.user and other.name == job.name \
                    and other.state in (states.RUNNING, states.COMPLETING):
                return states.R_DEPENDENCY
        return None
    for ref, _delay in targets:
        briefs = _targets(ref, jobs)
        if not briefs:
            # A job that left the controller's memory finished long ago; Slurm treats the
            # dependency as satisfied for 'after'/'afterany' and unknown otherwise.
            if kind in ("afterok", "afternotok", "aftercorr"):
                return states.R_DEP_NEVER
            continue
        for brief in briefs:
            verdict = _one_target(kind, brief)
            if verdict is not None:
                return verdict
    return None


def _one_target(kind: str, brief: JobBrief) -> str | None:
    done = brief.state in states.FINISHED
    if kind == "after":
        return None if brief.state != states.PENDING else states.R_DEPENDENCY
    if not done:
        return states.R_DEPENDENCY
    succeeded = brief.state == states.COMPLETED and brief.exit_code == 0
    if kind in ("afterok", "aftercorr"):
        return None if succeeded else states.R_DEP_NEVER
    if kind == "afternotok":
        return None if not succeeded else states.R_DEP_NEVER
    return None  # afterany


def job_end(job: JobRequest, start: float) -> float:
    """When a job starting at ``start`` must end at the latest (infinity: no time limit)."""
    return start + job.time_limit_min * 60 if job.time_limit_min is not None else math.inf


def blocking_reservations(job: JobRequest, snapshot: Snapshot, start: float, end: float) -> list[ResvSnap]:
    """The reservations whose nodes the job may not use over [start, end): those overlapping it
    that it is not a member of."""
    return [r for r in snapshot.reservations.values() if r.name != job.reservation and r.overlaps(start, end)]


class Candidates:
    """The nodes a job may use: the ones that are on first (see POWERED_ON), lowest Weight first,
    then by name order; built once per request shape (and, with a :class:`NodeMemo`, kept across
    passes while the nodes' fixed attributes stay), since a 5,000-node partition is too long to
    filter again for every job.

    A job in a reservation may use only that reservation's nodes, and only within its window,
    unless the reservation has the FLEX flag (then it may also start early, overrun and use
    other free nodes). Nobody else may use a reservation's nodes during its window."""

    def __init__(self, snapshot: Snapshot, memo: NodeMemo):
        self.snapshot = snapshot
        self.memo = memo
        self.memo.refresh(snapshot)
        self.by_name = self.memo.by_name

    def for_job(self, job: JobRequest, usable: Collection[str] | None, start: float | None = None) -> list[NodeSnap]:
        """Nodes for ``job`` starting at ``start`` (default now); with ``usable``, only those in it
        (the nodes with a free CPU)."""
        snapshot = self.snapshot
        start = snapshot.now if start is None else start
        blocking: tuple[str, ...] = ()
        if snapshot.reservations:
            end = job_end(job, start)
            blocking = tuple(sorted(r.name for r in blocking_reservations(job, snapshot, start, end)))
            resv = snapshot.reservations.get(job.reservation) if job.reservation else None
            if resv is not None and "FLEX" not in resv.flags and (start < resv.start or end > resv.end):
                return []
        key = (job.partition, job.reservation, job.exc_nodes, job.features, blocking)
        built = self.memo.lists.get(key)
        if built is None:
            names = self._build(job, blocking)
            built = self.memo.lists[key] = (names, {name: p for p, name in enumerate(names)})
        names, position = built
        by_name = self.by_name
        if usable is None:
            return [by_name[name] for name in names]
        if len(usable) * 8 < len(names):  # a busy machine: pick the few usable nodes out by position
            return [by_name[name] for _p, name in sorted((position[n], n) for n in usable if n in position)]
        return [by_name[name] for name in names if name in usable]

    def index(self, job: JobRequest, kind: str,
              build: Callable[[list[NodeSnap], Mapping[str, tuple[int, int]]], NodeIndex]) -> NodeIndex | None:
        """The select plugin's ``kind`` of index over the job's candidate list, built on first use
        from the nodes in list order and their free resources, then kept current by the memo. Only
        for jobs whose candidates are their partition's nodes as they stand now (no reservation
        anywhere, no excluded nodes, no features): None for the others."""
        if self.snapshot.reservations or job.reservation or job.exc_nodes or job.features:
            return None
        key = (job.partition, "", (), (), ())
        found = self.memo.indexes.get((key, kind))
        if found is None:
            built = self.memo.lists.get(key)
            if built is None:
                names = self._build(job, ())
                built = self.memo.lists[key] = (names, {name: p for p, name in enumerate(names)})
            free = collections.ChainMap(self.memo.planned, self.memo.free)  # with this pass's starts
            found = self.memo.indexes[(key, kind)] = build([self.by_name[n] for n in built[0]], free)
        return found

    def _build(self, job: JobRequest, blocking: tuple[str, ...]) -> list[str]:
        snapshot = self.snapshot
        excluded = set(job.exc_nodes)
        for name in blocking:
            excluded |= snapshot.reservations[name].nodes
        resv = snapshot.reservations.get(job.reservation) if job.reservation else None
        allowed = resv.nodes if resv is not None and "FLEX" not in resv.flags else None
        wanted = set(job.features)
        by_name = self.by_name
        result = [node for name in snapshot.partitions[job.partition].nodes
                  if (node := by_name.get(name)) is not None and node.schedulable]
        if excluded or allowed is not None or wanted:
            result = [n for n in result if n.name not in excluded and (allowed is None or n.name in allowed)
                      and (not wanted or wanted <= n.features)]
        # stable: name order within equal weight, the nodes that are on before the others
        if len({(n.wake, n.weight) for n in result}) > 1:
            result.sort(key=lambda n: (n.wake, n.weight))
        return [n.name for n in result]


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
        return power_mod.admission(self.snap, self.current, self.added(alloc), start, end, job.reservation)

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
    user pinned --cpu-freq)."""
    predicted = power_mod.predicted_node_watts(snap, job.exp_watts, job.nodes_min, job.exclusive)
    if predicted is not None:
        alloc = replace(alloc, node_watts=predicted)
    reason = check(alloc)
    if reason is None or not job.power_fit or job.cpu_freq_pinned:
        return alloc, reason
    tables = [dict(snap.nodes[n].freq_watts) for n in alloc.cpus if n in snap.nodes]
    if not tables or len(tables) < len(alloc.cpus) or not all(tables):
        return alloc, reason
    for khz in sorted(set.intersection(*(set(t) for t in tables)), reverse=True):
        fitted = replace(alloc, cpu_freq_khz=khz)
        if check(fitted) is None:
            return fitted, None
    return alloc, reason


_ALWAYS = power_mod.NodePower(0, 0, 0, 0, always_max=True)


def unplaced_reason(job: JobRequest, snapshot: Snapshot, by_name: Mapping[str, NodeSnap]) -> str:
    """Slurm's reason for an eligible job that found no nodes: a named node is unavailable, a
    maintenance reservation is in the way, or simply Resources."""
    blocking = blocking_reservations(job, snapshot, snapshot.now, job_end(job, snapshot.now))
    reserved = {n for r in blocking for n in r.nodes}
    if any(n not in by_name or not by_name[n].schedulable or n in reserved for n in job.req_nodes):
        return states.R_NODE_NOT_AVAIL
    part = snapshot.partitions[job.partition]
    if any("MAINT" in r.flags and not r.nodes.isdisjoint(part.nodes) for r in blocking):
        return states.R_MAINT
    return states.R_RESOURCES


def feasible(job: JobRequest, partition: PartitionSnap, nodes: Mapping[str, NodeSnap], select: SelectPlugin,
             def_mem_per_cpu_mb: int) -> bool:
    """Whether the job could ever run in the partition, were all its nodes idle and up."""
    excluded = set(job.exc_nodes)
    wanted = set(job.features)
    pool = [nodes[n] for n in partition.nodes if n in nodes and n not in excluded
            and (not wanted or wanted <= nodes[n].features)]
    if any(n not in partition.nodes for n in job.req_nodes):
        return False
    pool = [NodeSnap(n.name, n.cpus, n.cpus, n.real_memory_mb, n.real_memory_mb, n.weight, n.features, True,
                     gpus=n.gpus, free_gpus=n.gpus, tmp_disk_mb=n.tmp_disk_mb) for n in pool]
    pool.sort(key=lambda n: n.weight)
    free = {n.name: (n.cpus, n.real_memory_mb) for n in pool}
    gpus = {n.name: dict(n.gpus) for n in pool if n.gpus} if job.gpus else None
    return select.select(job, pool, free, def_mem_per_cpu_mb, gpus) is not None

"""The controller's live state: the record every transition reads and changes.

``ClusterState`` holds the records (jobs, nodes, reservations, shares, power) and the few
objects that own a concern's own bookkeeping (the journal of unsaved changes, the snapshot
memos). It has no behaviour of its own beyond marking a job changed: the transitions live in
modules named for what they own, as slurmctld's job_mgr, node_mgr, step_mgr and power_save do,
and their callers (the routes, the loop, the dispatcher) call them by name:

- jobs: submission, updates, requeue, cancel, suspend;  jobend: how a job ends and settles;
- launching: the scheduling pass and a job's start;  steps: job steps and salloc's release;
- nodes: agents' heartbeats, node states, reconfigure;  jobenergy: a job's energy from readings;
- powersavecontrol: power saving;  capsetting: the cap as set;  resvcontrol: reservations;
- timers: the clock;
- snapshots: the policy core's view;  statesave: the journal, flush and restore;
- permissions: administrators, owners and job references;  partitions: scontrol's partition changes.

All mutations happen on the controller's event loop; each takes ``now`` explicitly and
returns the actions (wattsched.controller.actions) that the dispatcher then carries out
against the node agents. Changed jobs are written to the state store by statesave.flush before
a request is answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wattsched.capschedule import CapStep
from wattsched.config import Config, PartitionConf
from wattsched.controller import energysplit, snapshots, statesave
from wattsched.controller.budgetcontrol import BudgetControl
from wattsched.controller.capcontrol import CapControl
from wattsched.controller.carbonfeed import CarbonFeed
from wattsched.controller.powersaving import PowerSaving
from wattsched.controller.priority import Shares
from wattsched.controller.reservations import ReservationBook
from wattsched.controller.store import StateStore
from wattsched.controller.triggerctl import TriggerBook
from wattsched.model import Job, Node
from wattsched.scheduling.plugins import PriorityPlugin, SchedulerPlugin, SelectPlugin


@dataclass(slots=True)
class Plugins:
    priority: PriorityPlugin
    scheduler: SchedulerPlugin
    select: SelectPlugin
    job_submit: tuple[Any, ...] = ()  # JobSubmitPlugins, in order (wattsched.plugins.job_submit)


@dataclass(slots=True)
class PassStats:
    """sdiag's figures: the main scheduling loop and the backfill passes within it."""

    cycles: int = 0
    last_ms: float = 0.0
    max_ms: float = 0.0
    total_ms: float = 0.0
    started: int = 0
    depth: int = 0
    depth_total: int = 0
    bf_cycles: int = 0
    bf_last_ms: float = 0.0
    bf_max_ms: float = 0.0
    bf_total_ms: float = 0.0
    bf_last_time: float = 0.0
    bf_backfilled: int = 0
    bf_last_backfilled: int = 0
    bf_last_depth: int = 0
    bf_depth_total: int = 0
    bf_queue_len: int = 0

    def pass_done(self, ms: float) -> None:
        self.cycles += 1
        self.last_ms, self.max_ms, self.total_ms = ms, max(self.max_ms, ms), self.total_ms + ms
        self.depth_total += self.depth

    def backfill_done(self, now: float, ms: float, backfilled: int, depth: int, queue_len: int) -> None:
        self.bf_cycles += 1
        self.bf_last_time = now
        self.bf_last_ms, self.bf_max_ms, self.bf_total_ms = ms, max(self.bf_max_ms, ms), self.bf_total_ms + ms
        self.bf_backfilled += backfilled
        self.bf_last_backfilled = backfilled
        self.bf_last_depth, self.bf_depth_total = depth, self.bf_depth_total + depth
        self.bf_queue_len = queue_len


@dataclass
class ClusterState:
    config: Config
    store: StateStore
    plugins: Plugins
    key: bytes
    jobs: dict[int, Job] = field(default_factory=dict)
    # array job id -> its tasks in the controller: the array's script is dropped with its last
    array_tasks: dict[int, int] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    next_job_id: int = 1
    stats: PassStats = field(default_factory=PassStats)
    resv: ReservationBook = field(default_factory=ReservationBook)
    shares: Shares = field(default_factory=Shares)
    power_cap: float | None = None  # watts, math.inf (INFINITE) or None (capping off)
    # the cap's schedule (wattsched.capschedule): steps set at run time, and PowerCapSchedule's
    cap_steps: list[CapStep] = field(default_factory=list)
    cap_file_steps: list[CapStep] = field(default_factory=list)
    next_cap_step: int = 1
    power_saving: PowerSaving | None = None
    energy_totals: energysplit.EnergyTotals = field(default_factory=energysplit.EnergyTotals)
    energy_due: set[int] = field(default_factory=set)  # the jobs whose energy_pending is set
    with_deadline: set[int] = field(default_factory=set)  # pending jobs with a --deadline (checked each second)
    # (uid, submit key) -> the jobs that submission made: a retried submission gets them again
    submissions: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    profiles_due: list[tuple[str, int, int]] = field(default_factory=list)  # (user, uid, job): profiles to merge
    journal: statesave.Journal = field(default_factory=statesave.Journal)
    memo: snapshots.Memos = field(default_factory=snapshots.Memos)
    cap: CapControl = field(default_factory=CapControl)  # meeting a lowered cap
    budget: BudgetControl = field(default_factory=BudgetControl)  # moving the cap between busy nodes' limits
    carbon: CarbonFeed | None = None  # the grid's carbon intensity (CarbonIntensity)
    # user -> when root revoked their tokens: a user's token issued at or before it is refused
    token_revocations: dict[str, float] = field(default_factory=dict)
    # the configuration file's partitions; config.partitions differs once scontrol changed them
    configured_partitions: tuple[PartitionConf, ...] = ()
    triggers: TriggerBook = field(default_factory=TriggerBook)  # strigger's

    def touch(self, job: Job, request_changed: bool = True) -> None:
        """Mark a job changed: to be saved, and its cached views rebuilt."""
        self.journal.dirty.add(job.job_id)
        self.memo.job_changed(job.job_id, request_changed)

    @property
    def capping(self) -> bool:
        """Whether the cap is on now or scheduled (the scheduler then counts power)."""
        return self.power_cap is not None or bool(self.cap_steps or self.cap_file_steps)

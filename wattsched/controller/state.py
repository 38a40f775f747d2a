"""The controller's live state, and the facade the API layer calls.

``ClusterState`` holds the records (jobs, nodes, reservations, shares, power) and the few
objects that own a concern's own bookkeeping (the journal of unsaved changes, the snapshot
memos); the transitions live in modules named for what they own, as slurmctld's job_mgr,
node_mgr, step_mgr and power_save do:

- jobs: submission, updates, requeue, cancel, suspend;  jobend: how a job ends and settles;
- launching: the scheduling pass and a job's start;  steps: job steps and salloc's release;
- nodes: agents' heartbeats, node states, reconfigure;  jobenergy: a job's energy from readings;
- powercontrol: power saving and the cap;  resvcontrol: reservations;  timers: the clock;
- snapshots: the policy core's view;  statesave: the journal, flush and restore;
- permissions: administrators, owners and job references;  partitions: scontrol's partition changes.

All mutations happen on the controller's event loop; each takes ``now`` explicitly and
returns the actions (wattsched.controller.actions) that the dispatcher then carries out
against the node agents. Changed jobs are written to the state store by :meth:`flush` before a
request is answered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wattsched import power
from wattsched.api import (
    AgentHeartbeat,
    JobEvent,
    JobSubmit,
    JobUpdate,
    ReservationSpec,
    StepComplete,
    StepCreate,
    WillRun,
)
from wattsched.auth import Identity
from wattsched.capschedule import CapStep
from wattsched.config import Config, PartitionConf
from wattsched.controller import (
    energy,
    jobend,
    jobenergy,
    jobs,
    launching,
    nodes,
    permissions,
    powercontrol,
    resvcontrol,
    snapshots,
    statesave,
    steps,
    timers,
)
from wattsched.controller.actions import Action, AdminProgram
from wattsched.controller.capcontrol import CapControl
from wattsched.controller.carbonfeed import CarbonFeed
from wattsched.controller.powersaving import PowerSaving
from wattsched.controller.priority import Shares
from wattsched.controller.reservations import ReservationBook
from wattsched.controller.store import StateStore
from wattsched.controller.triggerctl import TriggerBook
from wattsched.model import Job, Node, Reservation, Step
from wattsched.nodestates import PowerState
from wattsched.scheduling.plugins import PriorityPlugin, SchedulerPlugin, SelectPlugin
from wattsched.scheduling.records import Snapshot


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
    energy_totals: energy.EnergyTotals = field(default_factory=energy.EnergyTotals)
    energy_due: set[int] = field(default_factory=set)  # the jobs whose energy_pending is set
    with_deadline: set[int] = field(default_factory=set)  # pending jobs with a --deadline (checked each second)
    # (uid, submit key) -> the jobs that submission made: a retried submission gets them again
    submissions: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    profiles_due: list[tuple[str, int, int]] = field(default_factory=list)  # (user, uid, job): profiles to merge
    journal: statesave.Journal = field(default_factory=statesave.Journal)
    memo: snapshots.Memos = field(default_factory=snapshots.Memos)
    cap: CapControl = field(default_factory=CapControl)  # meeting a lowered cap
    carbon: CarbonFeed | None = None  # the grid's carbon intensity (CarbonIntensity)
    # user -> when root revoked their tokens: a user's token issued at or before it is refused
    token_revocations: dict[str, float] = field(default_factory=dict)
    # the configuration file's partitions; config.partitions differs once scontrol changed them
    configured_partitions: tuple[PartitionConf, ...] = ()
    triggers: TriggerBook = field(default_factory=TriggerBook)  # strigger's

    @classmethod
    def open(cls, config: Config, store: StateStore, plugins: Plugins, key: bytes, now: float) -> ClusterState:
        state = cls(config=config, store=store, plugins=plugins, key=key, power_saving=PowerSaving(config),
                    configured_partitions=config.partitions)
        member = config.node_partitions()
        for conf in config.nodes:
            state.nodes[conf.name] = nodes.new_node(conf, member.get(conf.name, ()), now)
        statesave.restore(state)
        state.cap_file_steps = powercontrol.read_schedule_file(config, now)
        state.carbon = CarbonFeed(config) if config.carbon_intensity else None
        return state

    def touch(self, job: Job, request_changed: bool = True) -> None:
        """Mark a job changed: to be saved, and its cached views rebuilt."""
        self.journal.dirty.add(job.job_id)
        self.memo.job_changed(job.job_id, request_changed)

    # --- the facade: what the API layer, the dispatcher and the loop call ---------------------

    def flush(self) -> None:
        statesave.flush(self)

    def reconfigure(self, config: Config, plugins: Plugins, now: float) -> list[str]:
        changes = nodes.reconfigure(self, config, plugins, now)
        self.configured_partitions = config.partitions  # what scontrol changed in them is gone
        return changes

    def brief(self, job: Job, now: float) -> dict:
        return snapshots.brief(self, job, now)

    def snapshot(self, now: float, backfill_due: bool = True) -> Snapshot:
        return snapshots.snapshot(self, now, backfill_due)

    def node_power(self) -> dict[str, power.NodePower]:
        return snapshots.node_power(self)

    def power_states(self) -> dict[str, PowerState]:
        return snapshots.power_states(self)

    def schedule(self, now: float) -> list[Action]:
        return launching.schedule(self, now)

    def admin_program_done(self, program: AdminProgram, code: int, error: str, now: float) -> list[Action]:
        return launching.admin_program_done(self, program, code, error, now)

    def submit(self, req: JobSubmit, who: Identity, now: float) -> list[Job]:
        return jobs.submit(self, req, who, now)

    def withdraw(self, submitted: list[Job]) -> None:
        jobs.withdraw(self, submitted)

    def will_run(self, req: JobSubmit, who: Identity, now: float) -> tuple[Job, WillRun]:
        return jobs.will_run(self, req, who, now)

    def update(self, targets: Iterable[Job], upd: JobUpdate, who: Identity, now: float) -> None:
        jobs.update(self, targets, upd, who, now)

    def requeue(self, targets: Iterable[Job], who: Identity, now: float) -> list[Action]:
        return jobs.requeue(self, targets, who, now)

    def cancel(self, targets: Iterable[Job], who: Identity, sig: int | None, batch_only: bool,
               now: float, full: bool = False, by_task: frozenset[int] = frozenset()) -> list[Action]:
        return jobs.cancel(self, targets, who, sig, batch_only, now, full, by_task)

    def suspend(self, targets: Iterable[Job], resume: bool, who: Identity, now: float) -> list[Action]:
        return jobs.suspend(self, targets, resume, who, now)

    def launched(self, job_id: int) -> None:
        jobs.launched(self, job_id)

    def batch_ended(self, event: JobEvent, now: float) -> list[Action]:
        return jobend.batch_ended(self, event, now)

    def node_clean(self, job_id: int, node: str) -> None:
        jobend.node_clean(self, job_id, node)

    def is_admin(self, who: Identity) -> bool:
        return permissions.is_admin(self, who)

    def resolve(self, job_ref: str) -> list[Job]:
        return permissions.resolve(self, job_ref)

    def heartbeat(self, hb: AgentHeartbeat, now: float) -> tuple[list[int], list[int], list[Action]]:
        return nodes.heartbeat(self, hb, now)

    def update_nodes(self, names: list[str], new_state: str, reason: str, who: Identity,
                     now: float, instance: tuple[str | None, str | None] = (None, None)) -> list[Action]:
        return nodes.update_nodes(self, names, new_state, reason, who, now, instance)

    def energies_so_far(self, targets: list[Job], now: float) -> dict[int, float]:
        return jobenergy.energies_so_far(self, targets, now)

    def check_timers(self, now: float) -> list[Action]:
        return timers.check_timers(self, now)

    def set_power_cap(self, value: str, who: Identity) -> None:
        powercontrol.set_power_cap(self, value, who)

    @property
    def capping(self) -> bool:
        """Whether the cap is on now or scheduled (the scheduler then counts power)."""
        return self.power_cap is not None or bool(self.cap_steps or self.cap_file_steps)

    def power_program_failed(self, kind: str, names: list[str], now: float) -> list[Action]:
        return powercontrol.power_program_failed(self, kind, names, now)

    def create_reservation(self, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
        return resvcontrol.create(self, spec, who, now)

    def update_reservation(self, name: str, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
        return resvcontrol.update(self, name, spec, who, now)

    def delete_reservation(self, name: str, who: Identity) -> Reservation:
        return resvcontrol.delete(self, name, who)

    def create_step(self, job: Job, req: StepCreate, who: Identity, now: float) -> tuple[Step, dict[str, list[int]]]:
        return steps.create_step(self, job, req, who, now)

    def step_credential(self, job: Job, step: Step, layout: dict[str, list[int]]) -> str:
        return steps.step_credential(self, job, step, layout)

    def bcast_credential(self, job: Job, nodelist: list[str], who: Identity, now: float) -> str:
        return steps.bcast_credential(self, job, nodelist, who, now)

    def cancel_step(self, job: Job, step_id: str, who: Identity, sig: int | None) -> list[Action]:
        return steps.cancel_step(self, job, step_id, who, sig)

    def complete_step(self, job: Job, step_id: str, done: StepComplete, who: Identity, now: float) -> None:
        steps.complete_step(self, job, step_id, done, who, now)

    def complete_allocation(self, job: Job, exit_code: int, term_signal: int, who: Identity,
                            now: float) -> list[Action]:
        return steps.complete_allocation(self, job, exit_code, term_signal, who, now)

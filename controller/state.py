"""The controller's live state and every transition of a job or node.

All mutations happen on the controller's event loop; each takes ``now`` explicitly and
returns the :class:`Action` s (launch a script, signal processes) that the dispatcher then
carries out against the node agents. Changed jobs are written to the state store by
:meth:`ClusterState.flush` before a request is answered.
"""

from __future__ import annotations

import functools
import grp
import json
import logging
import pwd
import signal as signal_mod
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from wattsched import auth, gres, hostlist, power, powersave, prologs, scheduling, states
from wattsched.api import (
    AgentHeartbeat,
    JobEvent,
    JobSubmit,
    JobUpdate,
    JobUsage,
    NodeReport,
    ReservationSpec,
    StepComplete,
    StepCreate,
    WillRun,
)
from wattsched.auth import Identity
from wattsched.config import Config, parse_power_cap
from wattsched.controller import energy, views
from wattsched.controller import submit as submit_mod
from wattsched.controller.powersaving import (
    RESUME_FAILED_REASON,
    RESUME_TIMEOUT_REASON,
    SUSPEND_FAILED_REASON,
    PowerProgram,
    PowerSaving,
)
from wattsched.controller.priority import Shares
from wattsched.controller.reservations import ReservationBook, ReservationError
from wattsched.controller.store import StateStore
from wattsched.model import Job, Node, Reservation, Step
from wattsched.usage import merge as merge_usage

log = logging.getLogger("wattsched.controller")
_WAKE = {states.P_POWERING_UP: scheduling.POWERING_UP, states.P_POWERED_DOWN: scheduling.POWERED_DOWN}

NOT_RESPONDING = "Not responding"
MAX_TASKS_PER_NODE = 512  # Slurm's MaxTasksPerNode default: a step may not place more on a node
MAX_JOB_REF = 64  # characters of a job reference (12, 12_3, 12_[1-4]) before it is looked at
# pending reasons of jobs that no node switching would help start now
_NOT_WAITING_FOR_NODES = frozenset({states.R_DEPENDENCY, states.R_DEP_NEVER, states.R_BEGIN, states.R_HELD_USER,
                                    states.R_HELD_ADMIN, states.R_PART_DOWN, states.R_PART_TIME,
                                    states.R_PART_NODES, states.R_RESERVATION, states.R_RESV_DELETED})


# the signal number Slurm records for a step its memory limit ended (sacct's ExitCode 0:125)
OOM_SIGNAL = 125


class Refused(Exception):
    """A request the controller refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Launch:
    job: Job


@dataclass(slots=True)
class Signal:
    job_id: int
    nodes: list[str]
    signal: int = signal_mod.SIGTERM
    batch_only: bool = False
    terminate: bool = False


@dataclass(slots=True)
class AdminProgram:
    """PrologSlurmctld or EpilogSlurmctld for a job, with Slurm's environment (run in a thread)."""

    kind: str  # "prolog" or "epilog"
    job_id: int
    path: str
    env: dict[str, str]


@dataclass(slots=True)
class Freeze:
    """Suspend (freeze) or resume (thaw) a job's processes on its nodes."""

    job_id: int
    nodes: list[str]
    frozen: bool


Action = Launch | Signal | PowerProgram | AdminProgram | Freeze


@dataclass(slots=True)
class Plugins:
    priority: scheduling.PriorityPlugin
    scheduler: scheduling.SchedulerPlugin
    select: scheduling.SelectPlugin


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
    power_saving: PowerSaving | None = None
    energy_totals: energy.EnergyTotals = field(default_factory=energy.EnergyTotals)
    _energy_due: set[int] = field(default_factory=set)  # the jobs whose energy_pending is set
    profiles_due: list[tuple[str, int, int]] = field(default_factory=list)  # (user, uid, job): profiles to merge
    job_usage: dict[int, dict[str, JobUsage]] = field(default_factory=dict)  # running jobs, per node (sstat)
    _resv_dirty: list[Reservation] = field(default_factory=list)
    _dirty: set[int] = field(default_factory=set)
    _purged: list[int] = field(default_factory=list)
    _node_events: list[dict] = field(default_factory=list)
    _meta_dirty: bool = False
    _requests: dict[int, scheduling.JobRequest] = field(default_factory=dict)
    _briefs: dict[int, dict] = field(default_factory=dict)
    _partition_snaps: dict[str, scheduling.PartitionSnap] | None = None
    _queue_memo: scheduling.QueueMemo = field(default_factory=scheduling.QueueMemo)

    # --- start-up ----------------------------------------------------------------------------

    @classmethod
    def open(cls, config: Config, store: StateStore, plugins: Plugins, key: bytes, now: float) -> ClusterState:
        state = cls(config=config, store=store, plugins=plugins, key=key, power_saving=PowerSaving(config))
        for conf in config.nodes:
            state.nodes[conf.name] = _new_node(config, conf, now)
        saved_nodes = json.loads(store.get_meta("nodes", "{}") or "{}")
        for name, saved in saved_nodes.items():
            node = state.nodes.get(name)
            if node is not None:
                node.drain, node.reason = saved["drain"], saved["reason"]
                node.reason_time, node.reason_uid = saved.get("reason_time", 0), saved.get("reason_uid", 0)
                if saved.get("down"):
                    node.base_state = states.N_DOWN
                node.power, node.power_since = saved.get("power", ""), saved.get("power_since", 0.0)
                node.power_job = saved.get("power_job", 0)
        state.next_job_id = int(store.get_meta("next_job_id", str(config.first_job_id)) or 1)
        saved_cap = store.get_meta("power_cap")
        state.power_cap = config.power_cap if saved_cap is None else json.loads(saved_cap)
        state.resv = ReservationBook([Reservation.from_dict(r) for r in store.load_reservations()],
                                     int(store.get_meta("next_resv_id", "1") or 1))
        for data in store.load_jobs():
            job = Job.from_dict(data)
            state.jobs[job.job_id] = job
            if job.energy_pending:
                state._energy_due.add(job.job_id)
            if job.holds_nodes:
                state._hold_resources(job, +1)
        return state

    def reconfigure(self, config: Config, plugins: Plugins, now: float) -> list[str]:
        """``scontrol reconfigure``: take a re-read configuration without losing a job. New nodes and
        partitions, changed node sizes and parameters apply at once; a setting that needs a restart,
        a node removed while a job holds it or shrunk below what its jobs hold is refused (Refused,
        nothing changed). Returns what changed."""
        for key, attr in RESTART_ONLY.items():
            if getattr(config, attr) != getattr(self.config, attr):
                raise Refused(f"{key} cannot change without restarting the controller "
                              f"({getattr(self.config, attr)!r} -> {getattr(config, attr)!r})", 409)
        wanted = {conf.name: conf for conf in config.nodes}
        for name, node in self.nodes.items():
            conf = wanted.get(name)
            if conf is None and (node.alloc_cpus or any(name in j.completing_nodes for j in self.jobs.values())):
                raise Refused(f"Node {name} cannot be removed while it runs jobs", 409)
            if conf is not None and (conf.cpus < node.alloc_cpus or conf.real_memory_mb < node.alloc_mem_mb
                                     or any(i >= len(conf.gpus) for i in node.alloc_gpus)):
                raise Refused(f"Node {name} cannot shrink below what its jobs hold", 409)
        changes = []
        for name in [n for n in self.nodes if n not in wanted]:
            del self.nodes[name]
            changes.append(f"node {name} removed")
        for name, conf in wanted.items():
            node = self.nodes.get(name)
            if node is None:
                self.nodes[name] = _new_node(config, conf, now)
                changes.append(f"node {name} added")
                continue
            fields = _configured_fields(config, conf)
            if any(getattr(node, k) != v for k, v in fields.items()):
                for key, value in fields.items():
                    setattr(node, key, value)
                node.refresh_base_state()
                changes.append(f"node {name} changed")
        old_parts = {p.name: p for p in self.config.partitions}
        changes += [f"partition {p.name} {'added' if p.name not in old_parts else 'changed'}"
                    for p in config.partitions if old_parts.get(p.name) != p]
        new_parts = {p.name for p in config.partitions}
        changes += [f"partition {name} removed" for name in old_parts if name not in new_parts]
        before = dict(self.config.as_pairs())
        changes += [f"{key} changed" for key, value in config.as_pairs() if value != before.get(key)]
        if config.power_cap != self.config.power_cap:
            self.power_cap = config.power_cap
            self._meta_dirty = True
        self.config, self.plugins = config, plugins
        assert self.power_saving is not None
        self.power_saving.reconfigure(config)
        # every memo of the old configuration goes
        self._partition_snaps, self._requests, self._briefs = None, {}, {}
        self._queue_memo = scheduling.QueueMemo()
        self._save_nodes()
        return changes

    # --- persistence -----------------------------------------------------------------------

    def touch(self, job: Job, request_changed: bool = True) -> None:
        """Mark a job changed: to be saved, and its cached views rebuilt."""
        self._dirty.add(job.job_id)
        self._briefs.pop(job.job_id, None)
        if request_changed:
            self._requests.pop(job.job_id, None)

    def brief(self, job: Job, now: float) -> dict:
        """The job's listing record, built once per change (squeue asks for 10,000 of them)."""
        cached = self._briefs.get(job.job_id)
        if cached is None:
            cached = self._briefs[job.job_id] = views.job_brief(job, now)
        if job.state in (states.RUNNING, states.COMPLETING):
            return dict(cached, run_time_s=views.run_time(job, now))
        return cached

    def _save_nodes(self) -> None:
        self._meta_dirty = True

    def _node_event(self, node: Node, now: float, state: str, reason: str | None = None) -> None:
        self._node_events.append({"node": node.name, "state": state, "time": now,
                                  "reason": node.reason if reason is None else reason,
                                  "uid": node.reason_uid, "cluster": self.config.cluster_name})
        self._save_nodes()

    def flush(self) -> None:
        if not (self._dirty or self._purged or self._meta_dirty or self._node_events or self._resv_dirty):
            return
        meta = {"next_job_id": str(self.next_job_id), "next_resv_id": str(self.resv.next_id),
                "power_cap": json.dumps(self.power_cap)}
        if self._meta_dirty:
            meta["nodes"] = json.dumps({
                n.name: {"drain": n.drain, "reason": n.reason, "reason_time": n.reason_time,
                         "reason_uid": n.reason_uid,
                         "down": n.base_state == states.N_DOWN and n.reason != NOT_RESPONDING,
                         "power": n.power, "power_since": n.power_since, "power_job": n.power_job}
                for n in self.nodes.values() if n.drain or n.reason or n.power})
        jobs = [self.jobs[j].to_dict() for j in self._dirty if j in self.jobs]
        self.store.commit(jobs, self._purged, meta, self._node_events, [r.to_dict() for r in self._resv_dirty])
        self._resv_dirty = []
        self._dirty.clear()
        self._purged = []
        self._node_events = []
        self._meta_dirty = False

    # --- snapshots and scheduling --------------------------------------------------------------

    def partition_snaps(self) -> dict[str, scheduling.PartitionSnap]:
        """Built once: partitions come from the configuration alone, and one mapping from pass to
        pass lets the queue memo keep its eligibility verdicts."""
        if self._partition_snaps is None:
            self._partition_snaps = {p.name: scheduling.PartitionSnap(p.name, p.nodes, p.state, p.max_time_min,
                                                                      p.max_nodes, p.priority_job_factor)
                                     for p in self.config.partitions}
        return self._partition_snaps

    def node_snaps(self) -> dict[str, scheduling.NodeSnap]:
        return {n.name: scheduling.NodeSnap(n.name, n.cpus, n.cpus - n.alloc_cpus, n.real_memory_mb,
                                            n.real_memory_mb - n.alloc_mem_mb, n.weight, frozenset(n.features),
                                            n.schedulable, _WAKE.get(n.power, scheduling.POWERED_ON),
                                            n.gres, n.free_gpus())
                for n in self.nodes.values()}

    def _request(self, job: Job) -> scheduling.JobRequest:
        cached = self._requests.get(job.job_id)
        if cached is None:
            cached = scheduling.JobRequest(
                job_id=job.job_id, user=job.user, partition=job.partition, submit_time=job.submit_time,
                name=job.name, nodes_min=job.nodes_min, nodes_max=job.nodes_max, ntasks=job.ntasks,
                ntasks_set=job.ntasks_set, ntasks_per_node=job.ntasks_per_node,
                cpus_per_task=job.cpus_per_task, mem_per_node_mb=job.mem_per_node_mb,
                mem_per_cpu_mb=job.mem_per_cpu_mb, exclusive=job.exclusive, req_nodes=tuple(job.req_nodes),
                exc_nodes=tuple(job.exc_nodes), features=tuple(job.features), time_limit_min=job.time_limit_min,
                begin_time=job.begin_time, dependency=job.dependency, hold=job.hold,
                admin_priority=job.admin_priority, nice=job.nice, array_job_id=job.array_job_id,
                array_throttle=job.array_throttle, account=job.account, reservation=job.reservation,
                cpu_freq_pinned=bool(job.cpu_freq), power_fit=job.power_fit, gpus=job.gpu_request)
            self._requests[job.job_id] = cached
        return cached

    def snapshot(self, now: float, backfill_due: bool = True) -> scheduling.Snapshot:
        # a requeued job waits until its previous run is gone from every node (Slurm's COMPLETING flag)
        pending = tuple(self._request(j) for j in self.jobs.values()
                        if j.state == states.PENDING and not j.completing_nodes)
        needs_briefs = any(r.dependency or r.array_throttle for r in pending)
        briefs = {j.job_id: scheduling.JobBrief(j.job_id, j.state, j.user, j.name, j.exit_code, j.term_signal,
                                                j.array_job_id, j.array_task_id, j.start_time)
                  for j in self.jobs.values()} if needs_briefs else {}
        running = tuple(
            scheduling.RunningJob(j.job_id, j.alloc_cpus, {n: j.alloc_mem_mb for n in j.alloc_cpus},
                                  j.start_time + j.time_limit_min * 60 if j.time_limit_min is not None else None,
                                  self._gpus_by_type(j))
            for j in self.jobs.values() if j.holds_nodes) \
            if backfill_due or self.power_cap is not None else ()
        return scheduling.Snapshot(now=now, nodes=tuple(self.node_snaps().values()),
                                   partitions=self.partition_snaps(), pending=pending, jobs=briefs,
                                   def_mem_per_cpu_mb=self.config.def_mem_per_cpu_mb, running=running,
                                   backfill_due=backfill_due, reservations=self.resv.snapshots(),
                                   fairshare=self.shares.factors, power=self.power_snap())

    def _gpus_by_type(self, job: Job) -> dict[str, dict[str, int]]:
        """The job's GPUs per node, counted by type (as a policy sees them)."""
        result: dict[str, dict[str, int]] = {}
        for name, indices in job.alloc_gpus.items():
            node = self.nodes.get(name)
            if node is None:
                continue
            kinds = {d.index: d.kind for d in node.gpus}
            counts = result.setdefault(name, {})
            for index in indices:
                counts[kinds.get(index, "")] = counts.get(kinds.get(index, ""), 0) + 1
        return result

    # --- power ---------------------------------------------------------------------------------

    def node_power(self) -> dict[str, power.NodePower]:
        """Each node's watts; a busy node whose jobs all run at a capped frequency counts their watts."""
        capped: dict[str, list[int | None]] = {}
        for job in self.jobs.values():
            if job.holds_nodes:
                for name in job.alloc_cpus:
                    capped.setdefault(name, []).append(job.cpu_freq_khz)
        result = {}
        for n in self.nodes.values():
            idle, most = n.idle_watts or 0, n.max_watts or 0
            node = power.NodePower(idle, most, idle if n.power_save_watts is None else n.power_save_watts,
                                   most if n.down_watts is None else n.down_watts, n.power_cap_priority == 0,
                                   freq_watts=n.cpu_freq_watts)
            freqs = capped.get(n.name, [])
            if freqs and None not in freqs:
                node = replace(node, busy=max(node.busy_at(f) for f in freqs))
            result[n.name] = node
        return result

    def power_states(self) -> dict[str, str]:
        """Each node's state for power: busy (allocated or mixed), idle, powered down (saved), down.
        A node powering down still counts as idle until it is off: the cap is never broken."""
        result = {}
        for n in self.nodes.values():
            if n.power == states.P_POWERED_DOWN:
                result[n.name] = power.SAVED
            elif n.base_state in (states.N_DOWN, states.N_UNKNOWN, states.N_FUTURE) or n.not_responding:
                result[n.name] = power.DOWN
            else:
                result[n.name] = power.BUSY if n.alloc_cpus else power.IDLE
        return result

    def power_snap(self) -> power.PowerSnap | None:
        if self.power_cap is None:
            return None
        return power.PowerSnap(self.node_power(), self.power_states(), self.power_cap, self.resv.power_snapshots())

    def set_power_cap(self, value: str, who: Identity) -> None:
        if not self.is_admin(who):
            raise Refused("Access/permission denied", 403)
        try:
            self.power_cap = parse_power_cap(value)
        except ValueError as exc:
            raise Refused(f"Invalid power cap: {value}") from exc
        self._meta_dirty = True

    def schedule(self, now: float) -> list[Action]:
        """One scheduling pass: call the pure core, then apply its decisions. A backfill
        scheduler plans the whole queue every bf_interval; in between, passes are strict."""
        backfill = getattr(self.plugins.scheduler, "backfill", False)
        due = backfill and now - self.stats.bf_last_time >= self.config.scheduler_parameters.bf_interval_s
        started = time.perf_counter()
        snap = self.snapshot(now, due)
        decisions = scheduling.schedule(snap, self.plugins.priority, self.plugins.scheduler, self.plugins.select,
                                        self._queue_memo)
        if due:
            self.stats.backfill_done(now, (time.perf_counter() - started) * 1000, decisions.backfilled,
                                     decisions.backfill_depth, len(snap.pending))
            for job_id, when in decisions.expected_start.items():
                job = self.jobs[job_id]
                if job.expected_start != when:
                    job.expected_start = when
                    self._briefs.pop(job_id, None)
        for job_id, prio in decisions.priorities.items():
            job = self.jobs[job_id]
            if job.priority != prio:
                job.priority = prio
                self._briefs.pop(job_id, None)
        for job_id, reason in decisions.reasons.items():
            job = self.jobs[job_id]
            if job.reason != reason:
                job.reason = reason
                self.touch(job, request_changed=False)
        actions: list[Action] = []
        for job_id, alloc in decisions.starts:
            actions.extend(self._start(self.jobs[job_id], alloc, now))
        self.stats.started += len(decisions.starts)
        self.stats.depth = len(snap.pending)
        return actions

    def _start(self, job: Job, alloc: scheduling.Allocation, now: float) -> list[Action]:
        job.state = states.RUNNING
        job.reason = states.R_NONE
        job.start_time = now
        job.expected_start = 0.0
        job.cpu_freq_khz = alloc.cpu_freq_khz
        job.alloc_cpus = dict(alloc.cpus)
        job.nodes_expr = hostlist.compress(alloc.cpus)
        job.tasks_per_node = dict(alloc.tasks)
        job.alloc_mem_mb = max(alloc.mem_mb.values(), default=0)
        job.alloc_gpus = {}
        for name, kinds in alloc.gpus.items():
            node = self.nodes[name]
            chosen: list[int] = []
            for kind, count in kinds.items():  # the policy counted by type: the lowest free numbers of each
                chosen += gres.pick(node.gpus, [*node.alloc_gpus, *chosen], kind, count)
            job.alloc_gpus[name] = sorted(chosen)
        job.batch_host = next(iter(alloc.cpus))
        job.launched = False
        self._hold_resources(job, +1)
        self.touch(job)
        waking = [n for n in alloc.cpus if self.nodes[n].power in (states.P_POWERED_DOWN, states.P_POWERING_UP)]
        if self.config.prolog_slurmctld:  # CONFIGURING until it succeeds, as in Slurm
            job.prolog_slurmctld = True
            return [*self._configure(job, waking, now), self._admin_program("prolog", job)]
        if waking:
            return self._configure(job, waking, now)
        if job.interactive:
            job.launched = True
            return [Launch(job)]  # its nodes' agents still set its CPU frequency and profile it
        job.steps.append(Step(step_id="batch", name="batch", nodes=[job.batch_host], ntasks=1,
                              cpus=job.alloc_cpus[job.batch_host], start_time=now))
        return [Launch(job)]

    def _configure(self, job: Job, waking: list[str], now: float) -> list[Action]:
        """Hold a job CONFIGURING while its powered-down nodes are woken (Slurm's power save)."""
        assert self.power_saving is not None
        job.configuring = True
        if not job.interactive:
            job.steps.append(Step(step_id="batch", name="batch", nodes=[job.batch_host], ntasks=1,
                                  cpus=job.alloc_cpus[job.batch_host], start_time=now))
        asleep = [n for n in waking if self.nodes[n].power == states.P_POWERED_DOWN]
        for name in asleep:
            self.power_saving.begin_resume(self.nodes[name], now, job.job_id)
            self._node_event(self.nodes[name], now, states.P_POWERING_UP, f"job {job.job_id}")
        return [PowerProgram("resume", asleep)] if asleep else []

    def _admin_program(self, kind: str, job: Job) -> AdminProgram:
        ended = kind == "epilog"
        env = prologs.environment(
            f"{kind}_slurmctld", job_id=job.job_id, uid=job.uid, gid=job.gid, user=job.user, account=job.account,
            partition=job.partition, node_list=job.nodes_expr, job_name=job.name, cluster=self.config.cluster_name,
            exit_code=job.exit_code if ended else None, term_signal=job.term_signal if ended else 0)
        return AdminProgram(kind, job.job_id, self.config.prolog_slurmctld if kind == "prolog"
                            else self.config.epilog_slurmctld, env)

    def admin_program_done(self, program: AdminProgram, code: int, error: str, now: float) -> list[Action]:
        """PrologSlurmctld's end: the job launches once its nodes are up; on failure a batch job is
        requeued held and an interactive one ends (Slurm's rules). EpilogSlurmctld's failure is logged."""
        job = self.jobs.get(program.job_id)
        if code:
            log.error(f"{program.kind}_slurmctld failed", extra={"job": program.job_id, "error": error})
        if program.kind != "prolog" or job is None or not job.prolog_slurmctld or job.state != states.RUNNING:
            return []
        job.prolog_slurmctld = False
        self.touch(job)
        if not code:
            return self._configured(now)
        return self._prolog_failed(job, now)

    def _prolog_failed(self, job: Job, now: float) -> list[Action]:
        """A prolog failed: a batch job is requeued and held (JobHeldAdmin); an interactive one fails."""
        if job.interactive:
            job.reason = prologs.PROLOG_ERROR
            return self._end(job, states.FAILED, 1, 0, now, [] if job.configuring else job.node_list)
        actions = self._requeue(job, now)
        job.hold, job.reason = "admin", states.R_HELD_ADMIN
        return actions

    def agent_script_ended(self, event: JobEvent, now: float) -> list[Action]:
        """A node's Prolog failed, or its Epilog ended: the node is clean of the job once its Epilog
        is done (it stays COMPLETING until then, as in Slurm); a failed one drains the node, and
        after a Prolog the job is requeued held."""
        if event.step_id == "epilog":
            self.node_clean(event.job_id, event.node)
            if not event.exit_code:
                return []
        node = self.nodes.get(event.node)
        reason = prologs.PROLOG_ERROR if event.step_id == "prolog" else prologs.EPILOG_ERROR
        if node is not None and not node.drain:
            node.drain, node.reason, node.reason_time, node.reason_uid = True, reason, now, 0
            self._node_event(node, now, "DRAIN", reason)
            self._save_nodes()
        job = self.jobs.get(event.job_id)
        if event.step_id != "prolog" or job is None or job.state != states.RUNNING or event.run != job.restart_count:
            return []
        return self._prolog_failed(job, now)

    def _configured(self, now: float) -> list[Action]:
        """Launch the CONFIGURING jobs whose nodes are all up and whose PrologSlurmctld succeeded;
        their run starts now."""
        actions: list[Action] = []
        for job in self.jobs.values():
            if job.configuring and not job.prolog_slurmctld and job.state == states.RUNNING and all(
                    self.nodes[n].power not in (states.P_POWERED_DOWN, states.P_POWERING_UP) for n in job.alloc_cpus):
                job.configuring = False
                job.start_time = now
                for step in job.steps:
                    step.start_time = now
                self.touch(job)
                if job.interactive:
                    job.launched = True
                actions.append(Launch(job))
        return actions

    def _hold_resources(self, job: Job, sign: int) -> None:
        for name, cpus in job.alloc_cpus.items():
            node = self.nodes.get(name)
            if node is None:
                continue
            node.alloc_cpus = max(0, node.alloc_cpus + sign * cpus)
            node.alloc_mem_mb = max(0, node.alloc_mem_mb + sign * job.alloc_mem_mb)
            for index in job.alloc_gpus.get(name, ()):
                if sign > 0:
                    node.alloc_gpus[index] = job.job_id
                elif node.alloc_gpus.get(index) == job.job_id:
                    del node.alloc_gpus[index]
            node.refresh_base_state()

    # --- submission ----------------------------------------------------------------------------

    def submit(self, req: JobSubmit, who: Identity, now: float) -> list[Job]:
        if req.nice < 0 and not self.is_admin(who):
            raise Refused("Access/permission denied: only an administrator may set a negative nice value", 403)
        gid, group = primary_group(who.uid)
        req = self._with_account(req, who)
        try:
            jobs = submit_mod.build_jobs(req, who, gid, group, self.config, now, self.next_job_id,
                                         self.node_snaps(), self.plugins.select, self.partition_snaps(),
                                         self.resv.by_name)
        except submit_mod.SubmitError as exc:
            raise Refused(str(exc)) from exc
        if len(self.jobs) + len(jobs) > self.config.max_job_count:
            raise Refused(f"Slurm temporarily unable to accept job (MaxJobCount={self.config.max_job_count} "
                          "reached)", 503)
        self.next_job_id = jobs[-1].job_id + 1
        self._meta_dirty = True
        for job in jobs:
            self.jobs[job.job_id] = job
            self.touch(job)
        return jobs

    def will_run(self, req: JobSubmit, who: Identity, now: float) -> tuple[Job, WillRun]:
        """sbatch --test-only: the job as it would be, and when and where the scheduler would start
        it (now, or at its place in the backfill plan), from a pass of the pure core over the
        current snapshot with the job added. Nothing is kept."""
        gid, group = primary_group(who.uid)
        req = self._with_account(req, who)
        try:
            job = submit_mod.build_jobs(req, who, gid, group, self.config, now, self.next_job_id,
                                        self.node_snaps(), self.plugins.select, self.partition_snaps(),
                                        self.resv.by_name)[0]
        except submit_mod.SubmitError as exc:
            raise Refused(str(exc)) from exc
        try:
            snap = self.snapshot(now, backfill_due=True)
            snap = replace(snap, pending=(*snap.pending, self._request(job)))
            decisions = scheduling.schedule(snap, self.plugins.priority, self.plugins.scheduler,
                                            self.plugins.select, scheduling.QueueMemo())
        finally:
            self._requests.pop(job.job_id, None)
        started = dict(decisions.starts).get(job.job_id)
        if started is not None:
            return job, WillRun(start_time=now, nodes=list(started.cpus), cpus=sum(started.cpus.values()),
                                partition=job.partition)
        return job, WillRun(start_time=decisions.expected_start.get(job.job_id), cpus=job.ntasks * job.cpus_per_task,
                            partition=job.partition, reason=decisions.reasons.get(job.job_id, job.reason))

    def _with_account(self, req: JobSubmit, who: Identity) -> JobSubmit:
        """The job's account: as asked, else the user's default; with
        AccountingStorageEnforce=associations, only an account the user is associated with."""
        account = req.account or self.shares.default_account.get(who.user, "")
        if "associations" in self.config.accounting_storage_enforce and \
                account not in self.shares.user_accounts.get(who.user, ()):
            raise Refused("Invalid account or account/partition combination specified")
        return req.model_copy(update={"account": account}) if account != req.account else req

    # --- lookups and permissions --------------------------------------------------------------

    def is_admin(self, who: Identity) -> bool:
        """root, AdminUsers, the controller itself, and users sacctmgr made Operator or Administrator."""
        return (who.uid == 0 or who.user in self.config.admin_users or who.role == "controller"
                or who.user in self.shares.admins)

    def resolve(self, job_ref: str) -> list[Job]:
        """Jobs named by ``12`` (a job, or every task of array 12) or ``12_3`` (one task)."""
        if len(job_ref) > MAX_JOB_REF:
            raise Refused("Invalid job id specified: too long")
        try:
            if "_" in job_ref:
                array_s, task_s = job_ref.split("_", 1)
                array_id, task_ids = int(array_s), _TaskRanges(task_s)
                found = [j for j in self.jobs.values()
                         if j.array_job_id == array_id and j.array_task_id in task_ids]
            else:
                job_id = int(job_ref)
                job = self.jobs.get(job_id)
                if job is not None and job.array_job_id == job_id:
                    found = [j for j in self.jobs.values() if j.array_job_id == job_id]
                else:
                    found = [job] if job is not None else []
        except ValueError as exc:
            raise Refused(f"Invalid job id specified: {job_ref}") from exc
        if not found:
            raise Refused("Invalid job id specified", 404)
        return found

    def _check_owner(self, job: Job, who: Identity) -> None:
        if job.uid != who.uid and not self.is_admin(who):
            raise Refused("Access/permission denied", 403)

    # --- cancellation and signals ---------------------------------------------------------------

    def cancel(self, jobs: Iterable[Job], who: Identity, sig: int | None, batch_only: bool,
               now: float) -> list[Action]:
        jobs = list(jobs)
        for job in jobs:
            self._check_owner(job, who)
        actions: list[Action] = []
        for job in jobs:
            if job.state in states.FINISHED:
                continue
            if sig is not None and sig not in (signal_mod.SIGKILL,):
                if job.state == states.RUNNING:
                    actions.append(Signal(job.job_id, job.node_list, sig, batch_only))
                continue
            if job.state == states.PENDING:
                job.state = states.CANCELLED
                job.cancelled_by = who.uid
                job.start_time = job.end_time = now
                self.touch(job)
            elif job.state == states.RUNNING and job.cancelled_by is None:
                job.cancelled_by = who.uid
                self.touch(job)
                if job.suspended_at:  # thawed first: a frozen process takes no SIGTERM
                    actions.extend(self._thaw(job, now))
                actions.extend(self._terminate(job, now))
        return actions

    def suspend(self, jobs: Iterable[Job], resume: bool, who: Identity, now: float) -> list[Action]:
        """scontrol suspend|resume (operators and administrators only, as in Slurm): a suspended
        job keeps its nodes, its processes are frozen, and its time limit does not run."""
        if not self.is_admin(who):
            raise Refused("Access/permission denied", 403)
        actions: list[Action] = []
        jobs = list(jobs)
        for job in jobs:
            if job.state != states.RUNNING or job.configuring or job.cancelled_by is not None:
                raise Refused(f"Job {job.display_id} is not running", 409)
            if resume and not job.suspended_at:
                raise Refused(f"Job {job.display_id} is not suspended", 409)
            if not resume and job.suspended_at:
                raise Refused(f"Job {job.display_id} is already suspended", 409)
        for job in jobs:
            if resume:
                actions.extend(self._thaw(job, now))
            else:
                job.suspended_at = now
                self.touch(job)
                actions.append(Freeze(job.job_id, job.node_list, True))
        return actions

    def _thaw(self, job: Job, now: float) -> list[Action]:
        job.suspended_s += now - job.suspended_at
        job.suspended_at = 0.0
        self.touch(job)
        return [Freeze(job.job_id, job.node_list, False)]

    def _terminate(self, job: Job, now: float) -> list[Action]:
        """Kill a running job everywhere; allocations with no batch script end right away."""
        if job.interactive or not job.launched:
            final = states.TIMEOUT if job.timed_out else states.CANCELLED
            return self._end(job, final, job.exit_code, job.term_signal, now, job.node_list)
        return [Signal(job.job_id, job.node_list, signal_mod.SIGTERM, terminate=True)]

    def _end(self, job: Job, final: str, exit_code: int, term_signal: int, now: float,
             completing_nodes: list[str]) -> list[Action]:
        """A job's main process is over: record it, and clean up the nodes that may hold tasks."""
        job.exit_code, job.term_signal, job.end_time, job.final_state = exit_code, term_signal, now, final
        for step in job.steps:
            if step.state == states.RUNNING:
                # A step still running when its job ends was killed with it: CANCELLED in Slurm,
                # for a timeout too (the job alone is TIMEOUT); a node failure fails its steps.
                step.state = states.NODE_FAIL if final == states.NODE_FAIL else states.CANCELLED
                step.end_time = now
        self.touch(job)
        if job.start_time and any(self.nodes[n].energy_samples for n in job.alloc_cpus if n in self.nodes):
            self._energy_due.add(job.job_id)
            job.energy_pending = True
        after: list[Action] = [self._admin_program("epilog", job)] if self.config.epilog_slurmctld else []
        if completing_nodes:
            job.state = states.COMPLETING
            job.completing_nodes = list(completing_nodes)
            return [Signal(job.job_id, list(completing_nodes), signal_mod.SIGKILL, terminate=True), *after]
        self._finish(job)
        return after

    def _finish(self, job: Job) -> None:
        """Every node is clean: the resources are free. The job keeps COMPLETING until its energy
        is settled, so that the record that carries its final state carries its energy too."""
        if job.profile and self.config.acct_gather_profile_type == "acct_gather_profile/hdf5":
            self.profiles_due.append((job.user, job.uid, job.job_id))
        self.job_usage.pop(job.job_id, None)
        self._hold_resources(job, -1)
        job.completing_nodes = []
        if job.energy_pending:
            job.state = states.COMPLETING
            self.touch(job)
        else:
            self._settle(job)

    def _settle(self, job: Job) -> None:
        job.state = job.final_state or states.COMPLETED
        self.touch(job)

    def _settling(self, job: Job) -> bool:
        """COMPLETING with every node clean: only its energy is awaited (it holds no resources)."""
        return job.state == states.COMPLETING and not job.completing_nodes and bool(job.final_state)

    def node_clean(self, job_id: int, node: str) -> None:
        """An agent confirmed a job has no process left on ``node``."""
        job = self.jobs.get(job_id)
        if job is None or node not in job.completing_nodes:
            return
        job.completing_nodes.remove(node)
        if job.state == states.PENDING:
            self.touch(job)
        elif not job.completing_nodes:
            self._finish(job)
        else:
            self.touch(job)

    def batch_ended(self, event: JobEvent, now: float) -> list[Action]:
        job = self.jobs.get(event.job_id)
        if job is not None and event.run < job.restart_count:
            self.node_clean(job.job_id, event.node)  # the end of a run that was requeued
            return []
        if job is None or job.state not in (states.RUNNING,) or job.batch_host != event.node:
            return []
        if event.oom_killed:  # Slurm's record of a job its memory limit ended: OUT_OF_MEMORY, 0:125
            event = event.model_copy(update={"exit_code": 0, "term_signal": OOM_SIGNAL})
        batch = job.find_step("batch")
        if batch is not None:
            batch.state = states.COMPLETED if event.exit_code == 0 and not event.term_signal else states.FAILED
            if event.oom_killed:
                batch.state = states.OUT_OF_MEMORY
            if job.cancelled_by is not None or job.timed_out:  # Slurm: the batch step was CANCELLED
                batch.state = states.CANCELLED
            batch.exit_code, batch.term_signal = event.exit_code, event.term_signal
            batch.end_time = event.end_time
            batch.tasks = merge_usage(batch.tasks, [t.model_dump() for t in event.tasks])
        if job.cancelled_by is not None:
            final = states.CANCELLED
        elif job.timed_out:
            final = states.TIMEOUT
        elif event.oom_killed:
            final = states.OUT_OF_MEMORY
        elif event.exit_code == 0 and not event.term_signal:
            final = states.COMPLETED
        else:
            final = states.FAILED
        if event.error:  # the script never started: say why where scontrol and sacct users look
            job.reason = event.error
            log.warning("batch job launch failed", extra={"job": job.job_id, "node": event.node,
                                                          "error": event.error})
        # the batch host is clean of the job now, unless its Epilog is still to run (it says when done)
        others = job.node_list if self.config.epilog else [n for n in job.node_list if n != event.node]
        return self._end(job, final, event.exit_code, event.term_signal, now, others)

    # --- updates ---------------------------------------------------------------------------------

    def update(self, jobs: Iterable[Job], upd: JobUpdate, who: Identity, now: float) -> None:
        jobs = list(jobs)
        admin = self.is_admin(who)
        for job in jobs:
            self._check_owner(job, who)
        if (upd.priority is not None or upd.hold == "admin") and not admin:
            raise Refused("Access/permission denied", 403)
        for job in jobs:
            if job.state in states.FINISHED and (upd.hold or upd.release or upd.time_limit or upd.priority):
                raise Refused("Job has already finished", 409)
            if upd.hold is not None:
                if job.state != states.PENDING:
                    raise Refused("Job is no longer pending execution", 409)
                job.hold = upd.hold
            if upd.release:
                if job.hold == "admin" and not admin:
                    raise Refused("Access/permission denied", 403)
                job.hold = ""
            if upd.time_limit is not None:
                self._update_time_limit(job, upd.time_limit, admin)
            if upd.priority is not None:
                job.admin_priority = job.priority = upd.priority  # shown at once, as Slurm does
            if upd.nice is not None:
                if upd.nice < 0 and not admin:
                    raise Refused("Access/permission denied", 403)
                job.nice = upd.nice
            if upd.name is not None:
                job.name = upd.name
            if upd.comment is not None:
                job.comment = upd.comment
            if upd.admin_comment is not None:
                if not admin:
                    raise Refused("Access/permission denied", 403)
                job.admin_comment = upd.admin_comment
            if upd.partition is not None:
                if job.state != states.PENDING:
                    raise Refused("Job is no longer pending execution", 409)
                if upd.partition not in {p.name for p in self.config.partitions}:
                    raise Refused("Invalid partition name specified")
                job.partition = upd.partition
            self.touch(job)

    def _update_time_limit(self, job: Job, text: str, admin: bool) -> None:
        from wattsched import timefmt

        current = job.time_limit_min
        sign = text[:1] if text[:1] in "+-" else ""
        try:
            minutes = timefmt.parse_duration_min(text[1:] if sign else text)
        except timefmt.TimeFormatError as exc:
            raise Refused(str(exc)) from exc
        if sign:  # TimeLimit=+N / -N: relative to the current limit, as scontrol allows
            if minutes is None or current is None:
                raise Refused("Invalid time limit: a relative change needs a finite limit")
            minutes = max(0, current + minutes) if sign == "+" else max(1, current - minutes)
        increase = (minutes is None and current is not None) or (
            minutes is not None and current is not None and minutes > current)
        if increase and not admin:
            raise Refused("Access/permission denied", 403)
        job.time_limit_min = minutes

    def requeue(self, jobs: Iterable[Job], who: Identity, now: float) -> list[Action]:
        actions: list[Action] = []
        for job in jobs:
            self._check_owner(job, who)
            if job.interactive:
                raise Refused("Only batch jobs are accepted or processed", 400)
            if job.state in (states.RUNNING,):
                actions.extend(self._requeue(job, now))
            elif job.state in states.FINISHED:
                self._reset_for_requeue(job)
            else:
                raise Refused("Job is pending execution", 409)
        return actions

    def _requeue(self, job: Job, now: float) -> list[Action]:
        nodes = job.node_list
        # the run is cleaned up where it may have processes: a configuring job never ran, a down
        # node will not answer
        live = [] if job.configuring else [n for n in nodes if self.nodes[n].base_state != states.N_DOWN
                                           and not self.nodes[n].not_responding]
        self._hold_resources(job, -1)
        self._reset_for_requeue(job)
        job.completing_nodes = live
        return [Signal(job.job_id, nodes, signal_mod.SIGKILL, terminate=True)]

    def _reset_for_requeue(self, job: Job) -> None:
        job.state = states.PENDING
        job.reason = states.R_NONE
        job.restart_count += 1
        job.start_time = job.end_time = 0.0
        job.alloc_cpus, job.tasks_per_node, job.alloc_mem_mb, job.nodes_expr = {}, {}, 0, ""
        job.alloc_gpus = {}
        job.batch_host, job.launched, job.final_state, job.configuring = "", False, "", False
        job.cancelled_by, job.timed_out, job.warn_signal_sent = None, False, False
        job.exit_code = job.term_signal = 0
        job.steps, job.next_step_id, job.completing_nodes = [], 0, []
        self.touch(job)

    # --- node agents ------------------------------------------------------------------------------

    def heartbeat(self, hb: AgentHeartbeat, now: float) -> tuple[list[int], list[int], list[Action]]:
        """Register or refresh an agent's nodes; returns (acked events, jobs to kill, actions)."""
        actions: list[Action] = []
        acked = []
        for event in hb.events:
            if event.step_id == "batch":
                actions.extend(self.batch_ended(event, now))
            elif event.step_id in ("prolog", "epilog"):
                actions.extend(self.agent_script_ended(event, now))
            else:
                self.step_ended(event, now)
            acked.append(event.job_id)
        ended = {e.job_id for e in hb.events if e.step_id == "batch"}
        to_kill: list[int] = []
        by_host: dict[str, list[Job]] = {}
        woken = False
        if hb.nodes:
            for job in self.jobs.values():
                if job.state == states.RUNNING and job.launched:
                    by_host.setdefault(job.batch_host, []).append(job)
        for report in hb.nodes:
            node = self.nodes.get(report.name)
            if node is None:
                continue
            node.agent_url, node.last_seen, node.boot_time = hb.agent_url, now, hb.boot_time
            node.registered = True
            if report.energy is not None:
                node.add_energy_sample(report.energy.time, report.energy.joules, report.energy.watts,
                                       {u.job_id: u.cpu_s for u in report.jobs},
                                       {u.job_id: u.gpu_j for u in report.jobs if u.gpu_j})
            self._job_usage(report)
            woken |= self._node_up(node, report, now)
            if node.not_responding:
                node.not_responding = False
                if node.base_state == states.N_DOWN and node.reason == NOT_RESPONDING and \
                        self.config.return_to_service >= 1:
                    node.base_state, node.reason = states.N_IDLE, ""
                    self._node_event(node, now, "IDLE")
                if node.base_state == states.N_UNKNOWN:
                    node.base_state = states.N_IDLE
                node.refresh_base_state()
            running = set(report.running_jobs)
            for job_id in running:
                job = self.jobs.get(job_id)
                if job is None or job.state not in (states.RUNNING, states.COMPLETING) or \
                        report.name not in job.alloc_cpus:
                    to_kill.append(job_id)
            for job in by_host.get(report.name, []):
                if job.state == states.RUNNING and job.job_id not in running and job.job_id not in ended \
                        and hb.boot_time > job.start_time:
                    log.warning("job lost by its node agent", extra={"job": job.job_id, "node": report.name})
                    actions.extend(self.node_failed_job(job, now))
        if woken:
            actions.extend(self._configured(now))
        if hb.nodes and self._energy_due:
            self._account_energy(now)
        return acked, to_kill, actions

    def _job_usage(self, report: NodeReport) -> None:
        """Running jobs' CPU frequency as their nodes report it (sacct/sstat AveCPUFreq)."""
        for usage in report.jobs:
            job = self.jobs.get(usage.job_id)
            if job is None or job.state != states.RUNNING:
                continue
            self.job_usage.setdefault(job.job_id, {})[report.name] = usage
            if usage.cpu_freq_khz:
                job.freq_reports += 1
                job.ave_cpu_freq_khz += round((usage.cpu_freq_khz - job.ave_cpu_freq_khz) / job.freq_reports)

    def histories(self, nodes: Iterable[str], now: float) -> dict[str, energy.NodeHistory]:
        """The energy history of ``nodes`` with the jobs that ran on them (for the split)."""
        wanted = {n for n in nodes if n in self.nodes}
        occupants: dict[str, list[energy.Occupant]] = {n: [] for n in wanted}
        for other in self.jobs.values():  # one pass over the jobs for every node being settled
            if other.start_time:
                for n in wanted.intersection(other.alloc_cpus):
                    occupants[n].append(energy.Occupant(other.start_time, other.end_time or now,
                                                        other.alloc_cpus[n], other.job_id))
        # RAPL meters CPU packages and DRAM alone: GPUs' energy is then added to their jobs' shares
        gpus_apart = self.config.acct_gather_energy_type.endswith("/rapl")
        return {n: energy.NodeHistory(self.nodes[n].energy_samples, self.nodes[n].job_cpu_samples,
                                      self.nodes[n].idle_watts, occupants[n], self.nodes[n].job_gpu_samples,
                                      gpus_apart) for n in wanted}

    def _energy_until(self, job: Job, now: float,
                      histories: Mapping[str, energy.NodeHistory] | None = None) -> tuple[float | None, float]:
        """A started job's energy up to its nodes' latest common reading (or its end), and that time
        (``histories``: of its nodes at least, when the caller has them already)."""
        if histories is None:
            histories = self.histories(job.alloc_cpus, now)
        until = energy.covered_until(histories, list(job.alloc_cpus))
        if job.end_time:
            until = min(until, job.end_time)
        joules = energy.job_energy(histories, job.start_time, until, job.alloc_cpus, job.job_id) \
            if job.start_time and until > job.start_time else None
        return joules, until

    def energies_so_far(self, jobs: list[Job], now: float) -> dict[int, float]:
        """What fair share counts of running (or settling) jobs' energy: 0 before any reading. The
        nodes' histories are gathered once for them all (a pass over every job per node set)."""
        histories = self.histories({n for job in jobs for n in job.alloc_cpus}, now)
        return {job.job_id: self._energy_until(job, now, histories)[0] or 0.0 for job in jobs}

    def job_stat(self, job: Job, now: float) -> dict:
        """sstat: a running job's energy so far (up to its nodes' latest common sample), CPU time,
        memory and CPU frequency, from what its nodes reported."""
        usage = self.job_usage.get(job.job_id, {})
        joules, until = self._energy_until(job, now)
        rss_node = max(usage, key=lambda n: usage[n].rss_kb, default="")
        return {"job_id": job.job_id, "display_id": job.display_id, "state": job.state,
                "consumed_energy_j": round(joules) if joules is not None else None, "energy_until": until,
                "total_cpu_s": sum(u.cpu_s for u in usage.values()), "ntasks": job.ntasks,
                "nodes": list(job.alloc_cpus), "max_rss_kb": usage[rss_node].rss_kb if rss_node else 0,
                "max_rss_node": rss_node, "ave_cpu_freq_khz": job.ave_cpu_freq_khz, "cpu_freq": job.cpu_freq,
                "cpu_freq_khz": job.cpu_freq_khz, "alloc_cpus": job.num_cpus}

    def energy_settle_s(self) -> float:
        """How long an ended job waits for a reading past its end: the agents read at once when
        a job ends, so this is only reached by a node whose meter stopped answering."""
        return 10.0 + 2 * max(self.config.acct_gather_node_freq_s, self.config.energy_ipmi_frequency_s or 0)

    def _account_energy(self, now: float) -> None:
        """Give ended jobs (and their steps) their energy once every node's samples cover their
        end, and end the ones that were only waiting for it; after energy_settle_s() a job ends
        without energy (a node that stopped reporting)."""
        ready = []
        for job_id in list(self._energy_due):
            job = self.jobs.get(job_id)
            if job is None or now - job.end_time > self.energy_settle_s():
                self._energy_due.discard(job_id)
                if job is not None:
                    log.warning("job ended without its energy: no reading past its end",
                                extra={"job_id": job_id, "nodes": ",".join(job.alloc_cpus)})
                    self._energy_settled(job)
            elif all(n in self.nodes and self.nodes[n].energy_samples
                     and self.nodes[n].energy_samples[-1][0] >= job.end_time for n in job.alloc_cpus):
                ready.append(job)
        if not ready:
            return
        histories = self.histories({n for job in ready for n in job.alloc_cpus}, now)
        for job in ready:
            joules = energy.job_energy(histories, job.start_time, job.end_time, job.alloc_cpus, job.job_id)
            if joules is None:
                continue
            job.consumed_energy_j = round(joules)
            for step in job.steps:
                if step.start_time and step.end_time:
                    part = energy.job_energy(histories, step.start_time, step.end_time,
                                             {n: job.alloc_cpus.get(n, 1) for n in step.nodes}, job.job_id)
                    step.consumed_energy_j = round(part) if part is not None else None
            self._energy_due.discard(job.job_id)
            self._energy_settled(job)

    def _energy_settled(self, job: Job) -> None:
        job.energy_pending = False
        self.energy_totals.add(job.user, job.account, job.partition, job.consumed_energy_j)
        self.touch(job, request_changed=False)
        if self._settling(job):
            self._settle(job)

    def launched(self, job_id: int) -> None:
        job = self.jobs.get(job_id)
        if job is not None and not job.launched and job.state == states.RUNNING:
            job.launched = True
            self.touch(job)

    def node_failed_job(self, job: Job, now: float) -> list[Action]:
        """A node under a job failed: requeue the job if it may be, else end it NODE_FAIL. A job
        already being cancelled or killed at its limit ends as such: it must never run again."""
        others = [n for n in job.node_list if self.nodes[n].schedulable or self.nodes[n].base_state in (
            states.N_ALLOCATED, states.N_MIXED)]
        live = [n for n in others if not self.nodes[n].not_responding]
        if job.cancelled_by is not None or job.timed_out:
            final = states.TIMEOUT if job.timed_out else states.CANCELLED
            return self._end(job, final, job.exit_code, job.term_signal, now, live)
        if (job.configuring or (job.requeue and self.config.job_requeue)) and not job.interactive:
            return self._requeue(job, now)
        return self._end(job, states.NODE_FAIL, 0, 0, now, live)

    def check_timers(self, now: float) -> list[Action]:
        """Time limits, --signal warnings, unresponsive nodes and purging of old jobs."""
        actions: list[Action] = []
        for job in list(self.jobs.values()):
            if job.state == states.RUNNING and job.time_limit_min is not None and not job.configuring \
                    and not job.suspended_at:
                deadline = job.start_time + job.suspended_s + job.time_limit_min * 60  # suspended time is not run time
                if job.kill_signal and not job.warn_signal_sent and now >= deadline - job.kill_signal_secs:
                    job.warn_signal_sent = True
                    self.touch(job)
                    actions.append(Signal(job.job_id, job.node_list, job.kill_signal, job.kill_signal_batch_only))
                if now >= deadline and not job.timed_out and job.cancelled_by is None:
                    job.timed_out = True
                    self.touch(job)
                    actions.extend(self._terminate(job, now))
            elif job.state in states.FINISHED and job.end_time and now - job.end_time > self.config.min_job_age_s:
                del self.jobs[job.job_id]
                self._requests.pop(job.job_id, None)
                self._briefs.pop(job.job_id, None)
                self._purged.append(job.job_id)
        if self._energy_due:
            self._account_energy(now)  # the jobs whose nodes stopped reporting end without energy
        moved, ended = self.resv.roll(now)
        self._resv_dirty.extend(moved + ended)
        for node in self.nodes.values():
            # a node switched off (or switching) has no agent to hear from: its switch has its own timeouts
            if not node.not_responding and not node.power and now - node.last_seen > self.config.slurmd_timeout_s:
                actions.extend(self.node_down(node, NOT_RESPONDING, now, not_responding=True))
        actions.extend(self.power_tick(now))
        return actions

    # --- power saving ------------------------------------------------------------------------------

    def power_tick(self, now: float) -> list[Action]:
        """Finish switches that ran their time, then ask the power-saving policies what to switch."""
        saver = self.power_saving
        assert saver is not None
        actions: list[Action] = []
        saving_w = 0.0
        for node in self.nodes.values():
            if node.power == states.P_POWERED_DOWN:
                saving_w += saver.saving_watts(node)
            # idle time counts from when a node is up and free (Slurm's last_busy is set when a node
            # registers): nodes still unknown at start-up, down or drained are not idle
            if node.alloc_cpus or node.power or saver.node_state(node) == powersave.DOWN:
                node.idle_since = 0.0
            elif not node.idle_since:
                node.idle_since = now
            verdict = saver.timed_out(node, now)
            if verdict == states.P_POWERED_DOWN:
                node.power = states.P_POWERED_DOWN
                self._node_event(node, now, states.P_POWERED_DOWN, "")
            elif verdict == RESUME_TIMEOUT_REASON:
                log.warning("node did not resume in time", extra={"node": node.name})
                node.power = ""
                actions.extend(self.node_down(node, RESUME_TIMEOUT_REASON, now))
        saver.accrue(now, saving_w)
        pending_down = [n for n in self.nodes.values() if n.power == states.P_POWER_DOWN and not n.alloc_cpus]
        suspend = [n.name for n in pending_down]
        if saver.policies:
            off, on = saver.decide(saver.snapshot(self.nodes.values(), self._pending_briefs(), self._releases(),
                                                  self.power_snap(), now))
            suspend += off
            actions.extend(self._resume(on, now, 0))
        actions.extend(self._suspend(suspend, now))
        return actions

    def _pending_briefs(self) -> list[powersave.PendingBrief]:
        """Eligible pending jobs in priority order, as whole nodes and time limits."""
        infinite = 365 * 86400.0
        pending = sorted((j for j in self.jobs.values() if j.state == states.PENDING and not j.hold
                          and not j.completing_nodes and j.reason not in _NOT_WAITING_FOR_NODES),
                         key=lambda j: (-j.priority, j.submit_time, j.job_id))
        return [powersave.PendingBrief(j.job_id, max(j.nodes_min, 1),
                                       j.time_limit_min * 60.0 if j.time_limit_min is not None else infinite,
                                       j.expected_start or None, j.reason) for j in pending]

    def _releases(self) -> list[tuple[float, int]]:
        return [(j.start_time + j.time_limit_min * 60 if j.time_limit_min is not None else float("inf"),
                 len(j.alloc_cpus)) for j in self.jobs.values() if j.holds_nodes]

    def _suspend(self, names: list[str], now: float) -> list[Action]:
        assert self.power_saving is not None
        for name in names:
            self.power_saving.begin_suspend(self.nodes[name], now)
            self._node_event(self.nodes[name], now, states.P_POWERING_DOWN, "")
        return [PowerProgram("suspend", names)] if names else []

    def _resume(self, names: list[str], now: float, job_id: int) -> list[Action]:
        assert self.power_saving is not None
        for name in names:
            self.power_saving.begin_resume(self.nodes[name], now, job_id)
            self._node_event(self.nodes[name], now, states.P_POWERING_UP, f"job {job_id}" if job_id else "")
        return [PowerProgram("resume", names)] if names else []

    def power_program_failed(self, kind: str, names: list[str], now: float) -> list[Action]:
        """SuspendProgram or ResumeProgram failed on these nodes: a node still being suspended is
        on again; a node still being resumed goes DOWN (its job requeued), as at ResumeTimeout."""
        actions: list[Action] = []
        for name in names:
            node = self.nodes.get(name)
            if node is None:
                continue
            if kind == "suspend" and node.power == states.P_POWERING_DOWN:
                node.power, node.power_since, node.idle_since = "", 0.0, now
                self._node_event(node, now, "POWERED_UP", SUSPEND_FAILED_REASON)
            elif kind == "resume" and node.power == states.P_POWERING_UP:
                node.power = ""
                actions.extend(self.node_down(node, RESUME_FAILED_REASON, now))
        self._save_nodes()
        return actions

    def _node_up(self, node: Node, report: NodeReport, now: float) -> bool:
        """Whether a node powering up has come up: its agent reports it on since the resume began."""
        if node.power != states.P_POWERING_UP or report.power != "on" or report.up_since < node.power_since:
            return False
        self._node_event(node, now, "POWERED_UP", f"job {node.power_job}" if node.power_job else "")
        node.power, node.power_job = "", 0
        return True

    def node_down(self, node: Node, reason: str, now: float, not_responding: bool = False,
                  uid: int = 0) -> list[Action]:
        node.not_responding = node.not_responding or not_responding
        node.base_state, node.reason, node.reason_time, node.reason_uid = states.N_DOWN, reason, now, uid
        self._node_event(node, now, "DOWN")
        actions: list[Action] = []
        for job in list(self.jobs.values()):
            if job.state == states.RUNNING and node.name in job.alloc_cpus:
                actions.extend(self.node_failed_job(job, now))
            elif node.name in job.completing_nodes:
                self.node_clean(job.job_id, node.name)
        return actions

    def update_nodes(self, names: list[str], new_state: str, reason: str, who: Identity,
                     now: float) -> list[Action]:
        if not self.is_admin(who):
            raise Refused("Access/permission denied", 403)
        unknown = [n for n in names if n not in self.nodes]
        if unknown:
            raise Refused(f"Invalid node name specified: {unknown[0]}", 404)
        if new_state in ("drain", "down") and not reason:
            raise Refused("You must specify a reason when DOWNING or DRAINING a node. Request denied")
        if new_state.startswith("power_"):
            return self._power_command(names, new_state, now)
        actions: list[Action] = []
        for name in names:
            node = self.nodes[name]
            if new_state == "drain":
                node.drain, node.reason, node.reason_time, node.reason_uid = True, reason, now, who.uid
                self._node_event(node, now, "DRAIN")
            elif new_state == "down":
                actions.extend(self.node_down(node, reason, now, uid=who.uid))
            else:  # resume / idle / undrain
                node.drain = False
                if node.base_state == states.N_DOWN and not node.not_responding:
                    node.base_state = states.N_IDLE
                node.reason, node.reason_time = "", now
                node.refresh_base_state()
                self._node_event(node, now, "RESUME")
        self._save_nodes()
        return actions

    def _power_command(self, names: list[str], command: str, now: float) -> list[Action]:
        """scontrol update nodename=... state=power_down|power_down_asap|power_up. A busy node is
        marked POWER_DOWN and switched off once idle (Slurm's "!" state)."""
        if command == "power_up":
            asleep = [n for n in names if self.nodes[n].power == states.P_POWERED_DOWN]
            for name in names:
                if self.nodes[name].power == states.P_POWER_DOWN:
                    self.nodes[name].power = ""
            self._save_nodes()
            return self._resume(asleep, now, 0)
        wrong = [n for n in names if self.nodes[n].power in (states.P_POWERING_UP, states.P_POWERING_DOWN)]
        if wrong:
            way = "up" if self.nodes[wrong[0]].power == states.P_POWERING_UP else "down"
            raise Refused(f"Node {wrong[0]} is already being powered {way}")
        idle = [n for n in names if not self.nodes[n].power and not self.nodes[n].alloc_cpus]
        for name in names:
            if not self.nodes[name].power and self.nodes[name].alloc_cpus:
                self.nodes[name].power = states.P_POWER_DOWN
        self._save_nodes()
        return self._suspend(idle, now)

    # --- reservations ---------------------------------------------------------------------------

    def _resv_call(self, who: Identity, call: Callable[[], Reservation]) -> Reservation:
        if not self.is_admin(who):
            raise Refused("Access/permission denied", 403)
        try:
            resv = call()
        except ReservationError as exc:
            raise Refused(str(exc)) from exc
        self._resv_dirty.append(resv)
        self._meta_dirty = True
        return resv

    def create_reservation(self, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
        default = self.config.default_partition()
        return self._resv_call(who, lambda: self.resv.create(
            spec, who.user, now, self.nodes, self.partition_snaps(), default.name if default else "",
            self.jobs.values()))

    def update_reservation(self, name: str, spec: ReservationSpec, who: Identity, now: float) -> Reservation:
        default = self.config.default_partition()
        return self._resv_call(who, lambda: self.resv.update(
            name, spec, now, self.nodes, self.partition_snaps(), default.name if default else "",
            self.jobs.values()))

    def delete_reservation(self, name: str, who: Identity) -> Reservation:
        return self._resv_call(who, lambda: self.resv.delete(name, self.jobs.values()))

    # --- steps and interactive allocations --------------------------------------------------------

    def create_step(self, job: Job, req: StepCreate, who: Identity, now: float) -> tuple[Step, dict[str, list[int]]]:
        self._check_owner(job, who)
        if job.state != states.RUNNING:
            raise Refused("Job/step already completing or completed" if job.state in states.FINISHED or
                          job.state == states.COMPLETING else "Job is pending execution", 409)
        layout = step_layout(job, req)
        step_id = job.next_step_id
        job.next_step_id += 1
        step = Step(step_id=str(step_id), name=req.name or job.name, nodes=list(layout),
                    ntasks=sum(len(t) for t in layout.values()),
                    cpus=sum(job.alloc_cpus[n] for n in layout), start_time=now)
        job.steps.append(step)
        self.touch(job)
        return step, layout

    def step_credential(self, job: Job, step: Step, layout: dict[str, list[int]]) -> str:
        lifespan = (job.time_limit_min or 60 * 24 * 365) * 60 + 600
        return auth.sign(self.key, {"job": job.job_id, "step": int(step.step_id), "uid": job.uid,
                                    "layout": layout, "exp": int(step.start_time + lifespan)})

    def complete_step(self, job: Job, step_id: str, done: StepComplete, who: Identity, now: float) -> None:
        self._check_owner(job, who)
        step = job.find_step(step_id)
        if step is None:
            raise Refused("Invalid job step id specified", 404)
        if step.state != states.RUNNING:
            return
        self._step_over(job, step, done.exit_code, done.term_signal, now)

    def _step_over(self, job: Job, step: Step, exit_code: int, term_signal: int, now: float) -> None:
        step.state = states.COMPLETED if exit_code == 0 and not term_signal else states.FAILED
        if step.oom_killed:
            step.state = states.OUT_OF_MEMORY
        if job.cancelled_by is not None or job.timed_out:
            step.state = states.CANCELLED
        step.exit_code, step.term_signal, step.end_time = exit_code, term_signal, now
        self.touch(job)

    def step_ended(self, event: JobEvent, now: float) -> None:
        """A node's tasks of an srun step ended: keep their usage (whether srun lived to report
        the end or not); once every node of the step has reported, the step is over."""
        job = self.jobs.get(event.job_id)
        step = job.find_step(event.step_id) if job is not None else None
        if step is None or event.node not in step.nodes:
            return
        step.tasks = merge_usage(step.tasks, [t.model_dump() for t in event.tasks])
        if event.oom_killed:
            step.oom_killed = True
            event = event.model_copy(update={"exit_code": 0, "term_signal": OOM_SIGNAL})
        if event.node not in step.ended_nodes:
            step.ended_nodes.append(event.node)
            step.exit_code, step.term_signal = max(step.exit_code, event.exit_code), \
                max(step.term_signal, event.term_signal)
        if step.state == states.RUNNING and set(step.ended_nodes) >= set(step.nodes):
            self._step_over(job, step, step.exit_code, step.term_signal, now)
        else:
            self.touch(job)

    def complete_allocation(self, job: Job, exit_code: int, term_signal: int, who: Identity,
                            now: float) -> list[Action]:
        self._check_owner(job, who)
        if not job.interactive:
            raise Refused("Only interactive allocations can be released this way", 400)
        if job.state == states.PENDING:
            return self.cancel([job], who, None, False, now)
        if job.state != states.RUNNING:
            return []
        final = states.COMPLETED if exit_code == 0 and not term_signal else states.FAILED
        if job.cancelled_by is not None:
            final = states.CANCELLED
        return self._end(job, final, exit_code, term_signal, now, job.node_list)


@functools.lru_cache(maxsize=4096)
def _configured_fields(config: Config, conf) -> dict:
    """A node's fields that come from the configuration (the rest is its live state)."""
    return dict(cpus=conf.cpus, real_memory_mb=conf.real_memory_mb, sockets=conf.sockets,
                cores_per_socket=conf.cores_per_socket, threads_per_core=conf.threads_per_core, weight=conf.weight,
                features=conf.features, partitions=tuple(p.name for p in config.partitions if conf.name in p.nodes),
                idle_watts=conf.idle_watts, max_watts=conf.max_watts, power_save_watts=conf.power_save_watts,
                down_watts=conf.down_watts, power_cap_priority=conf.power_cap_priority,
                cpu_freq_watts=conf.cpu_freq_watts, gres=conf.gres, gpus=conf.gpus)


def _new_node(config: Config, conf, now: float) -> Node:
    node = Node(name=conf.name, last_seen=now, **_configured_fields(config, conf))
    if conf.state in ("DOWN", "DRAIN", "FUTURE"):
        node.base_state = states.N_FUTURE if conf.state == "FUTURE" else states.N_UNKNOWN
        node.drain = conf.state == "DRAIN"
        if conf.state == "DOWN":
            node.base_state, node.reason = states.N_DOWN, "Configured DOWN"
    return node


# settings the running controller cannot take without a restart (scontrol reconfigure refuses them)
RESTART_ONLY = {"ClusterName": "cluster_name", "SlurmctldHost": "slurmctld_addr", "SlurmctldPort": "slurmctld_port",
                "StateSaveLocation": "state_save_location", "AccountingStorageType": "accounting_storage_type",
                "AccountingStorageLoc": "accounting_storage_loc", "AuthAltParameters": "auth_key_file",
                "AuthInfo": "auth_socket", "EmulatedNodes": "emulated_nodes", "EmulatedBMCPort": "emulated_bmc_port"}


def primary_group(uid: int) -> tuple[int, str]:
    """The uid's primary gid and group name (cached: each lookup reads the user database)."""
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = uid
    try:
        return gid, grp.getgrgid(gid).gr_name
    except KeyError:
        return gid, str(gid)


def step_layout(job: Job, req: StepCreate) -> dict[str, list[int]]:
    """Place a step's tasks on the allocation: block by each node's CPUs, task ids in node order; at
    most MaxTasksPerNode tasks on a node (Slurm's default, 512), checked before any placing."""
    nodes = list(job.alloc_cpus)
    if (req.ntasks is not None and req.ntasks > MAX_TASKS_PER_NODE * len(nodes)) or \
            req.ntasks_per_node > MAX_TASKS_PER_NODE:
        raise Refused("Requested node configuration is not available")
    if req.nodes is not None:
        if req.nodes > len(nodes):
            raise Refused("Requested node configuration is not available")
        nodes = nodes[:req.nodes]
    if req.ntasks is None:
        if req.nodes is None and not req.ntasks_per_node and req.cpus_per_task == 1:
            counts = {n: job.tasks_per_node.get(n, 1) for n in nodes}
        else:
            per = req.ntasks_per_node or max(1, min(job.alloc_cpus[n] for n in nodes) // req.cpus_per_task)
            counts = dict.fromkeys(nodes, per)
    else:
        if req.ntasks < len(nodes):
            nodes = nodes[:req.ntasks]
        counts = dict.fromkeys(nodes, 1)
        left = req.ntasks - len(nodes)
        caps = {n: (req.ntasks_per_node or max(1, job.alloc_cpus[n] // req.cpus_per_task)) for n in nodes}
        for n in nodes:
            extra = min(left, caps[n] - 1)
            counts[n] += extra
            left -= extra
        index = 0
        while left > 0:  # oversubscribed: round robin, as srun --overcommit would
            counts[nodes[index % len(nodes)]] += 1
            left -= 1
            index += 1
    layout: dict[str, list[int]] = {}
    task = 0
    for n in nodes:
        layout[n] = list(range(task, task + counts[n]))
        task += counts[n]
    return layout


class _TaskRanges:
    """Array task ids named by ``3``, ``[1-4,7]``: kept as ranges, never expanded (``0-20000000`` is
    as cheap as ``3``); the text is already bounded by MAX_JOB_REF."""

    def __init__(self, text: str):
        self.ranges = []
        for part in text.strip("[]").split(","):
            first, _, last = part.partition("-")
            low, high = int(first), int(last or first)
            if low < 0 or high < low:
                raise ValueError(text)
            self.ranges.append((low, high))

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, int) and any(low <= task_id <= high for low, high in self.ranges)



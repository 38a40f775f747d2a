"""The discrete-event engine: a virtual clock, an event queue, and the controller's pure policy
core (wattsched.scheduling with the configured priority, scheduler and selection plugins,
wattsched.capadmission for the cap, wattsched.powersave with the configured policies). Nothing here
decides what to start or what to switch: it only builds the snapshots the controller would
build and carries the decisions out in virtual time.

Model. Jobs take whole nodes (``--exclusive``), as in the seeds' simulations, or, ``shared``,
ask for CPUs (``-n``) and share nodes as the selection plugin packs them; a job runs for its
run time (clipped to its limit) at its nodes' highest clock, longer at a lower one (see below;
with ``power_fit`` every job is submitted with --power-fit). A node is on, off, switching on or switching off
(wattsched.switching, with each node's SwitchOnTime / SwitchOffTime: the hardware's times, where
the live controller waits SuspendTimeout). A job allocated powered-down nodes starts when the
last of them is on. Power: computing IdleWatts + (MaxWatts - IdleWatts) x the user's energy
factor x the share of the node's CPUs each job holds, idle IdleWatts, off PowerSaveWatts,
switching SwitchOnWatts / SwitchOffWatts, integrated from the first submission to the last
completion.

The moving budget (PowerPlugin=power/balance, under a cap): every PowerParameters
balance_interval the busy nodes' limits are moved by wattsched.powerbalance, as the controller's
BudgetControl moves them, each node judged by its mean draw since the last turn. A limited node
runs at the clock at which it draws its limit, its jobs' load counted (wattsched.powermodel
.limited_khz). A job at a lower clock (its --power-fit frequency, or its node's limit's) runs
cpufreq.runtime_factor times slower for as long, its energy factor taken as its busy share (the
rest of its time it waits on memory, at any clock), a job on several nodes at the pace of its
slowest. A job slowed past its time limit ends there (counted as a timeout). Admission counts a
limited node at its limit, and a job that does not fit at full power starts with its nodes held to
what fits (scheduling.ledgers.fit_power), as the controller does.

Events at the same instant are handled together (job ends first, then switches, submissions and
policy ticks), each by its kind's handler, then one scheduling pass and one power-saving decision
follow, as in the controller's loop. Ties are broken by insertion order, so a run is deterministic.

The engine keeps the clock and the calls into the core; its parts keep the rest: the records
(simulator.records), the nodes as the core sees them (simulator.nodeview), the nodes' power and
the jobs' energy and pace (simulator.clusterpower), the cap and the draw against it
(simulator.capmeter), power saving's switches (simulator.powersaving), and the figures of the
result (simulator.result).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable

from wattsched import capadmission, limits, memos, plugins, powerbalance, powersave, preemption, snapbuild
from wattsched.config import Config
from wattsched.fairshare import UsageRecord
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import Allocation, Decisions, JobRequest, RunningJob, Snapshot
from wattsched.simulator.accounts import SimAccounts
from wattsched.simulator.capmeter import CapMeter
from wattsched.simulator.clusterpower import ClusterPower
from wattsched.simulator.nodeview import NodeView
from wattsched.simulator.powersaving import PowerSaving
from wattsched.simulator.records import (
    COMPUTING,
    IDLE,
    ON,
    POWERED_OFF,
    WAKING,
    JobRecord,
    SimNode,
)
from wattsched.simulator.result import Result
from wattsched.simulator.shares import DEFAULT_ACCOUNT, SimShares
from wattsched.simulator.workload import Workload

# the events, by kind; at the same instant they are handled in this order (see the module docstring)
END, SWITCHED, SUBMIT, TICK, PERIOD, BACKFILL, PREEMPT, CAP, BALANCE = range(9)


class Simulation:
    """One replay: the clock and its events, the queue, and the calls into the policy core."""

    def __init__(self, config: Config, workload: Workload, progress: Callable[[int, int], None] | None = None,
                 shared: bool = False, energy_model: str = "node", accounts: SimAccounts | None = None,
                 power_fit: bool = False):
        self.config = config
        self.shared = shared
        self.power_fit = power_fit  # every job is submitted with --power-fit
        self.priority, self.scheduler, self.select = plugins.scheduling(config)
        self.queue_memo = memos.QueueMemo()
        self.progress = progress
        self.nodes = {n.name: SimNode(n) for n in config.nodes}
        self.partitions = snapbuild.partitions(config)
        default = config.default_partition()
        if default is None:
            raise ValueError(f"{config.source}: no partition to simulate on")
        self.partition = default.name
        members = set(default.nodes)  # a tuple: a membership test per node would be O(N^2)
        cpus = {n.cpus for n in config.nodes if n.name in members}
        self.cpus_per_node = min(cpus) if cpus else 1
        self.workload = workload
        size = len(default.nodes)
        self.records: dict[int, JobRecord] = {}
        self.infeasible = 0
        for job in workload.jobs:
            nodes = workload.nodes_of(job, self.cpus_per_node)
            if nodes > size:
                self.infeasible += 1
                continue
            self.records[job.job_id] = JobRecord(job, nodes, job.submit)
        # the cap and its schedule (PowerCapSchedule, read at the first submission), and the draw against it
        node_power = {n.name: snapbuild.node_power(n) for n in config.nodes}
        self.meter = CapMeter(config.power_cap, float(sum(p.max for p in node_power.values())))
        self.power = ClusterPower(config, self.nodes, self.records, node_power, energy_model, self.meter,
                                  self._reschedule)
        self.pending = snapbuild.JobTable[JobRequest]()
        fair = config.priority_type == "priority/multifactor" and \
            (config.priority_weight_fairshare or config.priority_weight_energy)
        self.shares = SimShares(config, ((r.job.account or DEFAULT_ACCOUNT, r.job.user) for r in self.records.values()),
                                min((r.job.submit for r in self.records.values()), default=0.0)) if fair else None
        self.accounts = accounts  # the QOS and associations' limits, when the simulation applies them
        self.preempt = snapbuild.preempt_settings(config)
        self.requeued: dict[int, list[JobRecord]] = {}  # preemptor -> its requeued victims, queued once it starts
        self.suspended: dict[int, JobRecord] = {}  # by job id: jobs a preemptor suspended, their CPUs lent
        self.qos: dict[tuple[str, str], str] = {}
        self.running: dict[int, JobRecord] = {}
        self.followers: dict[int, list[JobRecord]] = {}  # by job id: the jobs of a closed loop sent once it ends
        self.heap: list[tuple[float, int, int, int, str]] = []
        self.seq = 0
        # what each kind of event does, by kind; each says whether a pass has anything to decide on
        self.handlers: tuple[Callable[[float, int, str], bool], ...] = (
            self._on_end, self._on_switched, self._on_submit, self._on_wake, self._on_period, self._on_wake,
            self._on_preempt, self._on_cap, self._on_balance)
        self.done = 0  # jobs ended for good
        self.last_end = 0.0
        self.expected: dict[int, float] = {}  # the pending jobs' expected starts, as the last full pass planned them
        self.events = self.passes = 0
        self.pass_times: list[float] = []
        # a backfill scheduler plans the whole queue every bf_interval, strict passes in between
        self.bf_interval = config.scheduler_parameters.bf_interval_s \
            if self.scheduler.backfill else None
        self.last_backfill = -math.inf
        self.backfill_wake = -math.inf
        self.view = NodeView(self.nodes, config.memory_consumable)
        self.series = snapbuild.Series()  # the snapshots, numbered, with what changed since the last
        # what each running job (or one waiting for its nodes to power up) holds, as snapshots show it
        self.holding = snapbuild.JobTable[RunningJob]()
        self.saving = PowerSaving(config, self.nodes, self.power, self.view,
                                  lambda when, node: self._push(when, SWITCHED, node=node))
        # the moving budget (PowerPlugin=power/balance): its next turn, the nodes it limits
        self.balancing = config.power_plugin == "power/balance"
        self.balance_due = -math.inf
        self.limited: set[str] = set()
        self.limit_changes: list[tuple[float, str, float | None]] = []
        # A pass that can start nothing is not run where the simulation keeps nothing else of it: no
        # preemption, no power-saving policies (they read its reasons), no cap, no fair share or
        # limits (recomputed at passes). Its outcome is then known: see _nothing_can_start.
        self.idle_passes = not (self.preempt.on or self.saving.policies or config.power_cap is not None
                                or config.power_cap_schedule or self.shares is not None or accounts is not None)
        self.needs: list[tuple[int, int]] = []  # (CPUs needed at least, job id) of the pending jobs, a heap

    # --- the clock ----------------------------------------------------------------------------------

    def _push(self, when: float, kind: int, job_id: int = 0, node: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, kind, self.seq, job_id, node))

    def run(self) -> Result:
        started = time.perf_counter()
        jobs = sorted(self.records.values(), key=lambda r: (r.job.submit, r.job.job_id))
        if not jobs:
            raise ValueError("the workload has no job this platform can run")
        first = self.last_end = jobs[0].job.submit
        self.meter.start(first, self.power.start(first), self.config.power_cap_schedule)
        self._roll_cap(first)
        for record in jobs:
            if record.job.preceding in self.records:  # a closed loop: sent once the preceding job ends
                self.followers.setdefault(record.job.preceding, []).append(record)
            else:
                self._push(record.job.submit, SUBMIT, record.job.job_id)
        if self.saving.period:
            self._push(first + self.saving.period, PERIOD)
        if self.saving.t_idle is not None:  # the nodes idle from the start reach the idle timeout too
            self._push(first + self.saving.t_idle, TICK)
        total = len(jobs)
        heap, handlers, meter = self.heap, self.handlers, self.meter
        while heap:
            now = heap[0][0]
            news = False  # anything for a pass to decide on (a budget's turn that moved nothing is not)
            while heap and heap[0][0] == now:
                _when, kind, _seq, job_id, name = heapq.heappop(heap)
                self.events += 1
                news = handlers[kind](now, job_id, name) or news
                if kind != CAP:
                    meter.idle = 0
            if self.done == total:  # the last completion ends the simulation: nothing more to decide
                break
            if news:
                self._pass(now)
            if self.progress and self.events % 2000 < 8:
                self.progress(self.done, total)
        for node in self.nodes.values():
            self.power.account(node, self.last_end)
        if self.progress:
            self.progress(self.done, total)
        saving = self.saving
        return Result(list(self.records.values()), dict(self.power.energy), saving.switches_on, saving.switches_off,
                      self.events, self.passes, time.perf_counter() - started, self.infeasible, first, self.last_end,
                      len(self.nodes), sum(n.conf.cpus for n in self.nodes.values()), saving.events,
                      self.pass_times, meter.over_w, meter.over_s, meter.peak_w, meter.changes, self.limit_changes)

    # --- the events ---------------------------------------------------------------------------------

    def _on_end(self, now: float, job_id: int, _node: str) -> bool:
        record = self.records[job_id]
        if record.end_due == now and self.running.get(job_id) is record:  # (not the end of a run that
            self._end(record, now)  # preemption cut short)
        return True

    def _on_preempt(self, now: float, job_id: int, _node: str) -> bool:
        record = self.records[job_id]
        if self.running.get(job_id) is record and record.preempted:
            self._expire(record, now)
        return True

    def _on_switched(self, now: float, _job_id: int, name: str) -> bool:
        node = self.nodes[name]
        for job_id in self.saving.switched(node, now):  # it came up: the jobs whose last node it was start
            record = self.records[job_id]
            record.waiting_for -= 1
            if record.waiting_for == 0:
                self._run(record, now)
        if not node.jobs and node.power == ON and self.saving.t_idle is not None:
            self._push(now + self.saving.t_idle, TICK)
        return True

    def _on_submit(self, _now: float, job_id: int, _node: str) -> bool:
        self._queue(self._request(self.records[job_id]))
        return True

    def _on_wake(self, _now: float, _job_id: int, _node: str) -> bool:
        """A pass is due: an idle timeout, a preemptor's, or backfill's timer."""
        return True

    def _on_period(self, now: float, _job_id: int, _node: str) -> bool:
        """The power-saving policies' periodic call, and the next one while jobs are left."""
        if self.done < len(self.records) and self.saving.period:
            self._push(now + self.saving.period, PERIOD)
        return True

    def _on_cap(self, now: float, _job_id: int, _node: str) -> bool:
        self.meter.idle += 1
        self._roll_cap(now)
        return True

    def _on_balance(self, now: float, _job_id: int, _node: str) -> bool:
        return self._balance(now)

    def _qos(self, account: str, user: str) -> str:
        """The job's QOS: its association's default (a trace names none)."""
        if self.accounts is None:
            return ""
        found = self.qos.get((account, user))
        if found is None:
            found = self.qos[(account, user)] = self.accounts.qos_of(account, user)
        return found

    def _request(self, record: JobRecord) -> JobRequest:
        job = record.job
        account, limit = job.account or DEFAULT_ACCOUNT, max(1, math.ceil(job.walltime / 60))
        qos = self._qos(account, job.user)
        if job.nodes:  # its own shape: so many cores on each of so many nodes, shared with other jobs
            # (a task of that many CPUs a node: only nodes with that many free cores are candidates)
            return JobRequest(job_id=job.job_id, user=job.user, partition=self.partition,
                              submit_time=record.submit, nodes_min=job.nodes, nodes_max=job.nodes,
                              ntasks=job.nodes, ntasks_set=True, ntasks_per_node=1,
                              cpus_per_task=job.procs // job.nodes, account=account, qos=qos,
                              time_limit_min=limit, power_fit=self.power_fit)
        if self.shared:
            return JobRequest(job_id=job.job_id, user=job.user, partition=self.partition,
                              submit_time=record.submit, ntasks=job.procs, ntasks_set=True,
                              account=account, qos=qos, time_limit_min=limit, power_fit=self.power_fit)
        return JobRequest(job_id=job.job_id, user=job.user, partition=self.partition,
                          submit_time=record.submit, nodes_min=record.nodes, ntasks=record.nodes,
                          ntasks_set=True, exclusive=True, account=account, qos=qos, time_limit_min=limit,
                          power_fit=self.power_fit)

    # --- one pass: the controller's loop in virtual time --------------------------------------------

    def _pass(self, now: float) -> None:
        self.passes += 1
        self.pass_times.append(now)
        # (the wake-up itself is due: last + interval - last may round below the interval)
        interval = self.bf_interval
        due = interval is None or now - self.last_backfill >= interval or now == self.backfill_wake
        if due:
            self.last_backfill = now
        elif interval is not None and self.backfill_wake <= now:  # the controller's timer: the next full pass
            self.backfill_wake = self.last_backfill + interval  # comes anyway
            self._push(self.backfill_wake, BACKFILL)
        if self.idle_passes and self._nothing_can_start():
            return
        if self.suspended:
            self._resume(now)
        snap = self.snapshot(now, due)
        decisions = schedule(snap, self.priority, self.scheduler, self.select, self.queue_memo)
        if due:
            self.expected = decisions.expected_start
        for job_id, alloc in decisions.starts:
            self._start(self.records[job_id], alloc, now)
        if self.accounts is not None and self.preempt.on and snap.running:
            self._preempt(snap, decisions, now)
        if self.saving.policies:
            prio, reasons = decisions.priorities, decisions.reasons
            order = sorted(self.pending, key=lambda j: (-prio.get(j.job_id, 0), j.submit_time, j.job_id))
            pending = tuple(powersave.PendingBrief(j.job_id, self.records[j.job_id].nodes,
                                                   self.records[j.job_id].job.walltime, self.expected.get(j.job_id),
                                                   reasons.get(j.job_id, "")) for j in order)
            releases = tuple((self._limit_end(r), len(r.alloc)) for r in self.running.values())
            self.saving.tick(now, pending, releases, snap.power)

    def _queue(self, request: JobRequest) -> None:
        self.pending.put(request)
        heapq.heappush(self.needs, (request.min_cpus, request.job_id))

    def _nothing_can_start(self) -> bool:
        """Whether this pass would start nothing, known without running it: every pending job needs
        more CPUs than are free in the whole machine (no policy starts a job without its CPUs; a
        task takes one at least). The simulation then keeps nothing else of a pass (see idle_passes),
        so the pass is counted, its backfill timer kept, and the policies are not run. About half
        the passes of a busy trace are such (KTH SP2: the machine full at most submissions)."""
        free = self.view.free_total()
        while self.needs and self.pending.get(self.needs[0][1]) is None:
            heapq.heappop(self.needs)  # (entries of jobs gone are dropped when they come to the top)
        return not self.needs or self.needs[0][0] > free

    def snapshot(self, now: float, backfill_due: bool = True) -> Snapshot:
        nodes, changed = self.view.take()
        carried = snapbuild.carries_running(backfill_due, self.meter.capped,
                                            self.preempt.on and self.accounts is not None)
        changes = self.series.changes(self.pending, self.holding if carried else None, changed)
        # running jobs count as used so far, CPU time and energy alike (EnergyFairShare must not
        # see a long job's energy only at its end while FairShare sees its CPU time all along)
        fair = self.shares.current(now, lambda: [
            UsageRecord(r.job.user, r.job.account or DEFAULT_ACCOUNT, sum(r.alloc_cpus.values()), r.start, None,
                        self.power.job_power(r) * (now - r.start))
            for r in self.running.values() if r.start >= 0]) if self.shares is not None and self.pending else {}
        accounts = None
        if self.accounts is not None:
            running = [r for r in self.running.values() if r.start >= 0]
            accounts = self.accounts.current(now, lambda: [self._use(r, now) for r in running],
                                             lambda: [self._active(r) for r in self.running.values()])
        return snapbuild.snapshot(self.config, now, nodes, self.partitions, self.pending, self.holding,
                                  backfill_due, self._power_snap(now), fairshare=fair, changes=changes,
                                  accounts=accounts)

    def _tres(self, record: JobRecord) -> dict[str, int]:
        assert self.accounts is not None
        cpu_watts = self.accounts.cpu_watts
        return limits.job_tres(sum(record.alloc_cpus.values()), len(record.alloc_cpus),
                               sum(record.alloc_mem_mb.values()), 0,
                               sum(cpus * cpu_watts.get(n, 0.0) for n, cpus in record.alloc_cpus.items()))

    def _use(self, record: JobRecord, now: float) -> limits.UseRecord:
        """A running job's use so far, as the limits count it."""
        account = record.job.account or DEFAULT_ACCOUNT
        return limits.UseRecord(record.job.user, account, self._qos(account, record.job.user), self._tres(record),
                                record.start, None, self.power.job_power(record) * (now - record.start))

    def _active(self, record: JobRecord) -> limits.ActiveJob:
        account = record.job.account or DEFAULT_ACCOUNT
        return limits.ActiveJob(record.job.job_id, record.job.user, account, self._qos(account, record.job.user),
                                self._tres(record), self._limit_end(record))

    def _limit_end(self, record: JobRecord) -> float:
        begin = record.start if record.start >= 0 else self._ready_at(record)
        return begin + max(1, math.ceil(record.job.walltime / 60)) * 60 + record.suspended_s

    def _ready_at(self, record: JobRecord) -> float:
        return max((self.nodes[n].since + self.nodes[n].conf.switching.on_s for n in record.alloc
                    if self.nodes[n].power == WAKING), default=0.0)

    def _power_snap(self, now: float) -> capadmission.PowerSnap | None:
        if not self.meter.capped:
            return None
        node_states = {name: snapbuild.cap_state(node.power, bool(node.jobs)) for name, node in self.nodes.items()}
        watts = self.power.node_power
        # a node whose jobs all run at a capped frequency draws less while busy, one held to a limit
        # no more than it
        capped = {n for r in self.running.values() if r.freq_khz is not None for n in r.alloc} | self.limited
        if capped:
            watts = dict(watts)
            for name in capped:
                node = self.nodes[name]
                watts[name] = snapbuild.node_power(node.conf, [(self.records[j].freq_khz, None) for j in node.jobs],
                                                   node.limit)
        return snapbuild.power_snap(self.meter.cap, watts, node_states, (), self.meter.steps, now,
                                    balancing=self.balancing)

    # --- jobs ------------------------------------------------------------------------------------------

    def _start(self, record: JobRecord, alloc: Allocation, now: float) -> None:
        self.pending.remove(record.job.job_id)
        for victim in self.requeued.pop(record.job.job_id, []):  # what it preempted may wait again
            self._queue(self._request(victim))
        self.running[record.job.job_id] = record
        record.alloc = list(alloc.cpus)
        record.nodes = len(record.alloc)
        record.alloc_cpus, record.alloc_mem_mb = dict(alloc.cpus), dict(alloc.mem_mb)
        record.freq_khz = None if alloc.limited else alloc.cpu_freq_khz
        for name in record.alloc:
            node = self.nodes[name]
            if alloc.limited and alloc.cpu_freq_khz is not None:  # held to what fits, as the controller starts it
                watts = float(snapbuild.limit_watts(node.conf, alloc.cpu_freq_khz))
                if node.limit is None or watts < node.limit:
                    node.limit = watts
                    self.limited.add(name)
                    self.limit_changes.append((now, name, watts))
            node.jobs[record.job.job_id] = alloc.cpus[name]
            node.alloc_cpus += alloc.cpus[name]
            node.alloc_mem_mb += alloc.mem_mb.get(name, 0)
            self.view.changed(node)
            if node.power == POWERED_OFF:
                self.saving.switch(node, True, now, f"job {record.job.job_id}")
            elif node.power == WAKING:
                self.saving.events.append((now, name, "ALLOCATED", f"job {record.job.job_id}"))
        record.waiting_for = sum(1 for n in record.alloc if self.nodes[n].power != ON)
        if record.waiting_for == 0:
            self._run(record, now)
        else:  # held from now, until the limit counted from when its last node is up
            self._hold(record)

    def _run(self, record: JobRecord, now: float) -> None:
        record.start = record.pace_since = now
        self._hold(record)
        self.power.draw(record, now)
        record.pace = self.power.pace_of(record)
        self._reschedule(record, now)
        self._balance_later(now)

    def _reschedule(self, record: JobRecord, now: float) -> None:
        """Its end, from what is left of its run at its pace, and at the latest its time limit."""
        left = max(0.0, record.job.runtime - record.done_s)
        record.end_due = min(now + left / record.pace, self._limit_end(record))
        self._push(record.end_due, END, record.job.job_id)

    def _hold(self, record: JobRecord) -> None:
        account = record.job.account or DEFAULT_ACCOUNT
        self.holding.put(RunningJob(record.job.job_id, record.alloc_cpus, record.alloc_mem_mb,
                                    self._limit_end(record), qos=self._qos(account, record.job.user),
                                    start=max(record.start, 0.0), ending=bool(record.preempted),
                                    partition=self.partition))

    # --- preemption: the controller's choice (wattsched.preemption), carried out in virtual time ----------

    def _preempt(self, snap: Snapshot, decisions: Decisions, now: float) -> None:
        """The victims the core chose hear of it now and go after their GraceTime, or (SUSPEND) are
        suspended at once, their CPUs lent to the preemptor, as the controller does."""
        assert self.accounts is not None
        for job_id, by in preemption.preemptees(snap, decisions, self.select).items():
            record = self.records[job_id]
            if record.preempted or record.start < 0:
                continue
            qos = self.accounts.qos.get(self._qos(record.job.account or DEFAULT_ACCOUNT, record.job.user))
            mode = preemption.mode_of(qos, self.preempt, snap.partitions.get(self.partition))
            record.preempted_by = by
            if mode == preemption.SUSPEND:
                self._suspend(record, now)
                self._push(now, TICK)  # a pass at once for the preemptor, as the controller's next one
                continue
            record.preempted = preemption.CANCEL if mode == preemption.CANCEL else preemption.REQUEUE
            self._hold(record)  # on its way out: no one else preempts it
            self._push(now + (qos.grace_time if qos is not None else 0), PREEMPT, job_id)

    def _suspend(self, record: JobRecord, now: float) -> None:
        """Frozen: it draws nothing and lends its CPUs (its memory stays held); its end is put off."""
        job_id = record.job.job_id
        self.power.progress(record, now)
        self.power.charge(record, now)
        record.watts = 0.0
        record.suspended_at, record.end_due = now, -1.0
        record.suspensions += 1
        self.suspended[job_id] = record
        self.holding.remove(job_id)  # out of the plan, as the controller's snapshot leaves it
        for name in record.alloc:
            node = self.nodes[name]
            node.alloc_cpus -= node.jobs[job_id]
            del node.draws[job_id]
            self.view.changed(node)
            self.power.set_category(node, COMPUTING if node.draws else IDLE, now)
            if node.limit is not None and node.draws:
                self.power.refresh(node, now)

    def _resume(self, now: float) -> None:
        """Suspended jobs resume, the earliest suspended first, as soon as their preemptor has started
        and their CPUs are free again (before anything new is started on them)."""
        for job_id, record in sorted(self.suspended.items(), key=lambda item: (item[1].suspended_at, item[0])):
            if self.pending.get(record.preempted_by) is not None:
                continue
            if any(self.nodes[n].conf.cpus - self.nodes[n].alloc_cpus < cpus for n, cpus in record.alloc_cpus.items()):
                continue
            del self.suspended[job_id]
            record.suspended_s += now - record.suspended_at
            record.suspended_at, record.preempted_by, record.pace_since = -1.0, 0, now
            for name, cpus in record.alloc_cpus.items():
                self.nodes[name].alloc_cpus += cpus
                self.view.changed(self.nodes[name])
            self.power.draw(record, now)
            record.pace = self.power.pace_of(record)
            self._reschedule(record, now)  # its run, put off
            self._hold(record)

    def _expire(self, record: JobRecord, now: float) -> None:
        """A preempted job's grace is over: it ends PREEMPTED, or goes back to the queue."""
        if record.preempted == preemption.CANCEL:
            self._end(record, now)
            record.preempted = "PREEMPTED"
            return
        self._end(record, now, final=False)
        record.preempted, record.requeues = "", record.requeues + 1
        record.start = record.end = record.end_due = -1.0
        record.done_s, record.pace, record.timed_out = 0.0, 1.0, False
        record.alloc, record.alloc_cpus, record.alloc_mem_mb = [], {}, {}
        preemptor = self.records.get(record.preempted_by)
        if preemptor is not None and preemptor.start < 0 and self.pending.get(preemptor.job.job_id) is not None:
            self.requeued.setdefault(preemptor.job.job_id, []).append(record)  # queued when it starts
        else:
            self._queue(self._request(record))

    def _end(self, record: JobRecord, now: float, final: bool = True) -> None:
        """Its run is over: for good (``final``), or to be queued again (a requeued preemptee)."""
        record.end = now
        if final:
            self.done += 1
            self.last_end = now
        self.power.progress(record, now)
        self.power.charge(record, now)
        record.timed_out = record.done_s < record.job.runtime - 1e-6
        del self.running[record.job.job_id]
        self.holding.remove(record.job.job_id)
        for follower in self.followers.pop(record.job.job_id, []) if final else ():
            follower.submit = now + follower.job.think
            self._push(follower.submit, SUBMIT, follower.job.job_id)
        for name in record.alloc:
            node = self.nodes[name]
            cpus = node.jobs.pop(record.job.job_id)
            del node.draws[record.job.job_id]
            node.alloc_cpus -= cpus
            node.alloc_mem_mb -= record.alloc_mem_mb.get(name, 0)
            self.view.changed(node)
            if node.draws:
                self.power.set_category(node, COMPUTING, now)
                if node.limit is not None:  # a lighter load: its other jobs may run faster
                    self.power.refresh(node, now)
                continue
            node.idle_since = now
            self.power.set_category(node, IDLE, now)
            if self.saving.t_idle is not None:
                self._push(now + self.saving.t_idle, TICK)
        if self.power.energy_model == "cpu":
            record.energy_j = self.power.job_power(record) * record.runtime
        if self.accounts is not None:
            use = self._use(record, now)
            self.accounts.ended(limits.UseRecord(use.user, use.account, use.qos, use.tres, record.start, now,
                                                 record.energy_j))
        if self.shares is not None:
            self.shares.ended(record.job.user, record.job.account or DEFAULT_ACCOUNT, sum(record.alloc_cpus.values()),
                              record.start, now, record.energy_j)

    # --- the cap over time ------------------------------------------------------------------------------

    def _roll_cap(self, now: float) -> None:
        """The cap at ``now`` (simulator.capmeter), met at once by the moving budget when it
        changed, as the controller meets it; its next change is queued as a CAP event."""
        if not self.meter.capped:
            return
        if self.meter.roll(now) and self.balancing and self.running:
            self._balance(now)
        upcoming = self.meter.next_change(now)
        if upcoming is not None:
            self._push(upcoming, CAP)
    # --- the moving budget ----------------------------------------------------------------------------

    def _balance_later(self, now: float) -> None:
        """The budget's next turn, one interval from now, unless one is queued already."""
        if self.balancing and self.balance_due <= now:
            self.balance_due = now + self.config.power_parameters.balance_interval
            self._push(self.balance_due, BALANCE)

    def _balance(self, now: float) -> bool:
        """The budget's turn: what the cap leaves the busy nodes, moved among them by their mean
        draw since the last turn (powerbalance.balance, with the controller's inputs); a node no
        longer busy is let go. Turns follow each other while anything runs. Whether a limit moved."""
        snap = self._power_snap(now)
        busy = [name for name, node in self.nodes.items() if node.draws] if snap is not None else []
        found: dict[str, float] = {}
        if snap is not None and busy:
            taken = set(busy)
            others = sum(snap.nodes[n].watts(snap.states[n]) for n in snap.nodes if n not in taken)
            nodes = {}
            for name in busy:
                node = self.nodes[name]
                self.power.account(node, now)
                since, joules = node.mark
                watts = (node.joules - joules) / (now - since) if node.limit is not None and now > since else None
                node.mark = (now, node.joules)
                conf = node.conf
                nodes[name] = powerbalance.BusyNode(name, float(conf.idle_watts or 0),
                                                    float(conf.max_watts or conf.idle_watts or 0), node.limit, watts,
                                                    max(self.records[j].start for j in node.draws))
            found = powerbalance.balance(snap.limit() - others, nodes, self.config.power_parameters, now)
        # whole watts, as the controller orders them; the limits that fall first (the watts they free
        # are what the others rise into)
        limits = {name: float(math.floor(found[name])) if name in found else None for name in self.limited | set(found)}
        moved = [name for name, limit in limits.items() if limit != self.nodes[name].limit]
        moved.sort(key=lambda name: (limits[name] or math.inf) - (self.nodes[name].limit or math.inf))
        for name in moved:
            self.nodes[name].limit = limits[name]
            self.limit_changes.append((now, name, limits[name]))
            self.power.refresh(self.nodes[name], now)
        self.limited = set(found)
        if self.running:
            self._balance_later(now)
        return bool(moved)


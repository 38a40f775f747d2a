"""sched/backfill: EASY (or conservative) backfilling, with first-fit or best-fit candidates.

Algorithm. Pending jobs are walked in priority order against a *profile*: each node's free
CPUs and memory now, plus the steps by which they change later (running jobs give their
resources back at start + time limit; every reservation takes them for its window). The
first ``bf_reservations`` jobs that cannot start now get a reservation at their earliest
start in the profile (their *shadow time*); a job whose earliest start is now starts. Every
later job is a backfill candidate: it starts now only if, for its whole time limit, it uses
nothing a reservation needs, so no reserved job is ever delayed. With ``bf_reservations=1``
this is EASY backfilling as in all five seeds; with ``unlimited`` every job gets a
reservation (conservative backfilling).

Candidates start in priority order (``bf_candidate=first``, first fit) or, as in the BFF and
BBF variants of Mämmelä et al. 2011, repeatedly the best candidate that fits:
``shortest`` or ``longest`` time limit, ``most_cpus`` or ``fewest_cpus``.

Reservations. Advanced reservations are honoured by node selection itself (see
:class:`wattsched.scheduling.candidates.Candidates`): a job's candidate nodes for a window exclude every
reservation it is not a member of that overlaps the window, and a reservation's boundaries
are among the start times tried.

Speed. Within a pass free resources only shrink, so a request that failed to fit now fails
again with a longer time limit, more tasks or a higher minimum node count (of the same shape
otherwise): such candidates are rejected without a search. This holds for any selection plugin
with which more tasks or more nodes never fit where fewer did not; GPUs a job asks for in all
are spread over its nodes, so for those jobs the node count stays part of the shape.
A candidate needing more CPUs than are free in the whole machine, or over its window, is
rejected at once. Both rejections only grow within a pass, so once every reservation is made
(first fit) they are computed for the rest of the queue at once, and only the candidates left
are tried one by one (a rest of fewer than 16 jobs is walked one by one: there the bulk's set-up
costs more than it saves). Releases only raise a node's free resources, so a window's least free
resources are its start's levels, lowered only on the nodes a reservation takes from inside it.

Power. Under a PowerCap (``bf_power=plan``, the default) the timeline also tracks the cluster's
maximum power (:mod:`wattsched.plugins.sched.powerplan`): a job blocked by the cap gets its
reservation when both its nodes and its power are free, and backfilled jobs may delay it in
neither. ``bf_power=admit`` is the prototype's plain admission (Hautreux 2013): power is checked only
for jobs starting now, and a job it blocks gets no reservation; the next job is tried.

Preemption. A job that may preempt (wattsched.preemption) and fits once the running jobs it
may preempt are gone gets its reservation now, on their nodes, as Slurm's will-run test with
preemptee candidates plans it: nothing of lower priority is backfilled there while they end.

Constraints. A job without a time limit never ends in the profile: it can start now only on
resources no reservation needs, and a reservation behind it waits forever (no shadow time,
reason Resources, no expected start). Reservations are only planned within ``bf_window``.

Parameters (SchedulerParameters): ``bf_interval`` (seconds between full backfill passes; the
passes in between are strict priority order, as sched/builtin), ``bf_window`` (minutes),
``bf_resolution`` (seconds: release times are rounded up to it, which bounds the start times
tried), ``bf_max_job_test`` (jobs tested per pass; as in Slurm, the jobs past it are not looked
at and keep their reasons), ``bf_max_job_user`` (jobs tested per user per pass),
``bf_continue`` (accepted; a pass here is never interrupted, so it always runs to the end of
the queue it tests), ``default_queue_depth`` (for the strict passes),
``bf_reservations`` and ``bf_candidate`` (ours, see above).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from wattsched import preemption, states
from wattsched.confvalues import SchedulerParams
from wattsched.memos import NodeMemo
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.plugins.sched.timeline import Profile, ReleaseMemo, among
from wattsched.scheduling.candidates import Candidates, unplaced_reason
from wattsched.scheduling.eligibility import qos_flag
from wattsched.scheduling.ledgers import PowerMeter, fit_power, gpu_ledger
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import Allocation, Decisions, JobRequest, Snapshot, job_end
from wattsched.scheduling.throttle import PLANNED_REASONS, Throttle

_FOREVER = math.inf
# what became of a first-fit candidate (BackfillScheduler._first_fit)
_STARTED, _UNFIT, _REFUSED = "started", "unfit", "refused"
# the shortest first-fit tail done in bulk (BackfillScheduler._first_fit_tail): a shorter one is walked
# job by job, as the bulk's set-up costs more than it saves on a few jobs
_BULK_FROM = 16


_BEST = {
    "shortest": lambda job: job.time_limit_min if job.time_limit_min is not None else _FOREVER,
    "longest": lambda job: -(job.time_limit_min if job.time_limit_min is not None else _FOREVER),
    "most_cpus": lambda job: -job.ntasks * job.cpus_per_task,
    "fewest_cpus": lambda job: job.ntasks * job.cpus_per_task,
}


def _shape(job: JobRequest) -> tuple:
    """Everything about a request that decides where it fits, but its time limit, task count and
    (unless its GPUs are spread over its nodes) its minimum node count."""
    spread = job.nodes_min if job.gpus and job.gpus.per_job else None
    return (job.partition, job.reservation, spread, job.nodes_max, job.ntasks_per_node,
            job.cpus_per_task, job.mem_per_node_mb, job.mem_per_cpu_mb, job.exclusive, job.req_nodes,
            job.exc_nodes, job.features, job.gpus)


class _Requests:
    """Per pending request, what the first-fit tail of a pass compares in bulk, kept from pass to
    pass while the request is the same object: its shape (a number standing for :func:`_shape`),
    minimum node count, task count, CPUs needed at least, time limit in seconds (inf: none),
    whether an array throttle or licenses apply, and its job id. A memo: the rows say what the requests say."""

    SHAPE, NODES, TASKS, NEED, LIMIT, THROTTLED, JOB_ID = range(7)

    def __init__(self) -> None:
        self.row: dict[int, int] = {}  # id(request) -> its row
        self.requests: list[JobRequest] = []  # by row, kept alive so that their ids stay theirs
        self.shapes: dict[tuple, int] = {}
        self.table = np.zeros((0, 7))

    def shape_id(self, shape: tuple) -> int:
        return self.shapes.setdefault(shape, len(self.shapes))

    def rows(self, jobs: Sequence[JobRequest]) -> np.ndarray:
        """The table's rows for ``jobs``, added for those it does not hold yet."""
        rows = np.fromiter(map(self.row.get, map(id, jobs), itertools.repeat(-1)), dtype=np.int64, count=len(jobs))
        missing = (rows < 0).nonzero()[0]
        if len(missing):
            new = [jobs[k] for k in missing.tolist()]
            rows[missing] = np.arange(len(self.requests), len(self.requests) + len(new))
            self.row.update((id(job), len(self.requests) + k) for k, job in enumerate(new))
            self.requests.extend(new)
            added = np.array([(self.shape_id(_shape(job)), job.nodes_min, job.ntasks,
                               job.min_cpus,
                               job.time_limit_min * 60 if job.time_limit_min is not None else _FOREVER,
                               bool(job.array_throttle or job.licenses), job.job_id) for job in new],
                              dtype=np.float64)
            self.table = np.concatenate((self.table, added))
        return self.table[rows]

    def keep(self, jobs: Sequence[JobRequest]) -> None:
        """Forget the requests that are not among ``jobs`` once they are most of the table."""
        if len(self.requests) > 2 * len(jobs) + 1024:
            rows = [row for job in jobs if (row := self.row.get(id(job))) is not None]
            self.requests = [self.requests[row] for row in rows]
            self.table = self.table[rows]
            self.row = {id(job): k for k, job in enumerate(self.requests)}


class _Pass:
    """The state of one backfill pass: the profile, the candidate lists, the failures seen."""

    def __init__(self, snapshot: Snapshot, select: SelectPlugin, params: SchedulerParams, memo: ReleaseMemo,
                 nodes: NodeMemo):
        self.snapshot, self.select, self.params = snapshot, select, params
        self.now = snapshot.now
        self.candidates = Candidates(snapshot, nodes)
        self.profile = Profile(snapshot.now, nodes)
        self.memo = self.profile.releases(snapshot.running, params.bf_resolution_s, memo, snapshot.changes)
        # per request shape, the (nodes, tasks, end) of the requests that did not fit now: a
        # frontier where no entry asks for no more nodes, no more tasks and ends no later than another
        self.failed: dict[tuple, list[tuple[int, int, float]]] = {}
        self.gpus = gpu_ledger(snapshot, nodes)
        self.meter = PowerMeter(snapshot.power, snapshot.running) if snapshot.power is not None else None
        self.power = PowerPlan(self.meter, snapshot.running, self.now, params.bf_resolution_s) \
            if self.meter is not None and params.bf_power == "plan" else None

    def power_fit(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """The allocation (at a lower CPU frequency if that is what fits) and why the power cap keeps
        the job from starting at ``start`` (None: it does not)."""
        if self.power is not None:
            plan = self.power
            return fit_power(job, alloc, plan.snap, lambda a: plan.check(job, a, start))
        if self.meter is not None and start == self.now:
            meter = self.meter
            return fit_power(job, alloc, meter.snap, lambda a: meter.check(job, a, start))
        return alloc, None

    def start(self, job: JobRequest, alloc: Allocation) -> None:
        end = job_end(job, self.now)
        self.profile.hold(alloc, self.now, end)
        if self.gpus is not None and alloc.gpus:
            self.gpus.hold(alloc, self.now, end)
        if self.power is not None:
            self.power.start_now(alloc, end)
        elif self.meter is not None:
            self.meter.commit(alloc, end)

    def reserve(self, job: JobRequest, alloc: Allocation, start: float) -> None:
        end = job_end(job, start)
        self.profile.hold(alloc, start, end)
        if self.gpus is not None and alloc.gpus:
            self.gpus.hold(alloc, start, end)
        if self.power is not None:
            self.power.hold(alloc, start, end)

    def fits_now(self, job: JobRequest) -> Allocation | None:
        """Where the job can run from now to its time limit without taking anything reserved."""
        if job.min_cpus > self.profile.total_now:
            return None
        end = job_end(job, self.now)
        failed = self.failed.setdefault(_shape(job), [])
        nodes, ntasks = job.nodes_min, job.ntasks
        if any(at_least <= nodes and tasks <= ntasks and until <= end for at_least, tasks, until in failed):
            return None
        alloc = self._place(job, self.now, end)
        if alloc is None:
            failed[:] = [entry for entry in failed if entry[0] < nodes or entry[1] < ntasks or entry[2] < end]
            failed.append((nodes, ntasks, end))
        return alloc

    def _place(self, job: JobRequest, start: float, end: float) -> Allocation | None:
        """Where the job fits over [start, end) in the profile (None: nowhere)."""
        need = job.min_cpus
        if start == self.now and need > self.profile.total_from_now(end):
            return None  # (most first-fit candidates that fail do so here: no window is built for them)
        window = self.profile.window(start, end)
        if need > window.total:
            return None
        gpus = self.gpus.free(start, end) if self.gpus is not None and job.gpus else None
        return self.select.select(job, self.candidates.for_job(job, window.with_cpus(), start), window,
                                  self.snapshot.def_mem_per_cpu_mb, gpus)

    def earliest(self, job: JobRequest, power_share: Throttle | None = None) -> tuple[float, Allocation] | None:
        """The job's earliest start within bf_window (nodes, and power when it is planned), and where;
        with ``power_share``, a job its power limits hold: also when they let it."""
        now, params = self.now, self.params
        alloc = self.fits_now(job) if power_share is None else None
        if alloc is not None:
            alloc, reason = self._planned_power(job, alloc, now)
            if reason is None:
                return now, alloc  # most jobs at the head of a queue start at once: no timeline needed
        window_end = now + params.bf_window_min * 60
        times = set(self.profile.release_times(now, window_end, params.bf_resolution_s))
        if power_share is not None:
            times.update(power_share.return_times(job, window_end))
        for resv in self.snapshot.reservations.values():
            times.update(t for t in (resv.start, resv.end) if now < t <= window_end)
        if self.power is not None:
            times.update(t for t in self.power.release_times() if t <= window_end)
        ordered = sorted(times)
        need = job.min_cpus
        for start, total in zip(ordered, self.profile.total_free_at(ordered), strict=True):
            if total < need:  # not enough CPUs in the whole machine at that moment
                continue
            if power_share is not None and not power_share.fits_at(job, start):
                continue
            alloc = self._place(job, start, job_end(job, start))
            if alloc is not None:
                alloc, reason = self._planned_power(job, alloc, start)
                if reason is None:
                    return start, alloc
        return None

    def seize(self, job: JobRequest, seizer: preemption.Seizer) -> Allocation | None:
        """Where the job could run from now to its time limit, taking nothing reserved, were the
        running jobs it may preempt gone (Slurm's will-run test with preemptee candidates)."""
        end = job_end(job, self.now)
        gpus = self.gpus.free(self.now, end) if self.gpus is not None and job.gpus else None
        return seizer.seize(job, self.candidates.for_job(job, None), self.profile.window(self.now, end), gpus)

    def _planned_power(self, job: JobRequest, alloc: Allocation, start: float) -> tuple[Allocation, str | None]:
        """Power as the timeline plans it; plain admission only judges jobs starting now, elsewhere."""
        return self.power_fit(job, alloc, start) if self.power is not None else (alloc, None)


class BackfillScheduler:
    """Reservations for the top blocked jobs; later jobs start now only if they delay none of them."""

    backfill = True  # the controller gives it running jobs' end times every bf_interval

    def __init__(self, params: SchedulerParams | None = None, bulk_from: int = _BULK_FROM):
        self.params = params or SchedulerParams()
        self.bulk_from = bulk_from  # the shortest first-fit tail done in bulk
        self.nodes = NodeMemo()  # one memo of the nodes for both kinds of pass
        self.strict = BuiltinScheduler(self.params, self.nodes)
        self.memo = ReleaseMemo()
        self.requests = _Requests()

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None:
        if not snapshot.backfill_due:
            self.strict.plan(snapshot, order, ineligible, select, throttle, decisions)
            return
        params = self.params
        bf = _Pass(snapshot, select, params, self.memo, self.nodes)
        self.memo = bf.memo
        seizer = preemption.Seizer(snapshot, select)
        reserved, tested = 0, 0
        per_user: Counter[str] = Counter()
        blocked: set[tuple[str, str]] = set()
        later: list[JobRequest] = []
        in_bulk = params.bf_candidate == "first" and params.bf_reservations > 0 and not params.bf_max_job_user
        for position, job in enumerate(order):
            if in_bulk and reserved >= params.bf_reservations and len(order) - position >= self.bulk_from:
                tested = self._first_fit_tail(order, position, tested, ineligible, bf, throttle, decisions)
                break
            reason: str | None = ineligible.get(job.job_id)
            if reason is not None:
                decisions.reasons[job.job_id] = reason
                continue
            if tested >= params.bf_max_job_test:
                # as Slurm's backfill: the jobs past the limit are not looked at and keep their
                # reasons, but for the ineligible ones, whose reasons are their own
                decisions.reasons.update(ineligible)
                break
            if params.bf_max_job_user:
                if per_user[job.user] >= params.bf_max_job_user:
                    decisions.reasons[job.job_id] = states.R_PRIORITY
                    continue
                per_user[job.user] += 1
            tested += 1
            if (refusal := throttle.refusal(job)) is not None:
                decisions.reasons[job.job_id] = refusal
                if refusal in PLANNED_REASONS and (params.bf_reservations == 0 or reserved < params.bf_reservations):
                    # held by a power share or its licenses: planned like the cap, when both its
                    # nodes and its power (or licenses) are free
                    found = bf.earliest(job, throttle)
                    if found is not None:
                        self._reserve(job, *found, bf, throttle, decisions)
                        reserved += 1
                continue
            if params.bf_reservations == 0 or reserved < params.bf_reservations:
                found = bf.earliest(job)
                now_alloc: Allocation | None
                if found is not None and found[0] == bf.now:
                    now_alloc, power_reason = bf.power_fit(job, found[1], bf.now)
                else:
                    now_alloc = bf.fits_now(job)
                    power_reason = bf.power_fit(job, now_alloc, bf.now)[1] if now_alloc is not None else None
                if found is not None and found[0] == bf.now and power_reason is None and now_alloc is not None:
                    self._start(job, now_alloc, bf, throttle, decisions, backfilled=bool(blocked))
                    continue
                key = (job.partition, job.reservation)
                if power_reason is not None:
                    decisions.reasons[job.job_id] = power_reason
                    if bf.power is None:  # plain admission: the next job is tried, nothing is reserved
                        continue
                else:
                    decisions.reasons[job.job_id] = states.R_PRIORITY if key in blocked else \
                        unplaced_reason(job, snapshot, bf.candidates.by_name)
                if qos_flag(snapshot, job, "NoReserve"):  # Slurm's NoReserve: no place is kept for it
                    continue
                blocked.add(key)
                if power_reason is None and seizer.on and seizer.may_want(job) and \
                        (seized := bf.seize(job, seizer)) is not None:
                    # it starts once its preemptees are gone: planned from now, waiting for Resources
                    found = (bf.now, seized)
                    decisions.reasons[job.job_id] = states.R_RESOURCES
                if found is not None:
                    self._reserve(job, *found, bf, throttle, decisions)
                    reserved += 1
            elif params.bf_candidate == "first":
                self._first_fit(job, bf, throttle, decisions)
            else:
                later.append(job)
        self._best_fit(later, bf, throttle, decisions)
        decisions.backfill_depth = tested
        self.requests.keep(order)

    def _first_fit_tail(self, order: Sequence[JobRequest], begin: int, tested: int, ineligible: Mapping[int, str],
                        bf: _Pass, throttle: Throttle, decisions: Decisions) -> int:
        """The first-fit candidates once every reservation is made, from ``order[begin]`` on: what
        the loop of :meth:`plan` does, but in bulk. Most candidates are rejected by
        :meth:`_Pass.fits_now` before any search (more CPUs than are free, or a request of their
        shape with no more tasks and no later end already failed); both only grow within a pass,
        so they are computed for all jobs at once, and only the others are tried, one by one, in
        order: they get the very reasons and starts the loop would give. Returns the jobs tested."""
        limit, now, columns = self.params.bf_max_job_test, bf.now, _Requests
        failures = [(self.requests.shape_id(shape), *entry) for shape, frontier in bf.failed.items()
                    for entry in frontier]
        unlooked = np.fromiter(ineligible, dtype=np.int64, count=len(ineligible))
        position = begin
        while position < len(order) and tested < limit:
            chunk = order[position:position + max(64, limit - tested)]
            position += len(chunk)
            rows = self.requests.rows(chunk)
            ids = rows[:, columns.JOB_ID].astype(np.int64)
            eligible = ~among(ids, unlooked)
            counted = np.cumsum(eligible)
            if counted[-1] > limit - tested:  # the job that makes ``limit`` is the last one looked at
                chunk = chunk[:int(np.searchsorted(counted, limit - tested)) + 1]
                rows, ids, eligible = rows[:len(chunk)], ids[:len(chunk)], eligible[:len(chunk)]
            tested += int(eligible.sum())
            shape, nodes, tasks = rows[:, columns.SHAPE], rows[:, columns.NODES], rows[:, columns.TASKS]
            need, end = rows[:, columns.NEED], now + rows[:, columns.LIMIT]
            rejected = need > bf.profile.total_now
            for failure in failures:
                rejected |= (shape == failure[0]) & (nodes >= failure[1]) & (tasks >= failure[2]) & (end >= failure[3])
            if throttle.limits_on:  # a job a limit holds keeps the limit's reason, whatever its fit
                for i in eligible.nonzero()[0].tolist():
                    refusal = throttle.refusal(chunk[i])
                    if refusal is not None:
                        decisions.reasons[chunk[i].job_id] = refusal
                        eligible[i] = False
            attended = rows[:, columns.THROTTLED] > 0  # a throttled job is looked at one by one
            at = 0
            while True:
                tried = ((~rejected[at:] | attended[at:]) & eligible[at:]).nonzero()[0]
                upto = at + int(tried[0]) if len(tried) else len(chunk)
                passed = eligible[at:upto].nonzero()[0] + at
                decisions.reasons.update(dict.fromkeys(ids[passed].tolist(), states.R_PRIORITY))
                if upto == len(chunk):
                    break
                job = chunk[upto]
                if (refusal := throttle.refusal(job)) is not None:
                    decisions.reasons[job.job_id] = refusal
                else:
                    outcome = self._first_fit(job, bf, throttle, decisions)
                    if outcome == _STARTED:
                        rejected |= need > bf.profile.total_now
                    elif outcome == _UNFIT:  # a failure: the requests it rules out now
                        failures.append((shape[upto], nodes[upto], tasks[upto], end[upto]))
                        rejected |= (shape == shape[upto]) & (nodes >= nodes[upto]) & (tasks >= tasks[upto]) & \
                            (end >= end[upto])
                at = upto + 1
        decisions.reasons.update(ineligible)
        return tested

    def _best_fit(self, later: list[JobRequest], bf: _Pass, throttle: Throttle, decisions: Decisions) -> None:
        """Start the best-fitting candidate, again and again, until none fits (BFF/BBF)."""
        key = _BEST.get(self.params.bf_candidate)
        waiting = list(later)
        while waiting and key is not None:
            fitting = []
            for job in waiting:
                if throttle.refusal(job) is None:
                    alloc = bf.fits_now(job)
                    if alloc is not None:
                        alloc, reason = bf.power_fit(job, alloc, bf.now)
                        if reason is None:
                            fitting.append((key(job), job, alloc))
            if not fitting:
                break
            _key, job, alloc = min(fitting, key=lambda f: (f[0], f[1].submit_time, f[1].job_id))
            self._start(job, alloc, bf, throttle, decisions, backfilled=True)
            waiting.remove(job)
        for job in waiting:
            decisions.reasons[job.job_id] = throttle.refusal(job) or states.R_PRIORITY

    def _first_fit(self, job: JobRequest, bf: _Pass, throttle: Throttle, decisions: Decisions) -> str:
        """A first-fit candidate, once every reservation is made: it starts now if it fits and the
        cap allows, else waits (Priority, or the cap's reason). The one path of first fit, for the
        loop of :meth:`plan` and the bulk of :meth:`_first_fit_tail` alike."""
        alloc = bf.fits_now(job)
        if alloc is None:
            decisions.reasons[job.job_id] = states.R_PRIORITY
            return _UNFIT
        alloc, reason = bf.power_fit(job, alloc, bf.now)
        if reason is not None:
            decisions.reasons[job.job_id] = reason
            return _REFUSED
        self._start(job, alloc, bf, throttle, decisions, backfilled=True)
        return _STARTED

    @staticmethod
    def _reserve(job: JobRequest, start: float, alloc: Allocation, bf: _Pass, throttle: Throttle,
                 decisions: Decisions) -> None:
        bf.reserve(job, alloc, start)
        throttle.planned(job, start)
        decisions.expected_start[job.job_id] = start

    @staticmethod
    def _start(job: JobRequest, alloc: Allocation, bf: _Pass, throttle: Throttle, decisions: Decisions,
               backfilled: bool) -> None:
        bf.start(job, alloc)
        decisions.starts.append((job.job_id, alloc))
        decisions.backfilled += int(backfilled)
        throttle.started(job)

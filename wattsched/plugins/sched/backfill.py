"""sched/backfill: EASY (or conservative) backfilling, with first-fit or best-fit candidates.

Algorithm. Pending jobs are walked in priority order against the pass's planner
(:mod:`wattsched.plugins.sched.planner`): each node's free CPUs and memory now, plus the steps by
which they change later (running jobs give their resources back at start + time limit; every
reservation takes them for its window), GPUs and power alike. The first ``bf_reservations`` jobs
that cannot start now get a reservation at their earliest start in the plan (their *shadow
time*); a job whose earliest start is now starts. Every later job is a backfill candidate: it
starts now only if, for its whole time limit, it uses nothing a reservation needs, so no reserved
job is ever delayed. With ``bf_reservations=1`` this is EASY backfilling as in all five seeds;
with ``unlimited`` every job gets a reservation (conservative backfilling).

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

import functools
import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from wattsched import preemption, states
from wattsched.confvalues import SchedulerParams
from wattsched.memos import NodeMemo
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.sched.plainplanner import PlainLevels, PlainPowerPlan
from wattsched.plugins.sched.planner import Levels, Planner, covers, shape
from wattsched.plugins.sched.powerplan import PowerPlan
from wattsched.plugins.sched.timeline import Profile, ReleaseMemo, among
from wattsched.scheduling.candidates import unplaced_reason
from wattsched.scheduling.eligibility import qos_flag
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


class _Requests:
    """Per pending request, what the first-fit tail of a pass compares in bulk, kept from pass to
    pass while the request is the same object: its shape (a number standing for :func:`planner.shape`),
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
            added = np.array([(self.shape_id(shape(job)), job.nodes_min, job.ntasks,
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


class BackfillScheduler:
    """Reservations for the top blocked jobs; later jobs start now only if they delay none of them."""

    backfill = True  # the controller gives it running jobs' end times every bf_interval

    def __init__(self, params: SchedulerParams | None = None, bulk_from: int = _BULK_FROM, plain: bool = False):
        """``plain``: plan over the plain timeline and power plan (plainplanner), the test oracle."""
        self.params = params or SchedulerParams()
        self.plain = plain
        self.bulk_from = bulk_from  # the shortest first-fit tail done in bulk
        self.nodes = NodeMemo()  # one memo of the nodes for both kinds of pass
        self.strict = BuiltinScheduler(self.params, self.nodes, plain)
        self.memo = ReleaseMemo()
        self.requests = _Requests()

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None:
        if not snapshot.backfill_due:
            self.strict.plan(snapshot, order, ineligible, select, throttle, decisions)
            return
        params = self.params
        planner = Planner(snapshot, select, self.nodes, self._timeline,
                          params.bf_resolution_s if params.bf_power == "plan" else None,
                          PlainPowerPlan if self.plain else PowerPlan)
        seizer = preemption.Seizer(snapshot, select)
        reserved, tested = 0, 0
        per_user: Counter[str] = Counter()
        blocked: set[tuple[str, str]] = set()
        later: list[JobRequest] = []
        in_bulk = params.bf_candidate == "first" and params.bf_reservations > 0 and not params.bf_max_job_user
        for position, job in enumerate(order):
            if in_bulk and reserved >= params.bf_reservations and len(order) - position >= self.bulk_from:
                tested = self._first_fit_tail(order, position, tested, ineligible, planner, throttle, decisions)
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
                    found = self._earliest(job, planner, throttle)
                    if found is not None:
                        self._reserve(job, *found, planner, throttle, decisions)
                        reserved += 1
                continue
            if params.bf_reservations == 0 or reserved < params.bf_reservations:
                reserved += self._head(job, planner, seizer, blocked, throttle, decisions)
            elif params.bf_candidate == "first":
                self._first_fit(job, planner, throttle, decisions)
            else:
                later.append(job)
        self._best_fit(later, planner, throttle, decisions)
        decisions.backfill_depth = tested
        self.requests.keep(order)

    def _head(self, job: JobRequest, planner: Planner, seizer: preemption.Seizer, blocked: set[tuple[str, str]],
              throttle: Throttle, decisions: Decisions) -> int:
        """A job while reservations are left to make: it starts now if it fits and the cap allows;
        else it waits with its reason (Priority behind a blocked job of its partition) and gets
        its reservation at its earliest start, or, where it may preempt, now on the nodes of the
        running jobs it would preempt. Returns the reservations made (0 or 1)."""
        found = self._earliest(job, planner)
        now_alloc: Allocation | None
        if found is not None and found[0] == planner.now:
            now_alloc, power_reason = planner.power_fit(job, found[1], planner.now)
        else:
            now_alloc = planner.fits_now(job)
            power_reason = planner.power_fit(job, now_alloc, planner.now)[1] if now_alloc is not None else None
        if found is not None and found[0] == planner.now and power_reason is None and now_alloc is not None:
            self._start(job, now_alloc, planner, throttle, decisions, backfilled=bool(blocked))
            return 0
        key = (job.partition, job.reservation)
        if power_reason is not None:
            decisions.reasons[job.job_id] = power_reason
            if planner.power is None:  # plain admission: the next job is tried, nothing is reserved
                return 0
        else:
            decisions.reasons[job.job_id] = states.R_PRIORITY if key in blocked else \
                unplaced_reason(job, planner.snapshot, planner.candidates.by_name)
        if qos_flag(planner.snapshot, job, "NoReserve"):  # Slurm's NoReserve: no place is kept for it
            return 0
        blocked.add(key)
        if power_reason is None and seizer.on and seizer.may_want(job) and \
                (seized := planner.seize(job, seizer)) is not None:
            # it starts once its preemptees are gone: planned from now, waiting for Resources
            found = (planner.now, seized)
            decisions.reasons[job.job_id] = states.R_RESOURCES
        if found is not None:
            self._reserve(job, *found, planner, throttle, decisions)
            return 1
        return 0

    def _timeline(self, snapshot: Snapshot, nodes: NodeMemo) -> Levels:
        """The pass's levels over time, from the running jobs' ends (their steps kept from the last pass)."""
        resolution = self.params.bf_resolution_s
        if self.plain:
            return PlainLevels(snapshot, nodes, resolution)
        profile = Profile(snapshot.now, nodes)
        self.memo = profile.releases(snapshot.running, resolution, self.memo, snapshot.changes)
        return profile

    def _earliest(self, job: JobRequest, planner: Planner,
                  power_share: Throttle | None = None) -> tuple[float, Allocation] | None:
        """The job's earliest start within bf_window, and where; with ``power_share``, a job its
        power limits or licenses hold: also when they let it."""
        until = planner.now + self.params.bf_window_min * 60
        if power_share is None:
            return planner.earliest(job, until, self.params.bf_resolution_s)
        return planner.earliest(job, until, self.params.bf_resolution_s, power_share.return_times(job, until),
                                functools.partial(power_share.fits_at, job))

    def _first_fit_tail(self, order: Sequence[JobRequest], begin: int, tested: int, ineligible: Mapping[int, str],
                        planner: Planner, throttle: Throttle, decisions: Decisions) -> int:
        """The first-fit candidates once every reservation is made, from ``order[begin]`` on: what
        the loop of :meth:`plan` does, but in bulk. Most candidates are rejected by
        :meth:`Planner.fits_now` before any search (more CPUs than are free, or a request of their
        shape with no more tasks and no later end already failed); both only grow within a pass,
        so they are computed for all jobs at once, and only the others are tried, one by one, in
        order: they get the very reasons and starts the loop would give. Returns the jobs tested."""
        limit, now, columns = self.params.bf_max_job_test, planner.now, _Requests
        failures = [(self.requests.shape_id(key), entry) for key, frontier in planner.failed.items()
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
            shapes, nodes, tasks = rows[:, columns.SHAPE], rows[:, columns.NODES], rows[:, columns.TASKS]
            need, end = rows[:, columns.NEED], now + rows[:, columns.LIMIT]
            rejected = need > planner.total_now
            for shape_id, failure in failures:
                rejected |= (shapes == shape_id) & covers(failure, nodes, tasks, end)
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
                    outcome = self._first_fit(job, planner, throttle, decisions)
                    if outcome == _STARTED:
                        rejected |= need > planner.total_now
                    elif outcome == _UNFIT:  # a failure: the requests it rules out now
                        failure = (nodes[upto], tasks[upto], end[upto])
                        failures.append((shapes[upto], failure))
                        rejected |= (shapes == shapes[upto]) & covers(failure, nodes, tasks, end)
                at = upto + 1
        decisions.reasons.update(ineligible)
        return tested

    def _best_fit(self, later: list[JobRequest], planner: Planner, throttle: Throttle, decisions: Decisions) -> None:
        """Start the best-fitting candidate, again and again, until none fits (BFF/BBF)."""
        key = _BEST.get(self.params.bf_candidate)
        waiting = list(later)
        while waiting and key is not None:
            fitting = []
            for job in waiting:
                if throttle.refusal(job) is None:
                    alloc = planner.fits_now(job)
                    if alloc is not None:
                        alloc, reason = planner.power_fit(job, alloc, planner.now)
                        if reason is None:
                            fitting.append((key(job), job, alloc))
            if not fitting:
                break
            _key, job, alloc = min(fitting, key=lambda f: (f[0], f[1].submit_time, f[1].job_id))
            self._start(job, alloc, planner, throttle, decisions, backfilled=True)
            waiting.remove(job)
        for job in waiting:
            decisions.reasons[job.job_id] = throttle.refusal(job) or states.R_PRIORITY

    def _first_fit(self, job: JobRequest, planner: Planner, throttle: Throttle, decisions: Decisions) -> str:
        """A first-fit candidate, once every reservation is made: it starts now if it fits and the
        cap allows, else waits (Priority, or the cap's reason). The one path of first fit, for the
        loop of :meth:`plan` and the bulk of :meth:`_first_fit_tail` alike."""
        alloc = planner.fits_now(job)
        if alloc is None:
            decisions.reasons[job.job_id] = states.R_PRIORITY
            return _UNFIT
        alloc, reason = planner.power_fit(job, alloc, planner.now)
        if reason is not None:
            decisions.reasons[job.job_id] = reason
            return _REFUSED
        self._start(job, alloc, planner, throttle, decisions, backfilled=True)
        return _STARTED

    @staticmethod
    def _reserve(job: JobRequest, start: float, alloc: Allocation, planner: Planner, throttle: Throttle,
                 decisions: Decisions) -> None:
        planner.reserve(alloc, start, job_end(job, start))
        throttle.planned(job, start)
        decisions.expected_start[job.job_id] = start

    @staticmethod
    def _start(job: JobRequest, alloc: Allocation, planner: Planner, throttle: Throttle, decisions: Decisions,
               backfilled: bool) -> None:
        planner.start(alloc, job_end(job, planner.now))
        decisions.starts.append((job.job_id, alloc))
        decisions.backfilled += int(backfilled)
        throttle.started(job)

"""The limits' verdicts (Slurm's acct_policy): the ledger of what the active jobs hold under each
QOS and association during a scheduling pass, a pending job's reason to wait, and whether a
submission is refused. The records, TRES and reasons are :mod:`wattsched.limits`'s.

- A QOS's limits are checked before the association's (its partition's QOS first, unless its
  own has OverPartQOS), and the first one a job would exceed is its pending reason.
- Group limits count every job of the group that runs (suspended ones too); Max limits of an
  association come from the nearest association that sets them.
- ``*TRESMins`` budgets: without ``safe`` a job starts while the budget is not used up; with
  ``safe`` only if its worst case fits what the running jobs leave of it.
- Power shares are planned over time for the backfill plan (:meth:`Ledger.plan`): a group holds
  its running jobs' watts until their time limits, and its reserved jobs' over their windows.
- Running jobs whose group has used up a budget (GrpTRESMins, energy included, or GrpWall) end
  TIMEOUT, as Slurm's acct_policy_job_time_out ends them (:func:`overrun`); not under ``safe``,
  where they started only because their worst case fitted.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from wattsched.limits import (
    JOB_REASONS,
    NO_LIMITS,
    NO_USE,
    R_INVALID_QOS,
    R_QOS_THRESHOLD,
    SUBMIT_REFUSED,
    AccountsSnap,
    Ask,
    AssocLimits,
    Limits,
    Qos,
    Tres,
    Use,
    inherited,
    inherited_tres,
    reason,
)


def over(used: float, adding: float, limit: int | None) -> bool:
    return limit is not None and used + adding > limit


@dataclass(slots=True)
class Held:
    """Jobs and TRES held at once, and TRES-minutes still to run, by one group."""

    jobs: int = 0
    tres: dict[str, int] = field(default_factory=dict)
    run_mins: dict[str, float] = field(default_factory=dict)
    # power over time, for the backfill plan: (until, watts) of the jobs that hold it (inf: no
    # limit) and (from, until, watts) of the jobs the plan reserved it for
    power_ends: list[tuple[float, int]] = field(default_factory=list)
    power_plans: list[tuple[float, float, int]] = field(default_factory=list)
    # power_ends sorted by end, with the watts held from each on (built when first asked: a QOS
    # holds thousands of jobs, asked about at every pending job of it)
    _by_end: tuple[list[float], list[float]] | None = None

    def add(self, tres: Tres, minutes: float | None, now: float = 0.0) -> None:
        """One more job holding ``tres`` for ``minutes`` more (None: without end). (Run for every
        active job under each of its groups at every pass: kept to plain loops.)"""
        self.jobs += 1
        held = self.tres
        for name, count in tres.items():
            held[name] = held.get(name, 0) + count
        if minutes is not None:
            run = self.run_mins
            for name, count in tres.items():
                run[name] = run.get(name, 0.0) + count * minutes
        watts = tres.get("power")
        if watts:
            self.power_ends.append((math.inf if minutes is None else now + minutes * 60.0, watts))
            self._by_end = None

    def power_at(self, t: float) -> float:
        """The watts the group holds at ``t``: its running jobs not yet ended, and its reservations."""
        if self._by_end is None:
            ends = sorted(self.power_ends)
            tail = list(itertools.accumulate((w for _e, w in reversed(ends)), initial=0.0))[::-1]
            self._by_end = ([e for e, _w in ends], tail)
        times, tail = self._by_end
        return tail[bisect.bisect_right(times, t)] + sum(w for start, end, w in self.power_plans if start <= t < end)

    def power_peak(self, start: float, end: float) -> float:
        """The most the group holds over [start, end): held power only falls but where a
        reservation begins, so the start and those moments are the only ones to look at."""
        moments = [start, *(s for s, _e, _w in self.power_plans if start < s < end)]
        return max(self.power_at(t) for t in moments)


class Ledger:
    """What the active jobs hold under each QOS and association, kept current as a pass starts
    more (:meth:`started`); :meth:`refusal` is a pending job's reason to wait, or None."""

    def __init__(self, snap: AccountsSnap, now: float, fairshare: Mapping[tuple[str, str], tuple[float, float]]):
        self.snap, self.now, self.fairshare = snap, now, fairshare
        self.assoc: dict[tuple[str, str], Held] = {}
        self.qos: dict[str, Held] = {}
        self.qos_user: dict[tuple[str, str], Held] = {}
        self.qos_account: dict[tuple[str, str], Held] = {}
        self._chains: dict[tuple[str, str], list[AssocLimits]] = {}
        self._verdicts: dict[tuple, str | None] = {}
        for job in snap.active:
            minutes = None if job.end_time is None else max(0.0, (job.end_time - now) / 60.0)
            self._hold(job.user, job.account, snap.qos_of(job.qos, job.partition), job.tres, minutes)

    def _chain(self, account: str, user: str) -> list[AssocLimits]:
        chain = self._chains.get((account, user))
        if chain is None:
            chain = self._chains[(account, user)] = self.snap.chain(account, user)
        return chain

    def _hold(self, user: str, account: str, qos_names: tuple[str, ...], tres: Tres, minutes: float | None) -> None:
        now = self.now
        for assoc in self._chain(account, user):
            self.assoc.setdefault(assoc.key, Held()).add(tres, minutes, now)
        for qos in qos_names:
            self.qos.setdefault(qos, Held()).add(tres, minutes, now)
            self.qos_user.setdefault((qos, user), Held()).add(tres, minutes, now)
            self.qos_account.setdefault((qos, account), Held()).add(tres, minutes, now)

    def _groups(self, ask: Ask) -> list[Held]:
        """Every group the job counts in (its QOS's, per user and account; its associations)."""
        groups = [self.assoc.setdefault(a.key, Held()) for a in self._chain(ask.account, ask.user)]
        for qos in self.snap.qos_of(ask.qos, ask.partition):
            groups += [self.qos.setdefault(qos, Held()), self.qos_user.setdefault((qos, ask.user), Held()),
                       self.qos_account.setdefault((qos, ask.account), Held())]
        return groups

    # --- power in the backfill plan: a job a power limit holds gets a reservation like any other ---

    def power_times(self, ask: Ask) -> list[float]:
        """When power comes back to the job's groups: its holders' ends and reservations' ends."""
        times = {end for g in self._groups(ask) for end, _w in g.power_ends if end != math.inf}
        times.update(end for g in self._groups(ask) for _s, end, _w in g.power_plans)
        return sorted(t for t in times if t > self.now)

    def power_fits(self, ask: Ask, start: float) -> bool:
        """Whether the job's power fits under each of its power limits over its whole run from ``start``."""
        end = math.inf if ask.minutes is None else start + ask.minutes * 60.0
        watts = ask.tres.get("power", 0)
        return all(group.power_peak(start, end) + watts <= limit for group, limit in self._power_limits(ask))

    def plan(self, ask: Ask, start: float) -> None:
        """The job is reserved from ``start``: its power is kept for it in each of its groups."""
        watts = ask.tres.get("power")
        if watts:
            end = math.inf if ask.minutes is None else start + ask.minutes * 60.0
            for group in self._groups(ask):
                group.power_plans.append((start, end, watts))
            self._verdicts.clear()

    def _power_limits(self, ask: Ask) -> list[tuple[Held, int]]:
        result = []
        for assoc in self._chain(ask.account, ask.user):
            if "power" in assoc.limits.grp_tres:
                result.append((self.assoc.setdefault(assoc.key, Held()), assoc.limits.grp_tres["power"]))
        for name in self.snap.qos_of(ask.qos, ask.partition):
            found = self.snap.qos.get(name)
            if found is None:
                continue
            lim = found.limits
            if "power" in lim.grp_tres:
                result.append((self.qos.setdefault(name, Held()), lim.grp_tres["power"]))
            if "power" in lim.max_tres_per_user:
                result.append((self.qos_user.setdefault((name, ask.user), Held()), lim.max_tres_per_user["power"]))
            if "power" in lim.max_tres_per_account:
                result.append((self.qos_account.setdefault((name, ask.account), Held()),
                               lim.max_tres_per_account["power"]))
        return result

    def started(self, ask: Ask) -> None:
        self._hold(ask.user, ask.account, self.snap.qos_of(ask.qos, ask.partition), ask.tres, ask.minutes)
        self._verdicts.clear()  # what was held is more now

    def refusal(self, ask: Ask) -> str | None:
        """The first limit the job would exceed by starting now, QOS first (Slurm's order); the
        same for every job of the same association, QOS and size until the next start."""
        key = (ask.user, ask.account, ask.qos, ask.partition, ask.minutes, *ask.tres.values(), *ask.tres)
        try:
            return self._verdicts[key]
        except KeyError:
            verdict = self._verdicts[key] = self._refusal(ask)
            return verdict

    def _refusal(self, ask: Ask) -> str | None:
        snap = self.snap
        qos = snap.qos.get(ask.qos)
        if ask.qos and qos is None:
            return R_INVALID_QOS
        if qos is not None and qos.usage_threshold is not None:
            fs = self.fairshare.get((ask.account, ask.user), (1.0, 1.0))[0]
            if fs < qos.usage_threshold:
                return R_QOS_THRESHOLD
        for name, qos_limits in self._qos_limits(ask, qos):
            found = self._check("QOS", qos_limits, self.qos.get(name), snap.qos_use.get(name, NO_USE), ask,
                                self.qos_user.get((name, ask.user)), self.qos_account.get((name, ask.account)))
            if found is not None:
                return found
        chain = self._chain(ask.account, ask.user)
        for i, assoc in enumerate(chain):
            found = self._check("Assoc", assoc.limits, self.assoc.get(assoc.key),
                                snap.assoc_use.get(assoc.key, NO_USE), ask, None, None, per_job=False)
            if found is not None:
                return found
            if i == 0 and assoc.user:  # MaxJobs counts the user's association: it comes first
                max_jobs = inherited(chain, "max_jobs")
                held = self.assoc.get(assoc.key)
                if over(held.jobs if held else 0, 1, max_jobs):
                    return JOB_REASONS[("Assoc", "max_jobs")]
        return self._assoc_per_job(chain, ask)

    def _qos_limits(self, ask: Ask, qos: Qos | None) -> list[tuple[str, Limits]]:
        """The QOS limits that hold the job, in Slurm's order: its partition's QOS first, unless
        its own QOS has OverPartQOS (then its own first, and its limits override the partition's)."""
        names = self.snap.qos_of(ask.qos, ask.partition)
        if qos is None:
            names = names[1:]
        if len(names) < 2:
            return [(n, self.snap.qos[n].limits) for n in names]
        own, part = qos, self.snap.qos[names[1]]
        assert own is not None
        if "OverPartQOS" in own.flags:
            set_by_own = set(own.limits.to_json())
            kept = {k: v for k, v in part.limits.to_json().items() if k not in set_by_own}
            return [(own.name, own.limits), (part.name, Limits.from_json(kept))]
        return [(part.name, part.limits), (own.name, own.limits)]

    def _assoc_per_job(self, chain: list[AssocLimits], ask: Ask) -> str | None:
        """The association's per-job limits, each from the nearest association that sets it."""
        max_wall = inherited(chain, "max_wall")
        if max_wall is not None and (ask.minutes is None or ask.minutes > max_wall):
            return JOB_REASONS[("Assoc", "max_wall")]
        for name, limit in inherited_tres(chain, "max_tres_per_job").items():
            if ask.tres.get(name, 0) > limit:
                return reason("Assoc", "per_job", name)
        for name, limit in inherited_tres(chain, "max_tres_mins_per_job").items():
            if _worst_minutes(name, ask) > limit:
                return reason("Assoc", "mins_per_job", name)
        return None

    def _check(self, owner: str, limits: Limits, held: Held | None, use: Use, ask: Ask, user_held: Held | None,
               account_held: Held | None, per_job: bool = True) -> str | None:
        if limits is NO_LIMITS:
            return None
        held = held or Held()
        safe = "safe" in self.snap.enforce
        if per_job:  # a QOS's own per-job, per-user and per-account limits
            found = _per_job(owner, limits, ask)
            if found is not None:
                return found
            user_held, account_held = user_held or Held(), account_held or Held()
            if over(user_held.jobs, 1, limits.max_jobs):
                return JOB_REASONS[(owner, "max_jobs")]
            if over(account_held.jobs, 1, limits.max_jobs_per_account):
                return JOB_REASONS[(owner, "max_jobs_per_account")]
            for name, limit in limits.max_tres_per_user.items():
                if over(self._holding(user_held, name, ask), ask.tres.get(name, 0), limit):
                    return reason(owner, "per_user", name)
            for name, limit in limits.max_tres_per_account.items():
                if over(self._holding(account_held, name, ask), ask.tres.get(name, 0), limit):
                    return reason(owner, "per_account", name)
        if over(held.jobs, 1, limits.grp_jobs):
            return JOB_REASONS[(owner, "grp_jobs")]
        for name, limit in limits.grp_tres.items():
            if over(self._holding(held, name, ask), ask.tres.get(name, 0), limit):
                return reason(owner, "grp", name)
        if limits.grp_wall is not None and use.wall_mins >= limits.grp_wall:
            return JOB_REASONS[(owner, "grp_wall")]
        for name, limit in limits.grp_tres_mins.items():
            used = use.tres_mins.get(name, 0.0)
            # without safe a job starts while the budget is not used up; with safe only if its
            # worst case fits what the running jobs leave of it
            worst = _run_minutes(name, held) + _worst_minutes(name, ask) if safe else 0.0
            if used >= limit or (safe and used + worst > limit):
                return reason(owner, "grp_mins", name)
        for name, limit in limits.grp_tres_run_mins.items():
            if over(_run_minutes(name, held), _worst_minutes(name, ask), limit):
                return reason(owner, "grp_run_mins", name)
        return None


    def _holding(self, held: Held, name: str, ask: Ask) -> float:
        """What a group holds of a TRES against a job starting now; for power, the most it holds
        over the job's run, the backfill plan's reservations included."""
        if name != "power" or not held.power_plans:
            return held.tres.get(name, 0)
        return held.power_peak(self.now, math.inf if ask.minutes is None else self.now + ask.minutes * 60.0)


POWER_REASONS = frozenset({reason("QOS", "grp", "power"), reason("Assoc", "grp", "power"),
                           reason("QOS", "per_user", "power"), reason("QOS", "per_account", "power")})


def _run_minutes(name: str, held: Held) -> float:
    """What the group's running jobs will still use of a TRES until their time limits."""
    if name == "energy":
        return held.run_mins.get("power", 0.0) * 60.0
    return held.run_mins.get(name, 0.0)


def _worst_minutes(name: str, ask: Ask) -> float:
    """The most the job can use of a TRES over its time limit (an unlimited job: without end)."""
    if ask.minutes is None:
        return math.inf if (ask.tres.get(name) or (name == "energy" and ask.tres.get("power"))) else 0.0
    if name == "energy":  # its power all along, in joules
        return ask.tres.get("power", 0) * ask.minutes * 60.0
    return ask.tres.get(name, 0) * ask.minutes


def _per_job(owner: str, limits: Limits, ask: Ask) -> str | None:
    """A QOS's limits on one job's size and time: a job over them waits (or is refused at
    submission, with DenyOnLimit) whatever else runs."""
    if limits.max_wall is not None and (ask.minutes is None or ask.minutes > limits.max_wall):
        return JOB_REASONS[(owner, "max_wall")]
    for name, limit in limits.max_tres_per_job.items():
        if ask.tres.get(name, 0) > limit:
            return reason(owner, "per_job", name)
    for name, limit in limits.max_tres_per_node.items():
        if ask.per_node.get(name, 0) > limit:
            return reason(owner, "per_node", name)
    for name, limit in limits.max_tres_mins_per_job.items():
        if _worst_minutes(name, ask) > limit:
            return reason(owner, "mins_per_job", name)
    for name, least in limits.min_tres_per_job.items():
        if ask.tres.get(name, 0) < least:
            return reason(owner, "min_per_job", name)
    return None


def per_job_refusal(snap: AccountsSnap, ask: Ask) -> str | None:
    """What DenyOnLimit refuses at submission: the per-job limits of each of the job's QOS (its
    own, its partition's) that has the flag, and then the associations' per-job limits."""
    denying = [snap.qos[q] for q in snap.qos_of(ask.qos, ask.partition)
               if q in snap.qos and "DenyOnLimit" in snap.qos[q].flags]
    if not denying:
        return None
    for qos in denying:
        if (found := _per_job("QOS", qos.limits, ask)) is not None:
            return found
    return Ledger(AccountsSnap(snap.qos, snap.assocs), 0.0, {})._assoc_per_job(snap.chain(ask.account, ask.user), ask)


def submit_refusal(snap: AccountsSnap, ask: Ask, adding: int, user_jobs: int, account_jobs: Mapping[str, int],
                   qos_jobs: Mapping[str, int], qos_user_jobs: Mapping[str, int],
                   qos_account_jobs: Mapping[str, int]) -> str | None:
    """Whether ``adding`` more jobs may be queued: MaxSubmitJobs(PerUser/PerAccount) and
    GrpSubmitJobs of the job's QOS and its partition's QOS, and of each association up the tree,
    counting pending and running jobs (array tasks each). ``user_jobs``: the user's in this
    association; ``account_jobs``: by account name (each counts its sub-accounts'); ``qos_*``: by
    QOS, all jobs, the user's and the account's (a job counts in its own QOS and its partition's)."""
    for name in snap.qos_of(ask.qos, ask.partition):
        qos = snap.qos.get(name)
        if qos is None:
            continue
        limits = qos.limits
        if over(qos_user_jobs.get(name, 0), adding, limits.max_submit) or \
                over(qos_account_jobs.get(name, 0), adding, limits.max_submit_per_account) or \
                over(qos_jobs.get(name, 0), adding, limits.grp_submit):
            return SUBMIT_REFUSED
    chain = snap.chain(ask.account, ask.user)
    if over(user_jobs, adding, inherited(chain, "max_submit")):
        return SUBMIT_REFUSED
    for assoc in chain:
        count = user_jobs if assoc.user else account_jobs.get(assoc.account, 0)
        if over(count, adding, assoc.limits.grp_submit):
            return SUBMIT_REFUSED
    return None


def overrun(snap: AccountsSnap) -> dict[int, str]:
    """The running jobs to end because a QOS of theirs (their own, their partition's) or their
    association or one above it has used up a GrpTRESMins or GrpWall budget (the running jobs'
    use so far counts), each with the budget's reason. Only with limits on and without safe."""
    if not snap.limits_on or "safe" in snap.enforce:
        return {}
    verdicts: dict[tuple[str, str], str | None] = {}  # per (kind, name): the budget used up, if any

    def used_up(limits: Limits, use: Use, owner: str) -> str | None:
        for name, limit in limits.grp_tres_mins.items():
            if use.tres_mins.get(name, 0.0) >= limit:
                return reason(owner, "grp_mins", name)
        if limits.grp_wall is not None and use.wall_mins >= limits.grp_wall:
            return JOB_REASONS[(owner, "grp_wall")]
        return None

    def verdict(kind: str, name: str, limits: Limits, use: Use) -> str | None:
        key = (kind, name)
        if key not in verdicts:
            verdicts[key] = used_up(limits, use, kind) if limits is not NO_LIMITS else None
        return verdicts[key]

    ended: dict[int, str] = {}
    for job in snap.active:
        for name in snap.qos_of(job.qos, job.partition):
            qos = snap.qos.get(name)
            if qos is not None and (why := verdict("QOS", name, qos.limits, snap.qos_use.get(name, NO_USE))):
                ended[job.job_id] = why
                break
        else:
            for assoc in snap.chain(job.account, job.user):
                why = verdict("Assoc", f"{assoc.account}/{assoc.user}", assoc.limits,
                              snap.assoc_use.get(assoc.key, NO_USE))
                if why:
                    ended[job.job_id] = why
                    break
    return ended

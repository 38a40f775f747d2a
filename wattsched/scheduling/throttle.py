"""What else than nodes decides whether a job may start in a pass: the array throttle, the QOS
and association limits (wattsched.ledger), the cluster's licenses (wattsched.licenses), kept
current as the pass starts and reserves jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from wattsched import ledger, limits, states
from wattsched import licenses as licenses_mod
from wattsched.scheduling.records import JobRequest, job_end

if TYPE_CHECKING:
    pass


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

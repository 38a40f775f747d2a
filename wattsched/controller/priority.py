"""The fair-share shell: every PriorityCalcPeriod (and after sacctmgr changes) it reads the
associations and the job history from the accounting database in a worker thread, adds the
running jobs' use so far, and hands the pure :mod:`wattsched.fairshare` computation's rows and
factors to the controller's state. Because usage is always recomputed from the recorded
history, it survives restarts and needs no state of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from wattsched import fairshare, limits, states
from wattsched.accounting.store import AccountingStore
from wattsched.config import Config
from wattsched.controller import acctpolicy
from wattsched.fairshare import ShareRow, UsageRecord

log = logging.getLogger("wattsched.controller")

@dataclass(slots=True)
class Shares:
    """The latest fair-share computation and the association index used at submission."""

    rows: list[ShareRow] = field(default_factory=list)
    factors: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    user_accounts: dict[str, set[str]] = field(default_factory=dict)
    default_account: dict[str, str] = field(default_factory=dict)
    admins: frozenset[str] = frozenset()
    computed_at: float = 0.0
    # the QOS, the associations' limits and the use they are held to (wattsched.limits)
    qos: dict[str, limits.Qos] = field(default_factory=dict)
    assoc_limits: dict[tuple[str, str], limits.AssocLimits] = field(default_factory=dict)
    assoc_use: dict[tuple[str, str], limits.Use] = field(default_factory=dict)
    qos_use: dict[str, limits.Use] = field(default_factory=dict)


def compute(accounting: AccountingStore, config: Config, running: list[UsageRecord],
            running_use: list[limits.UseRecord], now: float, origin: float) -> Shares:
    """Read associations and history (blocking: run it in a thread) and compute the shares."""
    assocs = accounting.assocs(config.cluster_name)
    half_life = config.priority_decay_half_life_min * 60.0
    since = fairshare.usage_since(config.priority_usage_reset_period, half_life, now, origin)
    history = assocs.usage_records(since)
    associations = assocs.associations()
    tree = [fairshare.Assoc(a["account"], a["user"], a["parent"], a["shares"]) for a in associations]
    rows = fairshare.shares(tree, [*history, *running], now, since, half_life, sum(n.cpus for n in config.nodes),
                            sum(n.max_watts or 0 for n in config.nodes), config.fairshare_dampening_factor,
                            fair_tree="FAIR_TREE" in config.priority_flags)
    user_accounts: dict[str, set[str]] = {}
    default_account: dict[str, str] = {}
    for a in associations:
        if a["user"]:
            user_accounts.setdefault(a["user"], set()).add(a["account"])
            default_account[a["user"]] = a["default_account"]
    admins = frozenset(u["name"] for u in assocs.users() if u["admin_level"] in ("Operator", "Administrator"))
    qos, assoc_limits = assocs.qos_records(), assocs.assoc_limits()
    assoc_use, qos_use = limits.recorded_use([*assocs.use_records(since), *running_use], assoc_limits, qos, now,
                                             since, half_life)
    return Shares(rows, fairshare.factors(rows), user_accounts, default_account, admins, now, qos, assoc_limits,
                  assoc_use, qos_use)


class FairShareCalc:
    """Runs :func:`compute` off the event loop and installs the result."""

    def __init__(self, state, accounting: AccountingStore):
        self.state, self.accounting = state, accounting
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:
            now = time.time()
            # accounting's history counts a job from its completion record on; until then (while
            # its energy settles too) its use is counted here: CPU time and, read off its nodes'
            # counters, its energy so far
            # (EnergyFairShare must not see a long job's energy only at its end while FairShare sees
            # its CPU time all along)
            counted = [j for j in self.state.jobs.values() if j.state == states.RUNNING or j.energy_pending]
            joules = self.state.energies_so_far(counted, now)
            running = [UsageRecord(j.user, j.account, j.num_cpus, j.start_time,
                                   j.end_time if j.energy_pending else None, joules[j.job_id]) for j in counted]
            running_use = [limits.UseRecord(j.user, j.account, j.qos, acctpolicy.active_job(j, {}).tres, j.start_time,
                                            j.end_time if j.energy_pending else None, joules[j.job_id])
                           for j in counted]
            try:
                origin = await asyncio.to_thread(self.accounting.history_start, self.state.config.cluster_name)
                shares = await asyncio.to_thread(compute, self.accounting, self.state.config, running, running_use,
                                                 now, min(origin, now))
            except Exception as exc:  # the database may be away: keep the last factors
                log.error("fair-share computation failed, keeping the previous factors: %s", exc)
                return
            self.state.shares = shares

    async def loop(self) -> None:
        period = float(self.state.config.priority_calc_period_s)
        while True:
            await self.refresh()
            await asyncio.sleep(period)

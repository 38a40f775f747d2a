"""The fair-share shell: every PriorityCalcPeriod (and after sacctmgr changes) it reads the
associations and the job history from the accounting database in a worker thread, counts the
jobs it holds as it holds them (running ones up to now), and hands the pure
:mod:`wattsched.fairshare` computation's rows and factors to the controller's state. Because
usage is always recomputed from the recorded history, it survives restarts and needs no state
of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wattsched import fairshare, limits, prediction, states
from wattsched.accounting.assoc import JobKey
from wattsched.accounting.store import AccountingStore
from wattsched.config import Config
from wattsched.controller import acctpolicy, jobenergy
from wattsched.fairshare import ShareRow, UsageRecord

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

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
    # what the jobs that ran before let expect of the same jobs (wattsched.prediction), by key
    predictions: dict[str, prediction.Prediction] = field(default_factory=dict)
    administrators: frozenset[str] = frozenset()  # of ``admins``, those at AdminLevel=Administrator


def compute(accounting: AccountingStore, config: Config, live: Live, now: float, origin: float,
            flush: Callable[[], None] | None = None) -> Shares:
    """Read associations and history (blocking: run it in a thread) and compute the shares. The
    jobs the controller holds count as it holds them (``live``), the rest as accounting recorded
    them; ``flush`` first writes what the outbox holds, so that a job the controller let go is in
    the history read here."""
    if flush is not None:
        flush()
    assocs = accounting.assocs(config.cluster_name)
    half_life = config.priority_decay_half_life_min * 60.0
    since = fairshare.usage_since(config.priority_usage_reset_period, half_life, now, origin)
    history = assocs.usage_records(since, live.keys)
    associations = assocs.associations()
    tree = [fairshare.Assoc(a["account"], a["user"], a["parent"], a["shares"]) for a in associations]
    rows = fairshare.shares(tree, [*history, *live.usage], now, since, half_life, sum(n.cpus for n in config.nodes),
                            sum(n.max_watts or 0 for n in config.nodes), config.fairshare_dampening_factor,
                            fair_tree="FAIR_TREE" in config.priority_flags)
    user_accounts: dict[str, set[str]] = {}
    default_account: dict[str, str] = {}
    for a in associations:
        if a["user"]:
            user_accounts.setdefault(a["user"], set()).add(a["account"])
            default_account[a["user"]] = a["default_account"]
    users = assocs.users()
    admins = frozenset(u["name"] for u in users if u["admin_level"] in ("Operator", "Administrator"))
    qos, assoc_limits = assocs.qos_records(), assocs.assoc_limits()
    assoc_use, qos_use = limits.recorded_use([*assocs.use_records(since, live.keys), *live.use], assoc_limits, qos, now,
                                             since, half_life)
    return Shares(rows, fairshare.factors(rows), user_accounts, default_account, admins, now, qos, assoc_limits,
                  assoc_use, qos_use, assocs.run_history(),
                  frozenset(u["name"] for u in users if u["admin_level"] == "Administrator"))


@dataclass(frozen=True, slots=True)
class Live:
    """The use of the jobs the controller holds that have run, as fair share and the limits count
    it; ``keys`` names them, so that their records in accounting are not counted twice."""

    keys: frozenset[JobKey]
    usage: list[UsageRecord]
    use: list[limits.UseRecord]


def live_use(state: ClusterState, now: float) -> Live:
    """Every held job that has run: running ones up to ``now``, ended ones to their end, their
    energy so far while their nodes' readings do not reach their end. Accounting may not have an
    ended job's final record yet (it is written a moment later, off the loop): counting it here
    leaves no moment in which its use is counted nowhere."""
    ran = [j for j in state.jobs.values() if j.start_time and (j.state == states.RUNNING or j.end_time)]
    metered = [j for j in ran if j.state == states.RUNNING or j.energy_pending]
    joules = jobenergy.energies_so_far(state, metered, now)
    usage, use = [], []
    for j in ran:
        end = None if j.state == states.RUNNING else j.end_time
        energy = joules[j.job_id] if j.job_id in joules else float(j.energy.consumed_energy_j or 0)
        usage.append(UsageRecord(j.user, j.account, j.num_cpus, j.start_time, end, energy))
        use.append(limits.UseRecord(j.user, j.account, j.qos, acctpolicy.active_job(j, {}).tres, j.start_time, end,
                                    energy))
    return Live(frozenset((j.job_id, j.submit_time) for j in ran), usage, use)


class FairShareCalc:
    """Runs :func:`compute` off the event loop and installs the result."""

    def __init__(self, state, accounting: AccountingStore, flush: Callable[[], None] | None = None):
        self.state, self.accounting, self.flush = state, accounting, flush
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:
            now = time.time()
            live = live_use(self.state, now)
            try:
                origin = await asyncio.to_thread(self.accounting.history_start, self.state.config.cluster_name)
                shares = await asyncio.to_thread(compute, self.accounting, self.state.config, live, now,
                                                 min(origin, now), self.flush)
            except Exception as exc:  # the database may be away: keep the last factors
                log.error("fair-share computation failed, keeping the previous factors: %s", exc)
                return
            self.state.shares = shares

    async def loop(self) -> None:
        period = float(self.state.config.priority_calc_period_s)
        while True:
            await self.refresh()
            await asyncio.sleep(period)

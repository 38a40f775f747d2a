"""The simulator's limits shell: the QOS and associations an administrator made with sacctmgr
(read from an accounting database), the simulated jobs' use kept in memory, and the accounts
part of each snapshot built as the controller builds it (wattsched.controller.acctpolicy), so
the same wattsched.limits verdicts hold the replayed jobs. A budget policy can thus be tried on
a trace before it is deployed.

A job's QOS is its association's default (the trace names none); a user the database does not
know runs under its account's association, or root's. Use is recomputed every
PriorityCalcPeriod of virtual time, as the controller does from its history.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Mapping

from wattsched import fairshare, limits
from wattsched.config import Config
from wattsched.limits import AccountsSnap, ActiveJob, AssocLimits, Qos, UseRecord


class SimAccounts:
    def __init__(self, config: Config, qos: Mapping[str, Qos], assocs: Mapping[tuple[str, str], AssocLimits],
                 origin: float):
        self.config = config
        self.qos, self.assocs = dict(qos), dict(assocs)
        self.snap = AccountsSnap(self.qos, self.assocs)
        self.half_life_s = config.priority_decay_half_life_min * 60.0
        self.origin = origin
        self.history: collections.deque[UseRecord] = collections.deque()  # in order of their ends
        self.next_at = -math.inf
        self.assoc_use: dict[tuple[str, str], limits.Use] = {}
        self.qos_use: dict[str, limits.Use] = {}
        per_node = {n.name: (n.max_watts or 0) / n.cpus for n in config.nodes if n.cpus}
        self.cpu_watts = per_node
        self.watts_per_cpu = {p.name: max((per_node.get(n, 0.0) for n in p.nodes), default=0.0)
                              for p in config.partitions}

    @classmethod
    def load(cls, config: Config, url: str, origin: float) -> SimAccounts:
        """The QOS and associations of ``config``'s cluster in the accounting database at ``url``."""
        # imported here: SQLAlchemy costs a replay without --accounts 0.2 s and 15 MiB for nothing
        from wattsched.accounting.store import AccountingStore

        store = AccountingStore(url)
        try:
            assocs = store.assocs(config.cluster_name)
            return cls(config, assocs.qos_records(), assocs.assoc_limits(), origin)
        finally:
            store.close()

    def qos_of(self, account: str, user: str) -> str:
        return self.snap.default_qos(account, user)

    def ended(self, record: UseRecord) -> None:
        self.history.append(record)

    def current(self, now: float, running: Callable[[], Iterable[UseRecord]],
                active: Callable[[], Iterable[ActiveJob]]) -> AccountsSnap:
        """The accounts part of the snapshot at ``now``: use recomputed when PriorityCalcPeriod has
        passed (``running``: the running jobs' use so far, asked for only then)."""
        if now >= self.next_at:
            self.next_at = now + self.config.priority_calc_period_s
            since = fairshare.usage_since(self.config.priority_usage_reset_period, self.half_life_s, now, self.origin)
            while self.history and self.history[0].end is not None and self.history[0].end < since:
                self.history.popleft()
            self.assoc_use, self.qos_use = limits.recorded_use([*self.history, *running()], self.assocs, self.qos,
                                                               now, since, self.half_life_s)
        return AccountsSnap(self.qos, self.assocs, self.assoc_use, self.qos_use, tuple(active()),
                            frozenset(self.config.accounting_storage_enforce), self.watts_per_cpu)

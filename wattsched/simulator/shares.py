"""The simulator's fair-share shell: the jobs' use kept in memory and handed to the pure
wattsched.fairshare computation once per PriorityCalcPeriod of virtual time (at the first pass
after it is due), as the controller hands it the accounting database's history on its timer.

Associations: every account seen in the workload under root, every user under its account, all
with one share (the seeds' equal target shares). A job's energy counts once it has ended, as in
the controller, where a running job's energy is not yet accounted.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Mapping

from wattsched import fairshare
from wattsched.config import Config
from wattsched.fairshare import Assoc, UsageRecord

DEFAULT_ACCOUNT = "default"


class SimShares:
    def __init__(self, config: Config, members: Iterable[tuple[str, str]], origin: float):
        self.config = config
        self.half_life_s = config.priority_decay_half_life_min * 60.0
        self.origin = origin
        pairs = sorted(set(members))
        self.assocs = [*(Assoc(a) for a in sorted({a for a, _u in pairs})),
                       *(Assoc(a, u, a) for a, u in pairs)]
        self.cpus = sum(n.cpus for n in config.nodes)
        self.max_watts = float(sum(n.max_watts or 0 for n in config.nodes))
        self.history: collections.deque[UsageRecord] = collections.deque()  # in order of their ends
        self.next_at = -math.inf
        self.factors: dict[tuple[str, str], tuple[float, float]] = {}

    def ended(self, user: str, account: str, cpus: int, start: float, end: float, energy_j: float) -> None:
        self.history.append(UsageRecord(user, account, cpus, start, end, energy_j))

    def current(self, now: float, running: Callable[[], Iterable[UsageRecord]]
                ) -> Mapping[tuple[str, str], tuple[float, float]]:
        """The factors, recomputed when PriorityCalcPeriod has passed (``running``: the running
        jobs' use, asked for only then)."""
        if now < self.next_at:
            return self.factors
        self.next_at = now + self.config.priority_calc_period_s
        since = fairshare.usage_since(self.config.priority_usage_reset_period, self.half_life_s, now, self.origin)
        while self.history and self.history[0].end is not None and self.history[0].end < since:
            self.history.popleft()
        rows = fairshare.shares(self.assocs, [*self.history, *running()], now, since, self.half_life_s, self.cpus,
                                self.max_watts, self.config.fairshare_dampening_factor,
                                fair_tree="FAIR_TREE" in self.config.priority_flags)
        self.factors = fairshare.factors(rows)
        return self.factors

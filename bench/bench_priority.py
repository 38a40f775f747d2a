"""Priority recomputation: priority/multifactor over 10,000 pending jobs of 1,000 associations.

Prints ms per priority pass (all factors, FS+EFS), and ms to compute the fair-share tree
(decayed usage of 100,000 finished jobs, shares, effective usage, FairShare and
EnergyFairShare for every association; classic and Fair Tree). Pure policy code, median of 5.
Target (issue 3): a priority pass under 100 ms on this machine.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import fairshare
from wattsched.config import Config
from wattsched.plugins.priority.multifactor import MultifactorPriority
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, Snapshot

NOW = 1_800_000_000.0


def _median_ms(call, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    rng = random.Random(3)
    accounts = [f"acct{i}" for i in range(100)]
    assocs = [fairshare.Assoc(a, shares=rng.randint(1, 10)) for a in accounts]
    users = [(rng.choice(accounts), f"user{i}") for i in range(900)]
    assocs += [fairshare.Assoc(a, u, shares=rng.randint(1, 5)) for a, u in users]
    history = []
    for _ in range(100_000):
        account, user = rng.choice(users)
        start = NOW - rng.uniform(0, 30 * 86400)
        history.append(fairshare.UsageRecord(user, account, rng.choice((1, 4, 16, 64)), start,
                                             start + rng.uniform(60, 86400), rng.uniform(1e4, 1e8)))
    half_life = 7 * 86400.0

    def tree(fair_tree: bool):
        usage = fairshare.raw_usage(history, NOW, half_life, NOW - 70 * 86400)
        return fairshare.tree_rows(assocs, usage, 80640 * half_life / 0.693, 5040 * 400 * half_life / 0.693,
                                   fair_tree=fair_tree)

    classic_ms = _median_ms(lambda: tree(False))
    fair_tree_ms = _median_ms(lambda: tree(True))
    factors = fairshare.factors(tree(False))
    nodes = tuple(NodeSnap(f"n{i}", 16, 16, 64000, 64000) for i in range(5040))
    queue = tuple(JobRequest(job_id=i, user=u, account=a, partition="p", submit_time=NOW - rng.uniform(0, 86400),
                             ntasks=rng.choice((1, 16, 64, 256)))
                  for i, (a, u) in enumerate(rng.choice(users) for _ in range(10_000)))
    snapshot = Snapshot(now=NOW, nodes=nodes, partitions={"p": PartitionSnap("p", tuple(n.name for n in nodes))},
                        pending=queue, fairshare=factors)
    config = Config(priority_weight_age=1000, priority_weight_job_size=100, priority_weight_fairshare=10000,
                    priority_weight_energy=10000, priority_weight_partition=100)
    plugin = MultifactorPriority(config)
    priority_ms = _median_ms(lambda: plugin.priorities(snapshot))
    report("priority recomputation", "10,000 pending jobs, 1,000 associations (100 accounts, 900 users), "
           "100,000 finished jobs over 30 days, 5,040 nodes, FS+EFS weights", {
               "priority pass (multifactor, all jobs)": f"{priority_ms:.1f} ms",
               "fair-share tree, classic (usage + factors)": f"{classic_ms:.0f} ms",
               "fair-share tree, Fair Tree": f"{fair_tree_ms:.0f} ms",
           })


if __name__ == "__main__":
    main()

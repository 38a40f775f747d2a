"""QOS and association limits in the scheduling pass: one full pass (priority order + EASY
backfill) on Curie (etc/curie.conf: 5,040 nodes x 16 cores, 2,000 running jobs) with 10,000
pending jobs of 1,000 users in 100 accounts, each account with a CPU limit (GrpTRES), a job
limit, an energy budget (GrpTRESMins=energy) with its use so far, each user a MaxJobs, and three
QOS (MaxJobsPerUser, GrpTRES=power, MaxWall). Pure policy code, median of 3.

Prints ms per pass with limits on (AccountingStorageEnforce=limits, and with safe) beside the
same pass with limits off, and how many jobs the limits held back. Target (issue 30): limits
cost at most a few tens of percent of the pass.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_backfill import curie_snapshot
from machine import report

from wattsched import limits
from wattsched.confvalues import SchedulerParams
from wattsched.limits import AccountsSnap, ActiveJob, AssocLimits, Limits, Qos, Use
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import Snapshot


def with_accounts(snapshot: Snapshot, enforce: frozenset[str], seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    accounts = [f"acct{i}" for i in range(100)]
    users = [(accounts[i % 100], f"user{i}") for i in range(1000)]
    qos = {"normal": Qos("normal", limits=Limits(max_jobs=20)),
           "high": Qos("high", priority=100, limits=Limits(grp_tres={"power": 500_000}, max_jobs=5)),
           "short": Qos("short", limits=Limits(max_wall=60))}
    assocs = {("root", ""): AssocLimits("root", "", "")}
    use = {}
    for account in accounts:
        assocs[(account, "")] = AssocLimits(account, "", "root", Limits(
            grp_tres={"cpu": 4096}, grp_jobs=400, grp_tres_mins={"energy": 5_000_000_000}))
        use[(account, "")] = Use({"energy": rng.uniform(0, 6e9), "cpu": rng.uniform(0, 1e6)}, rng.uniform(0, 1e4))
    for account, user in users:
        assocs[(account, user)] = AssocLimits(account, user, account, Limits(max_jobs=10))
    pending = tuple(replace(job, user=user, account=account, qos=rng.choice(("normal", "normal", "high", "short")))
                    for job, (account, user) in zip(snapshot.pending, (rng.choice(users) for _ in snapshot.pending),
                                                    strict=True))
    active = []
    for job in snapshot.running:
        account, user = rng.choice(users)
        cpus = sum(job.cpus.values())
        active.append(ActiveJob(job.job_id, user, account, rng.choice(("normal", "high")),
                                limits.job_tres(cpus, len(job.cpus), 0, 0, cpus * 25.0), job.end_time))
    accounts_snap = AccountsSnap(qos, assocs, use, {}, tuple(active), enforce, {"curie": 25.0})
    return replace(snapshot, pending=pending, accounts=accounts_snap)


def time_pass(snapshot: Snapshot) -> tuple[float, object]:
    runs, decisions = [], None
    for _ in range(3):
        scheduler = BackfillScheduler(SchedulerParams(bf_max_job_test=len(snapshot.pending)))
        started = time.perf_counter()
        decisions = schedule(snapshot, BasicPriority(), scheduler, ConsTresSelect())
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs), decisions


def main() -> None:
    base = curie_snapshot(10_000)
    partition = next(iter(base.partitions))
    figures = {}
    off = with_accounts(base, frozenset({"associations"}))
    off_ms, off_decisions = time_pass(off)
    figures["limits off (AccountingStorageEnforce=associations)"] = \
        f"{off_ms:.0f} ms per pass, {len(off_decisions.starts)} started"
    for name, enforce in (("limits", {"associations", "limits"}), ("limits,safe", {"associations", "limits",
                                                                                  "safe"})):
        snap = with_accounts(base, frozenset(enforce))
        snap = replace(snap, accounts=replace(snap.accounts, watts_per_cpu={partition: 25.0}))
        on_ms, decisions = time_pass(snap)
        held = sum(1 for r in decisions.reasons.values() if r.startswith(("Assoc", "QOS", "Max")))
        figures[f"limits on ({name})"] = (f"{on_ms:.0f} ms per pass (x{on_ms / off_ms:.2f} of off), "
                                          f"{len(decisions.starts)} started, {held} held by a limit")
    report("scheduling pass with QOS and association limits",
           "etc/curie.conf, 2,000 running and 10,000 pending jobs of 1,000 users in 100 accounts (GrpTRES cpu, "
           "GrpJobs, energy budget; MaxJobs per user), 3 QOS (MaxJobsPerUser, GrpTRES power, MaxWall), "
           "priority/basic, EASY backfill testing every job", figures)


if __name__ == "__main__":
    main()

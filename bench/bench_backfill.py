"""One full scheduling pass (priority order + EASY backfill) on Curie (etc/curie.conf: 5,040
nodes x 16 cores) with 2,000 running jobs and a queue of mixed sizes and limits.

Pure policy code, as the controller and the simulator call it: the snapshot is built once,
then `schedule` is timed (median of 3). Prints ms per pass for 1,000, 10,000, 50,000 and
100,000 pending jobs with every job tested (bf_max_job_test = queue length) and with Slurm's
default bf_max_job_test=500, and how the time grows against n log n. Targets: under 1 s for
10,000 jobs, growing no worse than n log n (issue 4); under 1 s for 100,000 (issue 31). Where
Slurm's sdiag is installed, its backfill cycle is printed beside ours (it needs a Slurm cluster
loaded with the same queue).
"""

from __future__ import annotations

import math
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import config as config_mod
from wattsched.confvalues import SchedulerParams
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, RunningJob, Snapshot

ETC = Path(__file__).resolve().parent.parent / "etc"
NOW = 1_800_000_000.0
NODE_COUNTS = (1, 1, 1, 2, 2, 4, 4, 8, 16, 32, 64, 128)  # whole-node jobs, small ones most often
LIMITS_MIN = (10, 30, 60, 120, 240, 720, 1440)


def curie_snapshot(pending: int, running: int = 2000, seed: int = 1) -> Snapshot:
    """Curie with ``running`` jobs placed on random nodes (about a third of the machine stays
    free, in fragments) and ``pending`` jobs in the queue."""
    rng = random.Random(seed)
    conf = config_mod.load(str(ETC / "curie.conf"))
    nodes = [(n.name, n.cpus, n.real_memory_mb) for n in conf.nodes]
    free = {name: cpus for name, cpus, _mem in nodes}
    idle = [name for name, _c, _m in nodes]
    rng.shuffle(idle)
    busy = []
    for job_id in range(1, running + 1):
        cpus: dict[str, int] = {}
        if rng.random() < 0.8:  # whole nodes
            for _ in range(rng.choice((1, 1, 1, 2, 2, 4))):
                name = idle.pop()
                cpus[name], free[name] = free[name], 0
        else:  # part of a node, shared with other such jobs
            name = idle[-1]
            take = min(rng.randint(1, 15), free[name])
            cpus[name] = take
            free[name] -= take
            if free[name] == 0:
                idle.pop()
        busy.append(RunningJob(job_id, cpus, dict.fromkeys(cpus, 0),
                               NOW + rng.randint(1, rng.choice(LIMITS_MIN)) * 60))
    node_snaps = tuple(NodeSnap(name, cpus, free[name], mem, mem) for name, cpus, mem in nodes)
    part = conf.partitions[0]
    queue = []
    for job_id in range(100_000, 100_000 + pending):
        count = rng.choice(NODE_COUNTS)
        small = rng.random() < 0.3
        queue.append(JobRequest(job_id=job_id, user=f"user{rng.randint(1, 50)}", partition=part.name,
                                submit_time=NOW - pending + job_id, nodes_min=1 if small else count,
                                ntasks=rng.randint(1, 16) if small else count * 16,
                                time_limit_min=rng.choice(LIMITS_MIN)))
    return Snapshot(now=NOW, nodes=node_snaps, partitions={part.name: PartitionSnap(part.name, part.nodes)},
                    pending=tuple(queue), running=tuple(busy))


def time_pass(snapshot: Snapshot, params: SchedulerParams) -> tuple[float, object]:
    runs = []
    decisions = None
    for _ in range(3):
        scheduler = BackfillScheduler(params)
        started = time.perf_counter()
        decisions = schedule(snapshot, BasicPriority(), scheduler, ConsTresSelect())
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs), decisions


def main() -> None:
    figures: dict[str, str] = {}
    base = None
    for size in (1_000, 10_000, 50_000, 100_000):
        snapshot = curie_snapshot(size)
        full_ms, decisions = time_pass(snapshot, SchedulerParams(bf_max_job_test=size))
        default_ms, _ = time_pass(snapshot, SchedulerParams())
        if base is None:
            base = (size, full_ms)
        nlogn = (size * math.log(size)) / (base[0] * math.log(base[0]))
        figures[f"{size} pending"] = (
            f"{full_ms:.0f} ms per pass testing every job ({len(decisions.starts)} started, "
            f"{decisions.backfilled} by backfill, {len(decisions.expected_start)} reservation); "
            f"{default_ms:.0f} ms with bf_max_job_test=500; growth x{full_ms / base[1]:.1f} "
            f"(n log n: x{nlogn:.1f})")
    conservative_ms, decisions = time_pass(curie_snapshot(10_000), SchedulerParams(bf_reservations=0,
                                                                                   bf_max_job_test=250))
    figures["conservative"] = (f"{conservative_ms:.0f} ms per pass with bf_reservations=unlimited, "
                               f"bf_max_job_test=250, 10000 pending ({len(decisions.expected_start)} reservations)")
    figures["running jobs"] = f"{len(snapshot.running)}, leaving {sum(n.free_cpus for n in snapshot.nodes)} of " \
        f"{sum(n.cpus for n in snapshot.nodes)} CPUs free"
    figures["slurm sdiag"] = _slurm_sdiag()
    report("backfill pass", "etc/curie.conf, 2,000 running jobs on random nodes, queue of mixed node counts "
           "(1-128 whole nodes, 30 % 1-16 CPU jobs) and limits (10 min-1 day), priority/basic, EASY", figures)


def _slurm_sdiag() -> str:
    slurmctld = shutil.which("slurmctld")  # our own sdiag may be on PATH too: take Slurm's beside slurmctld
    if not slurmctld or not (Path(slurmctld).parent / "sdiag").exists():
        return "no Slurm installed on this machine: nothing to compare with"
    out = subprocess.run([str(Path(slurmctld).parent / "sdiag")], capture_output=True, text=True,
                         check=False).stdout
    cycle = [line.strip() for line in out.split("Backfilling stats", 1)[-1].splitlines() if "cycle" in line]
    return "; ".join(cycle[:4]) or "sdiag printed no backfill statistics"


if __name__ == "__main__":
    main()

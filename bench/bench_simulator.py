"""Simulation speed and memory, the three figures of issue 19 (item 7), each case in a process of
its own so that its peak memory is its own:

- RICC: the largest trace in ../shared/traces (RIKEN RICC, 447,794 jobs) replayed on its own
  platform (etc/ricc1024.conf: 1,024 nodes of 8 cores, EASY backfilling every bf_interval=30 s
  with strict passes between, select/cons_tres, jobs sharing nodes as they asked for cores), for
  growing prefixes: jobs and events per second, wall seconds, how the time grows with the length.
  Target: 100,000 jobs in under 60 s.
- wide: 100,000 one-CPU jobs (seeded: exponential arrivals and run times of mean 1 h, limits twice
  the run time) on 25,000 one-CPU nodes under EASY backfilling (bf_interval=30): node selection
  must not cost a scan of every idle node. Target: under 120 s.
- memory: the peak RSS of the RICC replay of 122,000 jobs. Target: under 400 MiB.

Usage: bench_simulator.py [N ...]   (RICC prefixes; default: 10000 25000 50000 100000)
       bench_simulator.py --case ricc N | wide N NODES   (one case, as JSON: what main runs)
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import config
from wattsched.simulator import engine, workload
from wattsched.simulator.workload import SimJob, Workload

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "RICC-2010-2.swf.gz"


def wide_workload(count: int, nodes: int, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    mean_run, clock, jobs = 3600.0, 0.0, []
    gap = mean_run / (nodes * 0.8)  # arrivals that would keep 80 % of the nodes busy
    for job_id in range(1, count + 1):
        clock += rng.expovariate(1 / gap)
        run = rng.expovariate(1 / mean_run) + 1
        jobs.append(SimJob(job_id, clock, run, max(2 * run, 60), 1))
    return Workload(jobs)


def case(kind: str, size: int, nodes: int = 0) -> dict:
    started = time.perf_counter()
    if kind == "ricc":
        platform = config.load(ROOT / "etc" / "ricc1024.conf")
        jobs = workload.parse_swf(TRACE, max_jobs=size)
    else:
        path = Path(tempfile.mkdtemp()) / "wide.conf"
        path.write_text("SchedulerType=sched/backfill\nSchedulerParameters=bf_interval=30\nSelectType=select/cons_tres\n"
                        f"NodeName=w[1-{nodes}] CPUs=1 RealMemory=1000\n"
                        f"PartitionName=p Nodes=w[1-{nodes}] Default=YES MaxTime=INFINITE\n")
        platform = config.load(path)
        jobs = wide_workload(size, nodes)
    prepared_s = time.perf_counter() - started
    summary = engine.Simulation(platform, jobs, shared=True).run().summary()
    return {**summary, "prepared_s": prepared_s, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_case(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--case", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def line(s: dict, growth: str = "") -> str:
    return (f"{s['wall_s']:.1f} s simulated ({s['jobs'] / s['wall_s']:,.0f} jobs/s, {s['events_per_s']:,.0f} "
            f"events/s, {s['passes']} passes) + {s['prepared_s']:.1f} s reading; {s['makespan_s'] / 86400:.1f} "
            f"days, utilization {s['utilization']:.2f}, mean wait {s['mean_wait_s']:.0f} s{growth}; "
            f"peak RSS {s['peak_mib']:.0f} MiB")


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 25_000, 50_000, 100_000]
    if not TRACE.exists():
        sys.exit(f"bench_simulator: {TRACE} not found (the Parallel Workloads Archive's RICC-2010-2.swf.gz)")
    figures: dict[str, str] = {}
    previous: tuple[int, float] | None = None
    for size in sizes:
        summary = run_case("ricc", str(size))
        growth = ""
        if previous is not None:
            growth = f", x{summary['wall_s'] / previous[1]:.2f} time for x{size / previous[0]:.2f} jobs"
        previous = (size, summary["wall_s"])
        figures[f"RICC {size} jobs on 1,024 nodes (target 100,000 < 60 s)"] = line(summary, growth)
    figures["wide: 100000 one-CPU jobs on 25,000 one-CPU nodes (target < 120 s)"] = line(
        run_case("wide", "100000", "25000"))
    figures["memory: RICC 122000 jobs on 1,024 nodes (target peak < 400 MiB)"] = line(run_case("ricc", "122000"))
    report("simulator speed and memory (EASY backfill, shared nodes)",
           "RICC-2010-2 trace prefixes on etc/ricc1024.conf (1,024 nodes x 8 cores); a seeded one-CPU workload "
           "on 25,000 one-CPU nodes", figures)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--case"]:
        print(json.dumps(case(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)))
    else:
        main()

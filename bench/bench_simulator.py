"""Simulation speed: the largest trace in ../shared/traces (RIKEN RICC, 447,794 jobs, by job count)
replayed on its own platform (etc/ricc1024.conf: 1,024 nodes of 8 cores, EASY backfilling every
bf_interval=30 s with strict passes between, select/cons_tres, jobs sharing nodes as they asked for
cores), for growing prefixes of the trace: jobs per second, events per second, wall seconds, peak
memory, and how the time grows with the trace's length. The target is 100,000 jobs on a
1,000-node platform in under 60 s.

Usage: bench_simulator.py [N ...]   (default: 10000 25000 50000 100000)
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report
from wattsched import config
from wattsched.simulator import engine, workload

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "RICC-2010-2.swf.gz"


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 25_000, 50_000, 100_000]
    if not TRACE.exists():
        sys.exit(f"bench_simulator: {TRACE} not found (the Parallel Workloads Archive's RICC-2010-2.swf.gz)")
    platform = config.load(ROOT / "etc" / "ricc1024.conf")
    figures: dict[str, str] = {}
    previous: tuple[int, float] | None = None
    for size in sizes:
        started = time.perf_counter()
        jobs = workload.parse_swf(TRACE, max_jobs=size)
        parse_s = time.perf_counter() - started
        result = engine.Simulation(platform, jobs, shared=True).run()
        summary = result.summary()
        growth = ""
        if previous is not None:
            growth = f", x{summary['wall_s'] / previous[1]:.2f} time for x{size / previous[0]:.2f} jobs"
        previous = (size, summary["wall_s"])
        figures[f"{size} jobs"] = (
            f"{summary['wall_s']:.1f} s simulated ({summary['jobs'] / summary['wall_s']:,.0f} jobs/s, "
            f"{summary['events_per_s']:,.0f} events/s, {summary['passes']} passes) + {parse_s:.1f} s parsing; "
            f"{(summary['makespan_s']) / 86400:.1f} days of trace, utilization {summary['utilization']:.2f}, "
            f"mean wait {summary['mean_wait_s']:.0f} s{growth}")
    figures["peak RSS"] = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    report("simulator speed (EASY backfill, shared nodes)",
           f"RICC-2010-2 trace prefixes on etc/ricc1024.conf ({len(platform.nodes)} nodes x 8 cores)", figures)


if __name__ == "__main__":
    main()

"""Run every benchmark in this folder, one after the other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for script in ("bench_vs_slurm.py", "bench_cli.py", "bench_launch.py", "bench_throughput.py", "bench_curie.py",
               "bench_scale.py", "bench_backfill.py", "bench_priority.py", "bench_powercap.py", "bench_energy.py",
               "bench_energypolicy.py", "bench_failover.py",
               "bench_powersave.py", "bench_simulator.py", "bench_accasim.py", "bench_hostile.py", "bench_abuse.py",
               "bench_metrics.py", "bench_cgroup.py"):
    subprocess.run([sys.executable, str(HERE / script)], check=True)

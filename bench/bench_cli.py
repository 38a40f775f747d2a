"""CLI latency and controller memory: squeue on an empty cluster and with 10,000 pending jobs.

Targets (issue 2): squeue on an empty cluster < 0.25 s wall; with 10,000 jobs < 0.5 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report, rss_mib
from wattsched.testcluster import BIN, Cluster


def wall(cluster: Cluster, *args: str, runs: int = 10) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(BIN / args[0]), *args[1:]], env=cluster.env, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(jobs: int = 10_000) -> None:
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), nodes=16, cpus=8, agents=2).start()
        try:
            empty = wall(cluster, "squeue")
            rss_empty = rss_mib(cluster.controller.pid)
            body = {"script": "#!/bin/sh\ntrue\n", "work_dir": root, "hold": True, "output": "/dev/null"}
            import httpx

            headers = {"Authorization": f"Bearer {cluster.token()}"}
            with httpx.Client(base_url=f"http://127.0.0.1:{cluster.port}", headers=headers) as client:
                for _ in range(jobs):
                    client.post("/v1/jobs", json=body).raise_for_status()
            full = wall(cluster, "squeue", runs=5)
            full_h = wall(cluster, "squeue", "-h", "-o", "%i %T %r", runs=5)
            rss_full = rss_mib(cluster.controller.pid)
        finally:
            cluster.stop()
    report("cli latency and controller memory",
           f"16 virtual nodes x 8 CPUs, 2 agents; then {jobs} held (pending) jobs submitted through the API",
           {"squeue_empty_wall_s (median of 10)": f"{empty:.3f}",
            f"squeue_{jobs}_pending_wall_s (median of 5)": f"{full:.3f}",
            f"squeue_{jobs}_pending_custom_format_wall_s": f"{full_h:.3f}",
            "controller_rss_empty_mib": f"{rss_empty:.0f}",
            f"controller_rss_{jobs}_jobs_mib": f"{rss_full:.0f}"})


if __name__ == "__main__":
    main()

"""What confinement costs: cgroup set-up and tear-down per job, launch latency with and without
proctrack/cgroup + task/cgroup (ConstrainRAMSpace), and end-to-end throughput of 1,000 trivial jobs
with confinement on. Needs root and a writable cgroup v1 hierarchy (this machine's).

Workload: 16 nodes x 8 CPUs on 2 agents (real nodes, not emulated, so every job gets its cgroups);
latency = the script's first instruction minus the submission, median of 40 jobs run one at a time.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import config as config_mod
from wattsched.harness.testing import Cluster, wait_for
from wattsched.noded.cgroup import JobCgroups

CONFINED = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"


def setup_teardown_ms(rounds: int = 300) -> float:
    """Milliseconds to make a job's and its batch step's cgroups with a memory limit, then end them."""
    with tempfile.TemporaryDirectory() as root:
        conf = Path(root, "wattsched.conf")
        conf.write_text(f"{CONFINED}\nNodeName=bench CPUs=8 RealMemory=8000\nPartitionName=p Nodes=bench\n")
        Path(root, "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n")
        config = config_mod.load(str(conf))
        cgroups = JobCgroups(config, {n.name: n for n in config.nodes})
        started = time.perf_counter()
        for job_id in range(1, rounds + 1):
            cgroups.setup("bench", 10_000_000 + job_id, "batch", [0], 100)
            cgroups.end("bench", 10_000_000 + job_id)
        return (time.perf_counter() - started) * 1000 / rounds


def run_cluster(confined: bool, latency_jobs: int = 40, e2e_jobs: int = 1000) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix="wattsched-bench-cg-"))
    cluster = Cluster(root, nodes=16, cpus=8, agents=2, extra=CONFINED if confined else "")
    if confined:
        (root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n")
    cluster.start()
    client = httpx.Client(base_url=f"http://127.0.0.1:{cluster.port}", timeout=60,
                          headers={"Authorization": f"Bearer {cluster.token()}"})
    try:
        delays = []
        for index in range(latency_jobs):
            stamp = root / f"start{index}"
            body = {"script": f"#!/bin/sh\ndate +%s.%N > {stamp}\n", "work_dir": str(root), "output": "/dev/null",
                    "mem_per_node_mb": 100}
            submitted = time.time()
            client.post("/v1/jobs", json=body).raise_for_status()
            wait_for(lambda s=stamp: s.exists() and s.read_text().strip(), 30, 0.005)
            delays.append(float(stamp.read_text()) - submitted)
        trivial = {"script": "#!/bin/sh\ntrue\n", "work_dir": str(root), "output": "/dev/null", "mem_per_node_mb": 100}
        started = time.perf_counter()
        ids = [client.post("/v1/jobs", json=trivial).json()["job_id"] for _ in range(e2e_jobs)]
        first, last = min(ids), max(ids)
        wait_for(lambda: sum(1 for j in client.get("/v1/jobs").json()["jobs"]
                             if first <= j["job_id"] <= last and j["state"] == "COMPLETED") == e2e_jobs,
                 900, 0.2, what="all trivial jobs")
        return statistics.median(delays) * 1000, e2e_jobs / (time.perf_counter() - started)
    finally:
        client.close()
        cluster.stop()


def main() -> None:
    if os.geteuid() != 0 or not os.access("/sys/fs/cgroup/memory", os.W_OK):
        sys.exit("bench_cgroup: needs root and a writable cgroup v1 memory hierarchy")
    per_job = setup_teardown_ms()
    plain_latency, plain_rate = run_cluster(False)
    confined_latency, confined_rate = run_cluster(True)
    report("cgroup confinement", "16 real nodes x 8 CPUs, 2 agents; 40 jobs one at a time, then 1000 `true` jobs",
           {"cgroup_setup_and_teardown_ms_per_job": f"{per_job:.2f} (job + batch step, 5 controllers, memory limit)",
            "launch_latency_median_ms_without": f"{plain_latency:.0f}",
            "launch_latency_median_ms_with": f"{confined_latency:.0f}",
            "end_to_end_jobs_per_s_without": f"{plain_rate:.1f}",
            "end_to_end_jobs_per_s_with": f"{confined_rate:.1f}"})


if __name__ == "__main__":
    main()

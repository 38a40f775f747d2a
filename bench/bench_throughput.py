"""Submission and end-to-end throughput on the 16-node emulated cluster.

Prints sbatch-via-CLI submissions per second, submissions per second through the HTTP API
(one client, sequential), and end-to-end jobs per second for 1000 trivial jobs (`true`)
from the first submission to the last completion.
Targets (issue 2): API >= 500/s, end-to-end >= 100 jobs/s.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched.harness.testing import BIN, Cluster, wait_for


def concurrent_submissions(cluster: Cluster, body: dict, total: int, clients: int) -> float:
    """Submissions per second from several clients at once (the client shares this machine's 2 cores)."""
    headers = {"Authorization": f"Bearer {cluster.token()}"}

    def worker(count: int) -> None:
        with httpx.Client(base_url=f"http://{cluster.api_host}:{cluster.port}", headers=headers,
                          timeout=60) as client:
            for _ in range(count):
                client.post("/v1/jobs", json=body).raise_for_status()

    threads = [threading.Thread(target=worker, args=(total // clients,)) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return total // clients * clients / (time.perf_counter() - started)


def main(cli_jobs: int = 100, api_jobs: int = 2000, e2e_jobs: int = 1000) -> None:
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), nodes=16, cpus=8, agents=2).start()
        headers = {"Authorization": f"Bearer {cluster.token()}"}
        client = httpx.Client(base_url=f"http://127.0.0.1:{cluster.port}", headers=headers, timeout=60)
        try:
            started = time.perf_counter()
            for _ in range(cli_jobs):
                subprocess.run([str(BIN / "sbatch"), "-H", "-o", "/dev/null", "--wrap", "true"], env=cluster.env,
                               stdout=subprocess.DEVNULL, check=True)
            cli_rate = cli_jobs / (time.perf_counter() - started)

            held = {"script": "#!/bin/sh\ntrue\n", "work_dir": root, "hold": True, "output": "/dev/null"}
            started = time.perf_counter()
            for _ in range(api_jobs):
                client.post("/v1/jobs", json=held).raise_for_status()
            api_rate = api_jobs / (time.perf_counter() - started)
            api_rate_4 = concurrent_submissions(cluster, held, api_jobs, clients=4)
            ids = [j["job_id"] for j in client.get("/v1/jobs").json()["jobs"] if j["state"] == "PENDING"]
            client.post("/v1/jobs/cancel", json={"job_ids": [str(i) for i in ids]}).raise_for_status()

            trivial = {"script": "#!/bin/sh\ntrue\n", "work_dir": root, "output": "/dev/null"}
            started = time.perf_counter()
            submitted = [client.post("/v1/jobs", json=trivial).json()["job_id"] for _ in range(e2e_jobs)]
            first, last = min(submitted), max(submitted)

            def all_done() -> bool:
                jobs = client.get("/v1/jobs").json()["jobs"]
                done = [j for j in jobs if first <= j["job_id"] <= last and j["state"] == "COMPLETED"]
                return len(done) == e2e_jobs

            wait_for(all_done, 600, 0.2, what="all trivial jobs")
            e2e_s = time.perf_counter() - started
        finally:
            client.close()
            cluster.stop()
    report("submission and end-to-end throughput",
           f"16 virtual nodes x 8 CPUs, 2 agents; {cli_jobs} sbatch -H via CLI, {api_jobs} held jobs via API "
           "(one client, then 4 concurrent clients), "
           f"{e2e_jobs} jobs running 'true' via API",
           {"sbatch_cli_submissions_per_s": f"{cli_rate:.1f}",
            "api_submissions_per_s_1_client": f"{api_rate:.0f}",
            "api_submissions_per_s_4_clients": f"{api_rate_4:.0f}",
            "end_to_end_jobs_per_s": f"{e2e_jobs / e2e_s:.1f}",
            "end_to_end_total_s": f"{e2e_s:.1f}"})


if __name__ == "__main__":
    main()

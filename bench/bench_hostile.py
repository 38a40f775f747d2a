"""Controller ping latency while one client hammers it with oversized and malformed requests.

Target (issue 16): no request, however malformed or large, degrades the service for anyone else.
Prints the ping latency percentiles of a well-behaved client with the controller idle, then while a
second process sends, back to back, a rotation of hostile requests (20 MB bodies, a 3-million-node
hostlist, a 20-million-task array, 10^12-task steps, unparsable JSON, forged tokens), and how many of
those it got answered, by status.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe

from wattsched.harness.testing import Cluster

PINGS = 2000
BIG = "x" * (20 * 1024 * 1024)


def hostile(base: str, token: str, seconds: float, counts) -> None:
    user = {"Authorization": f"Bearer {token}"}
    script = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp"}
    requests = [
        ("POST", "/v1/jobs", {"json": dict(script, comment=BIG)}, user),
        ("POST", "/v1/jobs", {"json": dict(script, array="0-20000000")}, user),
        ("PATCH", "/v1/nodes/node[1-3000000]", {"json": {"state": "drain", "reason": "x"}}, user),
        ("POST", "/v1/jobs/1/steps", {"json": {"ntasks": 10**12}}, user),
        ("POST", "/v1/jobs/cancel", {"json": {"job_ids": ["1_0-20000000"]}}, user),
        ("POST", "/v1/jobs", {"content": b"{" * 100000, "headers": {"content-type": "application/json"}}, user),
        ("GET", "/v1/jobs", {}, {"Authorization": "Bearer " + "e30." * 2000}),
        ("POST", "/v1/jobs", {"json": dict(script, time_limit="9" * 30)}, user),
    ]
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=base, timeout=30) as client:
        index = 0
        while time.monotonic() < deadline:
            method, path, kwargs, headers = requests[index % len(requests)]
            kwargs = dict(kwargs)
            headers = {**headers, **kwargs.pop("headers", {})}
            try:
                status = client.request(method, path, headers=headers, **kwargs).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            counts[str(status)] = counts.get(str(status), 0) + 1
            index += 1


def pings(base: str, token: str, count: int) -> list[float]:
    times = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for _ in range(count):
            started = time.perf_counter()
            client.get("/v1/ping").raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return times


def summary(times: list[float]) -> str:
    cuts = statistics.quantiles(times, n=100)
    return f"p50 {cuts[49]:.2f} ms, p99 {cuts[98]:.2f} ms, max {max(times):.2f} ms ({len(times)} pings)"


def main() -> None:
    print(f"machine: {describe()}")
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), nodes=16, cpus=8).start()
        try:
            base = f"http://127.0.0.1:{cluster.port}"
            quiet = pings(base, cluster.token(), PINGS)
            print(f"ping, controller otherwise idle:        {summary(quiet)}")
            with multiprocessing.Manager() as manager:
                counts = manager.dict()
                attacker = multiprocessing.Process(target=hostile, args=(base, cluster.token(1000, "mallory"), 3600,
                                                                         counts))
                attacker.start()
                time.sleep(1.0)
                started = time.monotonic()
                loaded = pings(base, cluster.token(), PINGS)
                elapsed = time.monotonic() - started
                attacker.terminate()
                attacker.join()
                answered = dict(sorted(counts.items()))
            print(f"ping, one client sending hostile requests: {summary(loaded)}")
            total = sum(answered.values())
            print(f"hostile requests answered during the run: {total} ({total / elapsed:.0f}/s overall), "
                  f"by status: {answered}")
            print(f"jobs accepted from them: {len(cluster.jobs())}")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()

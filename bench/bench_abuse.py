"""Another user's squeue and sbatch latency while one user abuses the controller, beside the idle figure.

Target (issue 29): no one user can starve the others. For each abuse the victim (uid 1001, its own
token in SLURM_JWT) runs the real commands, `squeue -u victim` and `sbatch -H --wrap true` (then
scancel), SAMPLES times each, and their p50 and p99 wall-clock times are printed:

* idle: 4,000 of the attacker's held jobs queued, nothing else;
* listing hammer: eight connections asking for every job in Slurm's REST layout, back to back;
* silent connections: as many connections as the attacker's descriptors allow, each sending nothing;
* request flood with SlurmctldParameters=rl_enable: the attacker's client asks for its jobs as fast as
  it can (most answers 429); the victim paces itself within its own bucket (Slurm's default of two
  requests a second), or its own commands would wait for tokens;
* queue fill: the attacker submits held 1,000-task arrays until MaxSubmitJobsPerUser stops them.
"""

from __future__ import annotations

import multiprocessing
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe

from wattsched.harness.testing import SILENT_CONNECTIONS, Cluster

SAMPLES = 40
ATTACKER, VICTIM = (1000, "mallory"), (1001, "victim")


def victim_latency(cluster: Cluster, pause_s: float) -> str:
    env = cluster.user_env(*VICTIM)
    squeue, sbatch = [], []
    for _ in range(SAMPLES):
        time.sleep(pause_s)
        started = time.perf_counter()
        cluster.run("squeue", "-u", VICTIM[1], env=env)
        squeue.append(time.perf_counter() - started)
        started = time.perf_counter()
        job = cluster.run("sbatch", "--parsable", "-H", "--wrap", "true", env=env).stdout.strip()
        sbatch.append(time.perf_counter() - started)
        cluster.run("scancel", job, env=env)

    def cut(times: list[float]) -> str:
        q = statistics.quantiles(times, n=100)
        return f"p50 {q[49] * 1000:4.0f} ms, p99 {q[98] * 1000:4.0f} ms"

    return f"squeue {cut(squeue)}; sbatch {cut(sbatch)}"


def _hammer(port: int, token: str, served, stop) -> None:
    request = (f"GET /slurm/v0.0.40/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               f"X-SLURM-USER-NAME: {ATTACKER[1]}\r\nX-SLURM-USER-TOKEN: {token}\r\n\r\n").encode()
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            sock.sendall(request)
            while sock.recv(1 << 20):
                pass
        served.value += 1


@contextmanager
def attackers(count: int, target: Callable, *args) -> Iterator[Any]:
    """``count`` processes running ``target(*args, stop)`` until the block ends."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=target, args=(*args, stop)) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        yield stop
    finally:
        stop.set()
        for proc in procs:
            proc.join()


@contextmanager
def listing_hammer(cluster: Cluster) -> Iterator[str]:
    served = multiprocessing.Value("i", 0)
    started = time.monotonic()
    with attackers(8, _hammer, cluster.port, cluster.token(*ATTACKER), served):
        while served.value < 2:
            time.sleep(0.1)
        yield "eight connections listing every job (REST), back to back"
    print(f"    ({served.value} whole listings served to the attacker in {time.monotonic() - started:.0f} s)")


@contextmanager
def silent_connections(cluster: Cluster) -> Iterator[str]:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    holder = subprocess.Popen([sys.executable, "-c", SILENT_CONNECTIONS, str(cluster.port), str(limit - 200)],
                              stdout=subprocess.PIPE,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    assert holder.stdout is not None
    yield f"{int(holder.stdout.readline())} connections that send nothing"
    holder.kill()
    holder.wait()


def _flood(port: int, token: str, counts, stop) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                      timeout=30) as client:
        while not stop.is_set():
            status = client.get("/v1/jobs", params={"user": ATTACKER[1]}).status_code
            counts[status] = counts.get(status, 0) + 1


@contextmanager
def request_flood(cluster: Cluster) -> Iterator[str]:
    with multiprocessing.Manager() as manager:
        counts = manager.dict()
        with attackers(4, _flood, cluster.port, cluster.token(*ATTACKER), counts):
            time.sleep(1)
            yield "four clients asking for their jobs back to back (rl_enable)"
        print(f"    (the attacker's answers by status: {dict(sorted(counts.items()))})")


@contextmanager
def queue_fill(cluster: Cluster) -> Iterator[str]:
    env = cluster.user_env(*ATTACKER)
    accepted = refused = 0
    while refused < 3:
        result = cluster.run("sbatch", "-H", "--array=0-999", "--wrap", "true", env=env, check=False)
        accepted, refused = accepted + (result.returncode == 0), refused + (result.returncode != 0)
    yield f"one user's held arrays up to MaxSubmitJobsPerUser ({accepted} arrays of 1,000 accepted, then refused)"


def run(extra: str, abuses: list[Callable], pause_s: float = 0.0) -> None:
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), nodes=4, cpus=8, extra=extra).start()
        try:
            env = cluster.user_env(*ATTACKER)
            for _ in range(4):
                cluster.run("sbatch", "-H", "--array=0-999", "--wrap", "true", env=env)
            print(f"  idle (4,000 held jobs queued): {victim_latency(cluster, pause_s)}")
            for abuse in abuses:
                with abuse(cluster) as what:
                    print(f"  {what}: {victim_latency(cluster, pause_s)}")
        finally:
            cluster.stop()


def main() -> None:
    print(f"machine: {describe()}")
    print(f"another user's commands ({SAMPLES} of each), wall-clock:")
    run("", [listing_hammer, silent_connections, queue_fill])
    # the victim's three requests a sample must stay within its own bucket (2 tokens a second)
    print("with SlurmctldParameters=rl_enable (Slurm's defaults), the victim pacing itself to 1.5 s a sample:")
    run("SlurmctldParameters=rl_enable", [request_flood], pause_s=1.5)


if __name__ == "__main__":
    main()

"""Backup controllers: what a failover costs, and what the shared state store costs.

1. Takeover: two controllers (ctl1 on 127.0.0.1, ctl2 on 127.0.0.2) with their state and accounting
   in the local PostgreSQL, SlurmctldTimeout=5, 4 virtual nodes running jobs. The controller in
   charge is killed (kill -9) and an `sbatch -H` started at once; the figure is the time from the
   kill to that sbatch's acknowledgement by the backup (it retries, as Slurm's commands do). Then
   the primary is started again, asks for control back, and the time until an sbatch is acknowledged
   by it is the planned switch's. Several rounds.
2. Submission throughput with the state in SQLite (state.db, the default), in PostgreSQL with one
   controller, and in PostgreSQL with a backup standing by: sequential `sbatch -H --wrap true` through
   the command, and held jobs through the HTTP API from one client and from four at once.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres). No Slurm figure sits beside these: a Slurm
with a backup slurmctld needs two hosts (slurmctld finds its place by its host name and binds every
address), which this bench does not build.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_throughput import concurrent_submissions
from machine import report

from wattsched.testing import BIN, Cluster, wait_for

PG = "postgresql://postgres@127.0.0.1:5432"
TIMEOUT_S = 5


def _databases(names: list[str], drop: bool = False) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if not drop:
                conn.execute(f"CREATE DATABASE {name}")


def _cluster(root: Path, tag: str, state: str, controllers: int) -> tuple[Cluster, list[subprocess.Popen], list[str]]:
    """A cluster with its state in SQLite ("sqlite") or PostgreSQL ("postgresql"), started."""
    dbs = [f"ws_bench_{tag}_state", f"ws_bench_{tag}_acct"] if state == "postgresql" else []
    _databases(dbs)
    cluster = Cluster(root / tag, nodes=4, cpus=8, agents=1, controllers=controllers,
                      state_url=f"{PG}/{dbs[0]}" if dbs else "", accounting_url=f"{PG}/{dbs[1]}" if dbs else "",
                      extra=f"SlurmctldTimeout={TIMEOUT_S} MessageTimeout=3")
    procs = [cluster.spawn_controller(0)]
    wait_for(cluster.active, 60, what="controller in charge")
    for index in range(1, controllers):
        procs.append(cluster.spawn_controller(index))
    cluster.start_agent(0)
    cluster.wait_nodes_up()
    return cluster, procs, dbs


def _stop(cluster: Cluster, procs: list[subprocess.Popen], dbs: list[str]) -> None:
    cluster.stop()
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    _databases(dbs, drop=True)


def _sbatch(cluster: Cluster) -> float:
    """An `sbatch -H`: seconds until it was acknowledged."""
    started = time.monotonic()
    subprocess.run([str(BIN / "sbatch"), "-H", "-o", "/dev/null", "--wrap", "true"], env=cluster.env, check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    return time.monotonic() - started


def takeovers(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    cluster, procs, dbs = _cluster(root, "takeover", "postgresql", 2)
    unplanned, planned = [], []
    try:
        for _ in range(4):  # work in flight through every switch
            subprocess.run([str(BIN / "sbatch"), "-o", "/dev/null", "-n2", "--wrap", "sleep 600"], env=cluster.env,
                           check=True, stdout=subprocess.DEVNULL)
        for _ in range(rounds):
            os.killpg(procs[0].pid, signal.SIGKILL)
            procs[0].wait(10)
            unplanned.append(_sbatch(cluster))
            assert cluster.active() == "127.0.0.2"
            started = time.monotonic()
            procs[0] = cluster.spawn_controller(0)  # the primary asks for control back
            wait_for(lambda: cluster.active() == "127.0.0.1", 60, 0.05, what="ctl1 back in charge")
            _sbatch(cluster)
            planned.append(time.monotonic() - started)
    finally:
        _stop(cluster, procs, dbs)
    return unplanned, planned


def throughput(root: Path, state: str, controllers: int, cli_jobs: int, api_jobs: int) -> dict[str, float]:
    cluster, procs, dbs = _cluster(root, f"{state}{controllers}", state, controllers)
    try:
        started = time.perf_counter()
        for _ in range(cli_jobs):
            _sbatch(cluster)
        cli = cli_jobs / (time.perf_counter() - started)
        body = {"script": "#!/bin/sh\ntrue\n", "work_dir": str(cluster.work), "hold": True, "output": "/dev/null"}
        return {"cli": cli, "api1": concurrent_submissions(cluster, body, api_jobs, 1),
                "api4": concurrent_submissions(cluster, body, api_jobs, 4)}
    finally:
        _stop(cluster, procs, dbs)


def main(rounds: int = 3, cli_jobs: int = 200, api_jobs: int = 2000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        unplanned, planned = takeovers(root, rounds)
        rates = {(state, n): throughput(root, state, n, cli_jobs, api_jobs)
                 for state, n in (("sqlite", 1), ("postgresql", 1), ("postgresql", 2))}
    figures = {
        "kill -9 to the first sbatch acknowledged by the backup, s (each round)":
            " / ".join(f"{s:.1f}" for s in unplanned),
        "the same, as a share of SlurmctldTimeout (median)": f"{statistics.median(unplanned) / TIMEOUT_S:.2f}",
        "primary restarted to its first sbatch acknowledged (planned switch back), s":
            " / ".join(f"{s:.1f}" for s in planned),
    }
    base = rates[("sqlite", 1)]
    for (state, n), rate in rates.items():
        label = f"{state}, {'one controller' if n == 1 else 'a backup standing by'}"
        figures[f"{label}: sbatch -H per s / API 1 client / API 4 clients"] = (
            f"{rate['cli']:.1f} / {rate['api1']:.0f} / {rate['api4']:.0f} "
            f"({rate['cli'] / base['cli']:.2f}x / {rate['api1'] / base['api1']:.2f}x / "
            f"{rate['api4'] / base['api4']:.2f}x of SQLite's)")
    report("backup controllers: takeover time and the state store's cost",
           f"2 controllers (SlurmctldTimeout={TIMEOUT_S}), state and accounting in the local PostgreSQL, "
           f"4 nodes with 4 running jobs; {rounds} rounds of kill -9 then restart of the primary; "
           f"{cli_jobs} sequential sbatch -H and {api_jobs} held jobs by API per state store",
           figures)


if __name__ == "__main__":
    main()

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

3. Beside Slurm (Debian's slurm-wlm, installed with apt-get when absent): the same takeover with two
   slurmctld, each on a host of its own (a network and UTS namespace: slurmctld finds its place by
   its host name), sharing StateSaveLocation as Slurm requires, SlurmctldTimeout=5; the same rounds,
   timed the same way, and wattsched's figure over Slurm's.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres); the Slurm part needs root and network namespaces.
"""

from __future__ import annotations

import contextlib
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

from wattsched.harness.netns import Hosts, netns_usable
from wattsched.harness.testing import BIN, Cluster, free_port, wait_for

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


def slurm_takeovers(root: Path, rounds: int) -> tuple[list[float], list[float], int] | str:
    """Slurm's figures for the same rounds and how often its backup was lost handing control back
    (it is started again before the next round), or why there are none."""
    import loopback_slurm

    why = netns_usable() or loopback_slurm.ensure_installed()
    if why:
        return why
    loopback_slurm.ensure_munge()
    (root / "slurm").mkdir()
    hosts = Hosts(root / "slurm", ["sctl1", "sctl2"], subnet_base=160)
    private = hosts.spool  # each host's own: pid and log files
    state = hosts.root / "state"
    state.mkdir()
    port = free_port()
    hosts.conf = hosts.root / "slurm.conf"
    hosts.conf.write_text("\n".join([
        "ClusterName=bench", f"SlurmctldHost=sctl1({hosts.hosts['sctl1']})",
        f"SlurmctldHost=sctl2({hosts.hosts['sctl2']})", f"SlurmctldPort={port}", f"SlurmctldTimeout={TIMEOUT_S}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"StateSaveLocation={state}", f"SlurmdSpoolDir={private}/slurmd", f"SlurmctldPidFile={private}/ctld.pid",
        f"SlurmctldLogFile={private}/ctld.log", "SlurmctldDebug=error", "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none", "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU", "MaxJobCount=100000",
        "NodeName=snode1 NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN",
        "PartitionName=debug Nodes=snode1 Default=YES MaxTime=INFINITE State=UP"]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_CONF": str(hosts.conf)}
    slurmctld = f"{loopback_slurm.SBIN / 'slurmctld'} -D -i -f {hosts.conf}"

    def start(host: str) -> subprocess.Popen:
        return hosts.start_on(host, "", f"{host}.log", program=slurmctld)

    def ping() -> list[str]:
        done = subprocess.run(["/usr/bin/scontrol", "ping"], env=env, capture_output=True, text=True, timeout=60)
        return [line.split()[-1] for line in done.stdout.splitlines()[:2]]

    def sbatch() -> float:
        started = time.monotonic()
        subprocess.run(["/usr/bin/sbatch", "-H", "-o", "/dev/null", "--wrap", "true"], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        return time.monotonic() - started

    unplanned: list[float] = []
    planned: list[float] = []
    backup_lost = 0
    try:
        hosts.start()
        primary = start("sctl1")
        wait_for(lambda: ping()[:1] == ["UP"], 60, 0.2, what="slurmctld on sctl1")
        backup = start("sctl2")
        wait_for(lambda: ping() == ["UP", "UP"], 60, 0.2, what="slurmctld on sctl2, the backup")
        sbatch()
        for _ in range(rounds):
            os.killpg(primary.pid, signal.SIGKILL)
            primary.wait(10)
            unplanned.append(sbatch())
            started = time.monotonic()
            primary = start("sctl1")  # the primary takes control back from the backup
            wait_for(lambda: ping()[:1] == ["UP"], 120, 0.1, what="slurmctld on sctl1 back")
            sbatch()
            planned.append(time.monotonic() - started)
            time.sleep(2 * TIMEOUT_S)  # the backup, if it went down handing control back, shows it
            if ping()[1:] != ["UP"]:  # Slurm 22.05's backup may exit after handing control back
                backup_lost += 1
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(backup.pid, signal.SIGKILL)
                backup = start("sctl2")
                wait_for(lambda: ping() == ["UP", "UP"], 60, 0.2, what="slurmctld on sctl2 again")
    finally:
        hosts.stop()
    return unplanned, planned, backup_lost


def main(rounds: int = 3, cli_jobs: int = 200, api_jobs: int = 2000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        slurm = slurm_takeovers(root, rounds)
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
    if isinstance(slurm, str):
        figures["Slurm"] = f"not measured: {slurm}"
    else:
        figures["Slurm: kill -9 to the first sbatch acknowledged by the backup, s"] = \
            " / ".join(f"{s:.1f}" for s in slurm[0])
        figures["Slurm: primary restarted to its first sbatch acknowledged, s"] = \
            " / ".join(f"{s:.1f}" for s in slurm[1])
        figures["Slurm: rounds after which its backup slurmctld was down (started again)"] = \
            f"{slurm[2]} of {rounds}"
        figures["wattsched over Slurm, takeover / switch back (medians)"] = (
            f"{statistics.median(unplanned) / statistics.median(slurm[0]):.2f}x / "
            f"{statistics.median(planned) / statistics.median(slurm[1]):.2f}x (below 1: faster)")
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

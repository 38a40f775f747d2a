"""Two controllers, one in charge: the primary (ctl1, 127.0.0.1) and a backup (ctl2, 127.0.0.2) on the
same port, their state and accounting in the local PostgreSQL, two agents. Killed (kill -9) in the
middle of a submission burst from four clients with steps running, or frozen (SIGSTOP) and
resumed after the backup took over, the old controller loses nothing that was acknowledged, runs
nothing twice (each job's script records its own run), and changes nothing once replaced. Also:
scontrol ping and takeover, and the primary taking control back when it starts again.

Skipped, saying why, without PostgreSQL on 127.0.0.1:5432.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for

PG = "postgresql://postgres@127.0.0.1:5432"
TIMEOUT_S = 5  # SlurmctldTimeout: the lease's length


def _postgres() -> str:
    try:
        import psycopg
    except ImportError:
        return "needs psycopg (pip install 'wattsched[postgresql]')"
    try:
        psycopg.connect(f"{PG}/postgres", connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"needs PostgreSQL on 127.0.0.1:5432 (user postgres): {str(exc).strip()[:120]}"
    return ""


REASON = _postgres()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "-")


def _databases(*names: str, drop: bool = False) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if not drop:
                conn.execute(f"CREATE DATABASE {name}")


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[Cluster]:
    tag = f"{os.getpid()}"
    state_db, acct_db = f"ws_ha_state_{tag}", f"ws_ha_acct_{tag}"
    _databases(state_db, acct_db)
    for switch in ("on", "off"):  # SlurmctldPrimaryOnProg / OffProg: each run leaves a line
        prog = tmp_path / f"{switch}.sh"
        prog.write_text(f"#!/bin/sh\necho {switch} >> {tmp_path / 'switches'}\n")
        prog.chmod(0o755)
    cluster = Cluster(tmp_path / "ha", nodes=4, cpus=4, agents=2, controllers=2, state_url=f"{PG}/{state_db}",
                      accounting_url=f"{PG}/{acct_db}",
                      # a frozen controller holds a command up for MessageTimeout before it tries the next
                      extra=f"SlurmctldTimeout={TIMEOUT_S} MessageTimeout=3 "
                            f"SlurmctldPrimaryOnProg={tmp_path / 'on.sh'} "
                            f"SlurmctldPrimaryOffProg={tmp_path / 'off.sh'}")
    cluster.runs = cluster.work / "runs"  # type: ignore[attr-defined]
    procs: list[subprocess.Popen] = []
    cluster.procs = procs  # type: ignore[attr-defined]
    try:
        procs.append(cluster.spawn_controller(0))
        wait_for(cluster.active, 30, what="ctl1 in charge")
        procs.append(cluster.spawn_controller(1))
        wait_for(lambda: "is UP" in cluster.run("scontrol", "ping", check=False).stdout.splitlines()[-1], 30,
                 what="ctl2 up as a standby")
        for index in range(cluster.agents):
            cluster.start_agent(index)
        cluster.wait_nodes_up()
        yield cluster
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
        cluster.controller = None
        cluster.stop()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        _databases(state_db, acct_db, drop=True)


def _runs(cluster: Cluster) -> Counter:
    path: Path = cluster.runs  # type: ignore[attr-defined]
    return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


def _script(cluster: Cluster, extra: str = "") -> str:
    return f"#!/bin/sh\n{extra}\necho $SLURM_JOB_ID >> {cluster.runs}\n"  # type: ignore[attr-defined]


def _burst(cluster: Cluster, clients: int, each: int, acked: list[int], failed: list[str],
           started: threading.Event) -> list[threading.Thread]:
    """``clients`` threads, each running sbatch ``each`` times; acknowledged ids go to ``acked``."""

    def client(index: int) -> None:
        for n in range(each):
            step = "srun -n1 sleep 2" if n % 10 == 0 else "sleep 0.2"
            done = cluster.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", check=False,
                               input=_script(cluster, step), timeout=120)
            if done.returncode == 0:
                acked.append(int(done.stdout.strip()))
                started.set()
            else:
                failed.append(done.stderr.strip())

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    return threads


def _all_ran_once(cluster: Cluster, acked: list[int]) -> None:
    """Every acknowledged job ran exactly once (by its own record), ended, and is in sacct once."""
    wait_for(lambda: set(acked) <= set(_runs(cluster)), 180, 0.5, what="every acknowledged job ran")
    runs = _runs(cluster)
    assert [job for job, count in runs.items() if count > 1] == [], "jobs ran twice"
    assert set(runs) <= set(acked) | set(runs), "a job ran that nobody submitted"
    rows = cluster.accounted(*acked, timeout=120)
    ids = Counter(row["job_id"] for row in rows)
    assert set(ids) == set(acked) and max(ids.values()) == 1, "sacct lacks a job, or has one twice"
    sacct = cluster.run("sacct", "-X", "-n", "-P", "-o", "JobID", "-j", ",".join(map(str, acked))).stdout.split()
    assert sorted(map(int, sacct)) == sorted(acked)


def test_the_backup_takes_over_a_killed_primary_mid_burst(ha: Cluster) -> None:
    acked: list[int] = []
    failed: list[str] = []
    started = threading.Event()
    threads = _burst(ha, clients=4, each=40, acked=acked, failed=failed, started=started)
    wait_for(lambda: len(acked) >= 40, 120, what="a third of the burst acknowledged")
    primary = ha.procs[0]  # type: ignore[attr-defined]
    os.killpg(primary.pid, signal.SIGKILL)
    killed = time.monotonic()
    primary.wait(10)
    wait_for(lambda: ha.active() == "127.0.0.2", 60, 0.2, what="ctl2 in charge")
    served = time.monotonic() - killed
    assert served < TIMEOUT_S + 5, f"the backup served {served:.1f} s after the primary died"
    for thread in threads:
        thread.join(300)
    assert not failed, f"submissions refused during the failover: {failed[:3]}"
    assert len(acked) == 160
    _all_ran_once(ha, acked)
    ping = ha.run("scontrol", "ping", check=False)
    assert ping.stdout.splitlines()[:2] == ["Slurmctld(primary) at ctl1 is DOWN",
                                            "Slurmctld(backup) at ctl2 is UP"]


def test_a_frozen_primary_changes_nothing_once_replaced(ha: Cluster) -> None:
    # work in flight on ctl1: long jobs hold every CPU, more wait behind them
    long_jobs = [int(ha.run("sbatch", "--parsable", "-n4", "-o", "/dev/null", input=_script(ha, "sleep 8")).stdout)
                 for _ in range(4)]
    waiting = [int(ha.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", input=_script(ha)).stdout)
               for _ in range(6)]
    for job in long_jobs:
        ha.wait_state(job, "RUNNING")
    primary = ha.procs[0]  # type: ignore[attr-defined]
    lease_before = _lease(ha)
    os.killpg(primary.pid, signal.SIGSTOP)
    wait_for(lambda: ha.active() == "127.0.0.2", 60, 0.2, what="ctl2 in charge of a frozen ctl1")
    later = [int(ha.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", input=_script(ha)).stdout)
             for _ in range(4)]
    # the long jobs end under ctl2, which starts the waiting ones; ctl1 sleeps through it
    wait_for(lambda: set(long_jobs + waiting + later) <= set(_runs(ha)), 120, 0.5, what="ctl2 ran everything")
    os.killpg(primary.pid, signal.SIGCONT)
    # ctl1 wakes believing it is in charge, finds its lease gone, and starts again as a standby
    log = ha.logs / "ctl1.log"
    wait_for(lambda: "no longer the active controller" in log.read_text(), 60, 0.2, what="ctl1 gave up")
    wait_for(lambda: "standby: another controller is active" in log.read_text().split(
        "no longer the active controller")[-1], 60, 0.2, what="ctl1 a standby again")
    lease = _lease(ha)
    assert lease["holder"] == "ctl2" and lease["epoch"] == lease_before["epoch"] + 1
    more = [int(ha.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", input=_script(ha)).stdout) for _ in range(2)]
    _all_ran_once(ha, long_jobs + waiting + later + more)


def test_takeover_and_the_primary_taking_control_back(ha: Cluster) -> None:
    running = [int(ha.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", input=_script(ha, "sleep 6")).stdout)
               for _ in range(3)]
    for job in running:
        ha.wait_state(job, "RUNNING")
    # strigger's controller events: kept with the shared state, fired by the controller taking control
    events = ha.root.parent / "events"
    notify = ha.root.parent / "notify"
    notify.write_text(f"#!/bin/sh\necho \"$*\" >> {events}\n")
    notify.chmod(0o755)
    for flag in ("-a", "-C", "-b"):
        ha.run("strigger", "--set", flag, f"--program={notify}")
    took = time.monotonic()
    ha.run("scontrol", "takeover")
    wait_for(lambda: ha.active() == "127.0.0.2", 30, 0.1, what="ctl2 in charge after scontrol takeover")
    handed = time.monotonic() - took
    assert handed < TIMEOUT_S, f"a planned takeover took {handed:.1f} s"
    assert {ha.job(job)["state"] for job in running} == {"RUNNING"}
    wrong = ha.run("scontrol", "takeover", "2", check=False)  # as Slurm's scontrol says it
    assert wrong.returncode == 1 and wrong.stderr.strip() == "takeover: invalid backup controller index (2)"
    # the primary, started again, asks for control back, with the jobs still running
    primary = ha.procs[0]  # type: ignore[attr-defined]
    os.killpg(primary.pid, signal.SIGTERM)
    primary.wait(30)
    ha.procs[0] = ha.spawn_controller(0)  # type: ignore[attr-defined]
    wait_for(lambda: ha.active() == "127.0.0.1", 60, 0.2, what="ctl1 in charge again")
    assert {ha.job(job)["state"] for job in running} <= {"RUNNING", "COMPLETING", "COMPLETED"}
    _all_ran_once(ha, running)
    assert "handed over to ctl1" in (ha.logs / "ctl2.log").read_text()
    # in charge: ctl1, ctl2, ctl1 again; each switch ran the one's OffProg and the other's OnProg
    switches = ha.root.parent / "switches"
    wait_for(lambda: Counter(switches.read_text().split()) == {"on": 3, "off": 2}, 30, 0.2,
             what=f"the switches' programs ({switches.read_text().split()})")
    wait_for(lambda: events.exists() and sorted(events.read_text().split()) == [
        "backup_slurmctld_assumed_control", "primary_slurmctld_failure", "primary_slurmctld_resumed_control"],
        30, 0.2, what="the controllers' triggers")


def test_a_standby_refuses_work_and_names_itself(ha: Cluster) -> None:
    import httpx

    reply = httpx.post(f"http://127.0.0.2:{ha.port}/v1/jobs", json={"script": "#!/bin/sh\n"},
                       headers={"Authorization": f"Bearer {ha.token()}"}, timeout=10)
    assert reply.status_code == 503 and reply.json()["standby"] is True
    # a user may not hand control over
    refused = ha.run("scontrol", "takeover", check=False, env=ha.user_env())
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr
    assert ha.active() == "127.0.0.1"
    # slurmrestd's ping lists both controllers, as Slurm's does
    pings = ha.api("GET", "/slurm/v0.0.42/ping").json()["pings"]
    assert [(p["hostname"], p["pinged"], p["mode"], p["primary"]) for p in pings] == [
        ("ctl1", "UP", "primary", True), ("ctl2", "UP", "backup", False)]
    ping = ha.run("scontrol", "ping", "--json")
    assert [(p["hostname"], p["responding"]) for p in json.loads(ping.stdout)["pings"]] == [
        ("ctl1", True), ("ctl2", True)]


def _lease(cluster: Cluster) -> dict:
    import psycopg

    url = cluster.conf.read_text().split("StateStorageLoc=")[1].split()[0]
    with psycopg.connect(url) as conn:
        holder, epoch = conn.execute("SELECT holder, epoch FROM lease").fetchone()
    return {"holder": holder, "epoch": epoch}

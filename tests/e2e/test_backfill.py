"""Backfill and advanced reservations on a real cluster, through the real CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.accounting.store import AccountingStore
from wattsched.harness.testing import Cluster, wait_for

BACKFILL = "SchedulerType=sched/backfill\nSchedulerParameters=bf_interval=1,bf_resolution=1"


@pytest.fixture(scope="module")
def bf_cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("bf"), extra=BACKFILL).start()
    yield running
    running.stop()


def _reason(cluster: Cluster, job_id: int, reason: str) -> dict:
    return wait_for(lambda: (j := cluster.job(job_id))["reason"] == reason and j, 15,
                    what=f"job {job_id} pending for {reason}")


def test_short_job_backfills_without_delaying_the_blocked_head(bf_cluster: Cluster) -> None:
    c = bf_cluster
    holder = c.sbatch("-n", "12", "-t", "3", "--wrap", "sleep 300")
    c.wait_state(holder, "RUNNING")
    head = c.sbatch("-n", "16", "-t", "1", "--wrap", "true")
    long_job = c.sbatch("-n", "4", "-t", "10", "--wrap", "sleep 30")
    short = c.sbatch("-n", "4", "-t", "1", "--wrap", "sleep 30")
    c.wait_state(short, "RUNNING")
    head_job = _reason(c, head, "Resources")
    assert _reason(c, long_job, "Priority")["state"] == "PENDING"
    # the head's expected start is the end of the holder's time limit
    holder_start = c.job(holder)["start_time"]
    assert abs(head_job["expected_start"] - (holder_start + 180)) <= 2
    start = c.run("squeue", "--start", "-h", "-o", "%i %S").stdout
    shown = dict(line.split() for line in start.splitlines())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", shown[str(head)])
    assert shown[str(long_job)] == "N/A"  # EASY: only the head gets a reservation
    diag = c.run("sdiag").stdout
    assert "Backfilling stats" in diag
    backfilled = int(re.search(r"Total backfilled jobs \(since last slurm start\): (\d+)", diag).group(1))
    assert backfilled >= 1
    assert c.api("GET", "/v1/diag").json()["bf_cycles"] >= 1
    c.run("scancel", str(holder), str(head), str(long_job), str(short))


def test_reservation_life_cycle(bf_cluster: Cluster) -> None:
    c = bf_cluster
    alice = c.user_env()  # her jobs stay held: a pytest tmp dir is not hers to write in
    out = c.run("scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now", "Duration=30",
                "Nodes=n04", "Users=root", "Flags=MAINT,IGNORE_JOBS").stdout
    assert out.strip() == "Reservation created: maint"
    shown = c.run("scontrol", "show", "reservation", "maint").stdout
    assert re.search(r"^ReservationName=maint StartTime=\S+ EndTime=\S+ Duration=00:30:00$", shown, re.M)
    assert "   Nodes=n04 NodeCnt=1 CoreCnt=4 Features=(null) PartitionName=debug Flags=MAINT,IGNORE_JOBS,SPEC_NODES" \
        in shown
    assert "   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a" \
        in shown
    sinfo = c.run("sinfo", "-T").stdout.splitlines()
    assert sinfo[0].split() == ["RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION", "NODELIST"]
    assert sinfo[1].split()[0:2] == ["maint", "ACTIVE"] and sinfo[1].split()[-1] == "n04"
    assert c.run("sinfo", "-n", "n04", "-h", "-o", "%t").stdout.split() == ["maint"]

    # alice is not a member: a job of hers naming n04 waits, the reservation is refused to her
    blocked = c.sbatch("-w", "n04", "-t", "5", "--wrap", "true", env=alice)
    assert _reason(c, blocked, "ReqNodeNotAvail")["state"] == "PENDING"
    denied = c.run("sbatch", "--reservation=maint", "--wrap", "true", env=alice, check=False)
    assert denied.returncode == 1 and "Access denied to requested reservation" in denied.stderr
    unknown = c.run("sbatch", "--reservation=nope", "--wrap", "true", check=False)
    assert unknown.returncode == 1 and "Requested reservation is invalid" in unknown.stderr

    # root runs inside it, on n04 only, and the reservation cannot go while it does
    member = c.sbatch("--reservation=maint", "-t", "5", "--wrap", "sleep 60")
    assert c.wait_state(member, "RUNNING")["node_list"] == "n04"
    busy = c.run("scontrol", "delete", "ReservationName=maint", check=False)
    assert busy.returncode == 1 and "Requested reservation is in use" in busy.stderr

    # update: alice joins
    assert c.run("scontrol", "update", "ReservationName=maint", "Users=root,alice").stdout.strip() == \
        "Reservation updated."
    joined = c.sbatch("-H", "--reservation=maint", "--wrap", "true", env=alice)
    c.run("scancel", str(blocked), str(joined))
    inside = c.sbatch("--reservation=maint", "-t", "5", "--wrap", "true")
    c.wait_state(inside, "COMPLETED")
    c.run("scancel", str(member))
    c.wait_state(member, "CANCELLED")
    c.run("scontrol", "delete", "reservation", "maint")
    assert c.run("scontrol", "show", "res").stdout.strip() == "No reservations in the system"

    rows = c.accounted(inside)
    assert rows[0]["reservation"] == "maint"
    store = AccountingStore(f"sqlite:///{c.root / 'ctld' / 'accounting.db'}")
    recorded = wait_for(lambda: [r for r in store.reservations(c.name) if r["name"] == "maint"
                                 and r["deleted"]], 15, what="reservation accounted")
    assert recorded[0]["nodes"] == "n04" and recorded[0]["flags"].startswith("MAINT")
    assert recorded[0]["users"] == "root,alice"


def test_future_reservation_by_node_count_shapes_the_schedule(bf_cluster: Cluster) -> None:
    c = bf_cluster
    c.run("scontrol", "create", "reservation", "ReservationName=later", "StartTime=now+20minutes",
          "Duration=60", "NodeCnt=2", "Users=root")
    info = c.api("GET", "/v1/reservations").json()["reservations"][0]
    assert info["nodes"] == "n[01-02]" and info["state"] == "INACTIVE"
    # a 30-minute job on all 4 nodes would run into the reservation: it waits
    wide = c.sbatch("-N", "4", "-t", "30", "--wrap", "true")
    _reason(c, wide, "Resources")
    # a 10-minute one ends before it starts
    quick = c.sbatch("-N", "4", "-t", "10", "--wrap", "true")
    c.wait_state(quick, "COMPLETED")
    waiting = c.sbatch("--reservation=later", "--wrap", "true", "-t", "5")
    _reason(c, waiting, "Reservation")
    c.run("scancel", str(wide), str(waiting))

    # reservations survive a controller crash
    c.kill_controller()
    c.start_controller()
    names = [r["name"] for r in c.api("GET", "/v1/reservations").json()["reservations"]]
    assert names == ["later"]
    c.run("scontrol", "delete", "ReservationName=later")


def test_bad_reservation_requests(bf_cluster: Cluster) -> None:
    c = bf_cluster
    cases = [
        (["StartTime=now", "Duration=10", "Nodes=n01"], "Either Users and/or Accounts must be specified"),
        (["StartTime=now", "Duration=10", "Nodes=n99", "Users=root"], "Invalid node name specified"),
        (["StartTime=now", "Duration=10", "Nodes=n01", "Users=root", "Flags=BOGUS"], "Invalid reservation flag"),
        (["StartTime=yesterday-ish", "Duration=10", "Nodes=n01", "Users=root"], "Invalid time specified"),
        (["StartTime=now", "Duration=10", "NodeCnt=9", "Users=root"], "Requested node configuration is not available"),
        (["StartTime=now", "Nodes=n01", "Users=root"], "Duration or EndTime must be specified"),
        (["StartTime=now", "Duration=10", "Nodes=n01", "Users=root", "Colour=blue"],
         "Unknown parameter colour=blue.  No reservation created."),
    ]
    for args, message in cases:
        result = c.run("scontrol", "create", "reservation", *args, check=False)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    c.run("scontrol", "create", "res", "ReservationName=one", "StartTime=now+1hour", "Duration=10", "Nodes=n01",
          "Users=root")
    overlap = c.run("scontrol", "create", "res", "ReservationName=two", "StartTime=now+1hour", "Duration=10",
                    "Nodes=n01", "Users=root", check=False)
    assert overlap.returncode == 1 and "overlaps with another reservation" in overlap.stderr
    refused = c.run("scontrol", "create", "res", "ReservationName=mine", "StartTime=now", "Duration=10",
                    "Nodes=n02", "Users=alice", env=c.user_env(), check=False)
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr
    missing = c.run("scontrol", "update", "ReservationName=ghost", "Duration=5", check=False)
    assert missing.returncode == 1 and "Requested reservation is invalid" in missing.stderr
    body = c.api("POST", "/v1/reservations", json={"name": "x y", "nodes": "n01"})
    assert body.status_code == 422
    assert [r["name"] for r in c.api("GET", "/v1/reservations").json()["reservations"]] == ["one"]
    c.run("scontrol", "delete", "ReservationName=one")


def test_reservation_keys_abbreviate_and_features_choose_nodes(tmp_path: Path) -> None:
    """scontrol's reservation keys by their first letters, as Slurm's (``user=``, ``start=``,
    ``partition=``), and Features= choosing the NodeCnt nodes (``&`` all of them, ``|`` any)."""
    c = Cluster(tmp_path, node_extra="Feature=fast,ib").start()
    try:
        c.run("scontrol", "create", "reservation", "reservationname=short", "user=root", "start=now",
              "duration=1", "nodecnt=2", "partition=debug", "features=fast&ib", "flag=IGNORE_JOBS")
        shown = c.run("scontrol", "show", "reservation", "short").stdout
        assert "NodeCnt=2" in shown and "Features=fast&ib" in shown and "PartitionName=debug" in shown
        assert "Users=root" in shown and "Flags=IGNORE_JOBS" in shown
        c.run("scontrol", "create", "res", "ReservationName=either", "StartTime=now", "Duration=1", "NodeCnt=1",
              "Users=root", "Features=gpu|ib")
        for args, message in [
            (["Features=gpu"], "Requested node configuration is not available"),
            (["Features=[fast*2]"], "Invalid feature specification"),
            (["Licenses=a"], "Licenses is not supported on reservations here"),
            (["s=now"], "Unknown parameter s=now.  No reservation created."),
        ]:
            refused = c.run("scontrol", "create", "res", "StartTime=now", "Duration=1", "NodeCnt=1", "Users=root",
                            *args, check=False)
            assert refused.returncode == 1 and message in refused.stderr, (args, refused.stderr)
        c.run("scontrol", "update", "reservationname=either", "features=")
        assert "Features=(null)" in c.run("scontrol", "show", "reservation", "either").stdout
        c.run("scontrol", "create", "res", "ReservationName=tended", "StartTime=now+1hour", "Duration=10",
              "NodeCnt=1", "Users=root", "Flags=DAILY,REPLACE_DOWN,PURGE_COMP=1")
        assert "Flags=DAILY,REPLACE_DOWN,PURGE_COMP=00:01:00" in c.run("scontrol", "show", "res", "tended").stdout
        first = json.loads(c.run("scontrol", "--json", "show", "res", "tended").stdout)["reservations"][0]
        assert c.run("scontrol", "update", "ReservationName=tended", "skip").stdout == "Reservation updated.\n"
        skipped = json.loads(c.run("scontrol", "--json", "show", "res", "tended").stdout)["reservations"][0]
        assert skipped["start_time"]["number"] == first["start_time"]["number"] + 86400
        refused = c.run("scontrol", "update", "ReservationName=either", "sk", check=False)
        assert refused.returncode == 1 and "not skipable, try deleting instead" in refused.stderr
        refused = c.run("scontrol", "update", "NodeName=n1", "skip", check=False)
        assert refused.returncode == 1 and "Invalid input: skip" in refused.stderr
    finally:
        c.stop()

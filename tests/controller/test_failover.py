"""The controllers' lease in the state store, on SQLite and on PostgreSQL: who may take it and when,
that every write of a controller that lost it is refused, handing it to an heir, and the fencing
token the agents compare."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.api import fencing
from wattsched.controller.store import Fenced, StateStore

PG = "postgresql://postgres@127.0.0.1:5432"


def _postgres() -> str:
    try:
        import psycopg

        psycopg.connect(f"{PG}/postgres", connect_timeout=3).close()
    except Exception as exc:  # no driver, or no server
        return f"needs PostgreSQL on 127.0.0.1:5432 (user postgres): {str(exc).strip()[:100]}"
    return ""


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ctld")
        return
    reason = _postgres()
    if reason:
        pytest.skip(reason)
    import psycopg

    name = f"ws_lease_{os.getpid()}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{PG}/{name}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _until_expired(store: StateStore) -> None:
    while store.lease()["left_s"] > 0:
        time.sleep(0.05)


def test_one_holder_until_its_lease_runs_out(location: str) -> None:
    a, b = StateStore(location), StateStore(location)
    assert a.acquire("a", 1.0) == 1
    assert b.acquire("b", 1.0) is None  # held
    a.commit([{"job_id": 1}])  # a write renews it
    assert b.load_jobs() == [{"job_id": 1}]
    _until_expired(b)
    assert b.acquire("b", 1.0) == 2
    with pytest.raises(Fenced, match="epoch 1"):
        a.commit([{"job_id": 2}])
    with pytest.raises(Fenced):
        a.mark_synced("jobs", [(1, 1)])
    assert [j["job_id"] for j in b.load_jobs()] == [1] and b.backlog() == 1  # nothing of a's got in
    assert not a.fresh()  # a's own clock says so too: a whole lease went by since it last renewed


def test_a_handover_goes_to_the_heir_and_fences_the_giver(location: str) -> None:
    a, b, c = StateStore(location), StateStore(location), StateStore(location)
    a.acquire("a", 5.0)
    a.release("c")
    assert not a.fresh()
    with pytest.raises(Fenced, match="handed over to c"):
        a.commit([{"job_id": 1}])
    assert b.acquire("b", 5.0) is None  # promised to c
    assert c.acquire("c", 5.0) == 2
    assert c.lease()["holder"] == "c" and c.lease()["heir"] == ""


def test_the_only_controller_takes_its_lease_at_once(location: str) -> None:
    old, new = StateStore(location), StateStore(location)
    old.acquire("ctl", 60.0)
    assert new.acquire("ctl", 60.0) is None
    assert new.acquire("ctl", 60.0, force=True) == 2  # an older process of it is fenced
    with pytest.raises(Fenced):
        old.renew()


def test_fencing_tokens() -> None:
    store = StateStore.__new__(StateStore)
    store.store_name, store.epoch = "0a1b", 7
    assert fencing(store.fencing_token) == ("0a1b", 7)
    for bad in ("", "7", "zz:1", "0a:-1", "0a:1:2", "a" * 33 + ":1", "0a:" + "9" * 19):
        assert fencing(bad) is None, bad


def test_a_commit_is_on_disk_before_it_is_acknowledged(location: str) -> None:
    """A ``kill -9`` of the host, not only of the controller, must lose nothing acknowledged: SQLite's
    WAL is synced at every commit (synchronous=FULL; NORMAL may roll back the last commits after a
    power loss), PostgreSQL waits for its WAL flush (synchronous_commit on, its default)."""
    store = StateStore(location)
    store.commit([{"job_id": 1, "name": "kept"}])
    if location.startswith("postgresql"):
        assert store._rows("SHOW synchronous_commit") == [("on",)]
    else:
        assert store._rows("PRAGMA journal_mode") == [("wal",)]
        assert store._rows("PRAGMA synchronous") == [(2,)]  # FULL
    assert [job["name"] for job in store.load_jobs()] == ["kept"]


def test_forgetting_the_queue_keeps_what_accounting_has_not_taken(location: str) -> None:
    """slurmctld -c: the next load finds no job or reservation, but accounting still receives the
    rows it had not synced, in each engine the state may live in."""
    store = StateStore(location)
    store.commit([{"job_id": 1, "name": "a"}, {"job_id": 2, "name": "b"}], meta={"next_job_id": "3"},
                 reservations=[{"resv_id": 1, "name": "r", "deleted": False}])
    assert store.forget_jobs_and_reservations() == (2, 1)
    assert store.load_jobs() == [] and store.load_reservations() == []
    assert [job["name"] for job, _version in store.unsynced("jobs", 10)] == ["a", "b"]
    assert store.get_meta("next_job_id") == "3"
    assert store.forget_jobs_and_reservations() == (0, 0)

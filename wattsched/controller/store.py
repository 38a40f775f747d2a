"""The controller's durable state: state.db, SQLite in StateSaveLocation, or, where the state must
outlive one host, a PostgreSQL database named by StateStorageLoc (replicated by the site).

Every change to a job is written here before the request that made it is answered, and on disk
(SQLite syncs its WAL at every commit; PostgreSQL waits for its own), so neither a ``kill -9`` of
the controller nor a crash of its host loses anything that was acknowledged. The same store is the accounting outbox:
each job row carries a version and the version last copied to the accounting database,
reservations are kept the same way, and node events wait in their own table, so the
accounting database can be away for a while without losing a record. WAL mode lets the
accounting thread read while the controller writes.

The store also holds the controllers' lease (one row): the active controller is the one whose
epoch is in it and whose lease has not expired by the database's clock. Every write renews it in
its own transaction and is refused (:class:`Fenced`) once another controller has taken it, so a
controller that was paused, cut off or slow can change nothing after a backup took over; the
epoch is also the fencing token the node agents check. Timing comes from the database's clock,
never from the controllers' (they may disagree).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from wattsched.model import JobScript
from wattsched.private import private_sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id INTEGER PRIMARY KEY,
    data TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    synced INTEGER NOT NULL DEFAULT 0,
    purged INTEGER NOT NULL DEFAULT 0
);
-- the outbox and the purged rows, indexed by themselves: the accounting thread finds its next
-- batch and drops what it copied without scanning every job (a scan per batch of 500 made
-- copying 100,000 changed jobs quadratic); (synced, version) served neither query
DROP INDEX IF EXISTS jobs_unsynced;
CREATE INDEX IF NOT EXISTS jobs_outbox ON jobs (job_id) WHERE synced < version;
CREATE INDEX IF NOT EXISTS jobs_purged ON jobs (job_id) WHERE purged = 1;
-- each job's batch script and environment, written once with its submission and read at its launch
-- (slurmctld keeps them in files of its state directory), so the controller's memory never holds
-- them; an array's tasks share their array's row (keyed by the array's job id)
CREATE TABLE IF NOT EXISTS job_scripts (
    job_id INTEGER PRIMARY KEY,
    script TEXT,
    environment TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    resv_id INTEGER PRIMARY KEY,
    data TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    synced INTEGER NOT NULL DEFAULT 0,
    purged INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS node_events (
    id {serial},
    data TEXT NOT NULL
);
-- the runs a requeue ended, each a record of its own in accounting (REQUEUED, PREEMPTED, NODE_FAIL)
CREATE TABLE IF NOT EXISTS ended_runs (
    id {serial},
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (
    id {serial},
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    error TEXT NOT NULL,
    time {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires {real} NOT NULL,
    heir TEXT NOT NULL,
    store TEXT NOT NULL  -- this store's own random name: epochs count within one store only
);
INSERT INTO lease (id, holder, epoch, expires, heir, store) VALUES (1, '', 0, 0, '', '{store}')
    ON CONFLICT DO NOTHING;
"""


class _Dialect:
    """What differs between the engines: connecting, placeholders, types and the clock."""

    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    real = "REAL"
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    begin = "BEGIN IMMEDIATE"  # the write lock first: the lease is read and renewed under it

    def __init__(self, location: str):
        os.makedirs(location, mode=0o700, exist_ok=True)
        self.path = os.path.join(location, "state.db")
        private_sqlite(self.path)

    def connect(self) -> Any:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: NORMAL may roll the last commits back after a host's crash or a power loss; the fsync
        # costs a commit 0.36 ms here (against 0.03 ms, measured on this project's VM); 4 parallel
        # sbatch loops, alternating: NORMAL 153 and 135 a second, FULL 134 and 133
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def create(self, conn: Any, schema: str) -> None:
        conn.executescript(schema)

    def sql(self, text: str) -> str:
        return text


class _Postgres(_Dialect):
    serial = "BIGSERIAL PRIMARY KEY"
    real = "DOUBLE PRECISION"
    now = "extract(epoch from clock_timestamp())::double precision"
    begin = "BEGIN"  # READ COMMITTED: the lease row's UPDATE locks it until the commit

    def __init__(self, location: str):
        # SQLAlchemy's spelling (postgresql+psycopg://) is accepted too, as for AccountingStorageLoc
        self.path = location.replace("postgresql+psycopg://", "postgresql://", 1)

    def connect(self) -> Any:
        import psycopg  # only for this engine: the CLI and SQLite sites never load it

        return psycopg.connect(self.path, autocommit=True, connect_timeout=10)

    def create(self, conn: Any, schema: str) -> None:
        with conn.transaction():  # two controllers starting together create it once
            conn.execute("SELECT pg_advisory_xact_lock(7702)")
            conn.execute(schema)  # no parameters: one simple query may hold many statements

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")


_KEYS = {"jobs": "job_id", "reservations": "resv_id"}
_APPEND_ONLY = ("node_events", "ended_runs")  # outboxes whose records are added once and dropped once copied


_BATCH = 500  # ids per IN (...): under every engine's limit on a statement's parameters


class StateWriteError(Exception):
    """The state store could not take a commit (a full disk, say); nothing of it was written."""


class Fenced(Exception):
    """Another controller holds the lease: this one may change nothing more."""


LEASE_MARGIN = 0.2  # of the lease's length: a controller stops sending orders this much before it ends


class StateStore:
    """Durable job rows, node state and counters, the accounting outbox and the controllers' lease.

    ``location``: a folder (SQLite's state.db in it) or a postgresql:// URL."""

    def __init__(self, location: str):
        self.dialect = _Postgres(location) if location.startswith("postgresql") else _Dialect(location)
        self._local = threading.local()
        d = self.dialect
        self.dialect.create(self._conn(), _SCHEMA.format(serial=d.serial, real=d.real, store=os.urandom(8).hex()))
        self.epoch = 0  # the lease this controller holds; 0: none taken (tools and tests: no fencing)
        self.store_name = ""
        self.handed_to = ""  # once this controller released its lease: to whom, in words
        self.ttl = 0.0
        self.renewed = 0.0  # time.monotonic() when the lease was last renewed, before the renewal began

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(conn, "closed", False):  # a server that went away: connect again
            conn = self._local.conn = self.dialect.connect()
        return conn

    def _rows(self, text: str, args: tuple = ()) -> list[tuple]:
        """Run one statement; its rows, if it returns any."""
        cursor = self._conn().execute(self.dialect.sql(text), args)
        return list(cursor.fetchall()) if cursor.description is not None else []

    def _many(self, text: str, rows: Iterable[tuple]) -> None:
        """One statement for each of ``rows``, which may be a generator: 100,000 jobs' rows are made
        one at a time as the engine takes them, never all held at once."""
        rows = iter(rows)
        first = next(rows, None)
        if first is not None:
            self._conn().cursor().executemany(self.dialect.sql(text), itertools.chain((first,), rows))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction; a failure of the engine is a StateWriteError."""
        conn = self._conn()
        conn.execute(self.dialect.begin)
        try:
            yield
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(Exception):  # SQLite may have rolled back by itself (SQLITE_FULL)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg"):
                raise StateWriteError(str(exc)) from exc
            raise

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """A transaction of this controller's that renews its lease first, and is refused (Fenced)
        when another controller has taken it."""
        began = time.monotonic()
        with self._transaction():
            if self.epoch:
                self._renew_in_transaction()
            yield
        if self.epoch:
            self.renewed = began

    def _renew_in_transaction(self) -> None:
        held = self._rows(f"UPDATE lease SET expires = {self.dialect.now} + ? WHERE id = 1 AND epoch = ? "
                          "RETURNING epoch", (self.ttl, self.epoch))
        if not held:
            raise Fenced(self.handed_to if self.epoch < 0 else
                         f"the controller lease (epoch {self.epoch}) was taken by another controller")

    # --- the lease -------------------------------------------------------------------------

    def acquire(self, name: str, ttl: float, force: bool = False, dead: int = 0) -> int | None:
        """Take the lease for ``ttl`` seconds if it is free: never taken, given up, or expired (and
        then not promised to another controller, unless that one let a whole ``ttl`` go by).
        ``force`` takes it whatever its state (the only configured controller, at its start: any
        older process of it is fenced); ``dead``, if it is still at that epoch (its holder is known
        to be gone). Returns the new epoch, or None."""
        now = self.dialect.now
        began = time.monotonic()
        free = "" if force else (f" AND (holder = '' OR expires < {now} AND (heir = '' OR heir = ? "
                                 f"OR expires < {now} - ?) OR epoch = ? AND heir IN ('', ?))")
        args: tuple = (name, ttl) if force else (name, ttl, name, ttl, dead or -1, name)
        with self._transaction():
            row = self._rows(f"UPDATE lease SET holder = ?, epoch = epoch + 1, expires = {now} + ?, heir = '' "
                             f"WHERE id = 1{free} RETURNING epoch, store", args)
        if not row:
            return None
        self.epoch, self.store_name, self.ttl, self.renewed = int(row[0][0]), row[0][1], float(ttl), began
        return self.epoch

    @property
    def fencing_token(self) -> str:
        """What a controller's orders carry: ``STORE:EPOCH``. Agents obey the newest epoch of a
        store; a token of another store (a state started afresh) starts the count again."""
        return f"{self.store_name}:{self.epoch}"

    def renew(self) -> None:
        """Extend the lease by its length from now (the database's clock); Fenced if it was taken."""
        with self._write():
            pass

    def release(self, heir: str = "") -> None:
        """Give the lease up at once (expired a second ago: SQLite's clock ticks in milliseconds),
        promised to ``heir`` ("" for any backup); this controller can write nothing after it."""
        with self._write():
            self._rows(f"UPDATE lease SET expires = {self.dialect.now} - 1, heir = ? WHERE id = 1 AND epoch = ?",
                       (heir, self.epoch))
        self.epoch = -1  # no epoch is ever -1: every later write is Fenced
        self.handed_to = f"handed over to {heir or 'a backup'}"

    def lease(self) -> dict[str, Any]:
        """Who holds the lease, its epoch, the seconds left (by the database's clock) and its heir."""
        holder, epoch, left, heir = self._rows(f"SELECT holder, epoch, expires - {self.dialect.now}, heir "
                                               "FROM lease WHERE id = 1")[0]
        return {"holder": holder, "epoch": int(epoch), "left_s": float(left), "heir": heir}

    def fresh(self) -> bool:
        """Whether this controller may still send orders: its lease was renewed less than its length
        (less a margin) ago by its own clock, and so has not expired by the database's either."""
        return self.epoch == 0 or (self.epoch > 0 and time.monotonic() - self.renewed < self.ttl * (1 - LEASE_MARGIN))

    # --- controller side -----------------------------------------------------------------

    def load_jobs(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT data FROM jobs WHERE purged = 0 ORDER BY job_id")
        return [json.loads(row[0]) for row in rows]

    def load_reservations(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT data FROM reservations WHERE purged = 0 ORDER BY resv_id")
        return [json.loads(row[0]) for row in rows]

    def forget_jobs_and_reservations(self) -> tuple[int, int]:
        """Mark every job and reservation purged (slurmctld -c): the next load finds none, and
        accounting still takes the rows it has not synced. Returns how many of each."""
        with self._write():
            jobs = self._rows("SELECT count(*) FROM jobs WHERE purged = 0")[0][0]
            reservations = self._rows("SELECT count(*) FROM reservations WHERE purged = 0")[0][0]
            self._rows("UPDATE jobs SET purged = 1 WHERE purged = 0")
            self._rows("UPDATE reservations SET purged = 1 WHERE purged = 0")
            self._rows("DELETE FROM job_scripts")
        return int(jobs), int(reservations)

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def scripts(self, ids: Iterable[int]) -> dict[int, JobScript]:
        """The saved scripts and environments of these script ids (a job's, or its array's, id)."""
        wanted, found = sorted(set(ids)), {}
        for at in range(0, len(wanted), _BATCH):
            chunk = wanted[at:at + _BATCH]
            marks = ", ".join("?" * len(chunk))
            for job_id, script, environment in self._rows(
                    f"SELECT job_id, script, environment FROM job_scripts WHERE job_id IN ({marks})", tuple(chunk)):
                found[int(job_id)] = JobScript(script, json.loads(environment))
        return found

    def commit(self, jobs: Iterable[dict[str, Any]], purged: Iterable[int] = (),
               meta: dict[str, str] | None = None, node_events: Iterable[dict[str, Any]] = (),
               reservations: Iterable[dict[str, Any]] = (), ended_runs: Iterable[dict[str, Any]] = (),
               scripts: dict[int, JobScript] | None = None, scripts_dropped: Iterable[int] = ()) -> None:
        """Write changed jobs, purge marks, counters, node events, reservations (a deleted one is
        kept until accounting has it), the runs requeues ended, new jobs' scripts and the scripts no
        job uses any more, in one transaction."""
        with self._write():
            self._many(
                "INSERT INTO job_scripts (job_id, script, environment) VALUES (?, ?, ?) ON CONFLICT(job_id) "
                "DO UPDATE SET script = excluded.script, environment = excluded.environment",
                [(k, s.script, json.dumps(s.environment, separators=(",", ":"))) for k, s in (scripts or {}).items()])
            self._many("DELETE FROM job_scripts WHERE job_id = ?", [(k,) for k in scripts_dropped])
            self._many(
                "INSERT INTO jobs (job_id, data) VALUES (?, ?) ON CONFLICT(job_id) DO UPDATE SET "
                "data = excluded.data, version = jobs.version + 1",
                ((job["job_id"], json.dumps(job, separators=(",", ":"))) for job in jobs))
            self._many("UPDATE jobs SET purged = 1 WHERE job_id = ?", [(j,) for j in purged])
            if meta:
                self._many("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                           "SET value = excluded.value", list(meta.items()))
            self._many("INSERT INTO node_events (data) VALUES (?)", [(json.dumps(ev),) for ev in node_events])
            self._many("INSERT INTO ended_runs (data) VALUES (?)", [(json.dumps(run),) for run in ended_runs])
            self._many(
                "INSERT INTO reservations (resv_id, data, purged) VALUES (?, ?, ?) ON CONFLICT(resv_id) DO UPDATE "
                "SET data = excluded.data, purged = excluded.purged, version = reservations.version + 1",
                [(r["resv_id"], json.dumps(r), int(r["deleted"])) for r in reservations])

    # --- accounting side (its own thread, its own connection) -------------------------------

    def unsynced(self, table: str, limit: int) -> list[tuple[dict[str, Any], int]]:
        """Rows of ``jobs`` or ``reservations`` changed since accounting last had them, with versions."""
        key = _KEYS[table]
        rows = self._rows(f"SELECT data, version FROM {table} WHERE synced < version ORDER BY {key} LIMIT ?",
                          (limit,))
        return [(json.loads(data), version) for data, version in rows]

    def mark_synced(self, table: str, versions: list[tuple[int, int]]) -> None:
        key = _KEYS[table]
        with self._write():
            self._many(f"UPDATE {table} SET synced = ? WHERE {key} = ? AND synced < ?",
                       [(v, k, v) for k, v in versions])
            self._rows(f"DELETE FROM {table} WHERE purged = 1 AND synced = version")

    def pending(self, table: str, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The oldest records of an append-only outbox (``node_events`` or ``ended_runs``)."""
        assert table in _APPEND_ONLY
        rows = self._rows(f"SELECT id, data FROM {table} ORDER BY id LIMIT ?", (limit,))
        return [(row_id, json.loads(data)) for row_id, data in rows]

    def drop(self, table: str, ids: list[int]) -> None:
        """Records of an append-only outbox that accounting has now."""
        assert table in _APPEND_ONLY
        with self._write():
            self._many(f"DELETE FROM {table} WHERE id = ?", [(i,) for i in ids])

    def set_aside(self, kind: str, key: str, data: dict[str, Any], error: str, now: float) -> None:
        """Keep a record the accounting database refused, so that it never blocks the others."""
        with self._write():
            self._rows("INSERT INTO rejected (kind, key, data, error, time) VALUES (?, ?, ?, ?, ?)",
                       (kind, key, json.dumps(data), error[:2000], now))

    def rejected(self, limit: int = 100) -> list[dict[str, Any]]:
        """The records set aside, newest first: what, which, why and when (not the record itself)."""
        rows = self._rows("SELECT kind, key, error, time FROM rejected ORDER BY id DESC LIMIT ?", (limit,))
        return [{"kind": kind, "key": key, "error": error, "time": when} for kind, key, error, when in rows]

    def rejected_count(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM rejected")[0][0])

    def backlog(self) -> int:
        return int(self._rows("SELECT (SELECT COUNT(*) FROM jobs WHERE synced < version) + "
                              "(SELECT COUNT(*) FROM ended_runs)")[0][0])

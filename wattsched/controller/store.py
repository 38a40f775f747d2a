"""The controller's durable state: an SQLite file in StateSaveLocation.

Every change to a job is written here before the request that made it is answered, so a
``kill -9`` loses nothing that was acknowledged. The same file is the accounting outbox:
each job row carries a version and the version last copied to the accounting database,
reservations are kept the same way, and node events wait in their own table, so the
accounting database can be away for a while without losing a record. WAL mode lets the accounting thread read while the
controller writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable
from typing import Any

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
CREATE TABLE IF NOT EXISTS reservations (
    resv_id INTEGER PRIMARY KEY,
    data TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    synced INTEGER NOT NULL DEFAULT 0,
    purged INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS node_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    error TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


_KEYS = {"jobs": "job_id", "reservations": "resv_id"}


class StateWriteError(Exception):
    """The state store could not take a commit (a full disk, say); nothing of it was written."""


class StateStore:
    """Durable job rows, node state and counters, plus the accounting outbox."""

    def __init__(self, directory: str):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, "state.db")
        private_sqlite(self.path)
        self._local = threading.local()
        self._conn().executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    # --- controller side -----------------------------------------------------------------

    def load_jobs(self) -> list[dict[str, Any]]:
        rows = self._conn().execute("SELECT data FROM jobs WHERE purged = 0 ORDER BY job_id")
        return [json.loads(row[0]) for row in rows]

    def load_reservations(self) -> list[dict[str, Any]]:
        rows = self._conn().execute("SELECT data FROM reservations WHERE purged = 0 ORDER BY resv_id")
        return [json.loads(row[0]) for row in rows]

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def commit(self, jobs: Iterable[dict[str, Any]], purged: Iterable[int] = (),
               meta: dict[str, str] | None = None, node_events: Iterable[dict[str, Any]] = (),
               reservations: Iterable[dict[str, Any]] = ()) -> None:
        """Write changed jobs, purge marks, counters, node events and reservations (a deleted
        one is kept until accounting has it) in one transaction."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            conn.executemany(
                "INSERT INTO jobs (job_id, data) VALUES (?, ?) ON CONFLICT(job_id) DO UPDATE SET "
                "data = excluded.data, version = jobs.version + 1",
                [(job["job_id"], json.dumps(job, separators=(",", ":"))) for job in jobs])
            conn.executemany("UPDATE jobs SET purged = 1 WHERE job_id = ?", [(j,) for j in purged])
            if meta:
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                                 "SET value = excluded.value", list(meta.items()))
            conn.executemany("INSERT INTO node_events (data) VALUES (?)",
                             [(json.dumps(ev),) for ev in node_events])
            conn.executemany(
                "INSERT INTO reservations (resv_id, data, purged) VALUES (?, ?, ?) ON CONFLICT(resv_id) DO UPDATE "
                "SET data = excluded.data, purged = excluded.purged, version = reservations.version + 1",
                [(r["resv_id"], json.dumps(r), int(r["deleted"])) for r in reservations])
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back by itself (SQLITE_FULL)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StateWriteError(str(exc)) from exc
            raise

    # --- accounting side (its own thread, its own connection) -------------------------------

    def unsynced(self, table: str, limit: int) -> list[tuple[dict[str, Any], int]]:
        """Rows of ``jobs`` or ``reservations`` changed since accounting last had them, with versions."""
        key = _KEYS[table]
        rows = self._conn().execute(
            f"SELECT data, version FROM {table} WHERE synced < version ORDER BY {key} LIMIT ?", (limit,))
        return [(json.loads(data), version) for data, version in rows]

    def mark_synced(self, table: str, versions: list[tuple[int, int]]) -> None:
        key = _KEYS[table]
        conn = self._conn()
        conn.execute("BEGIN")
        conn.executemany(f"UPDATE {table} SET synced = ? WHERE {key} = ? AND synced < ?",
                         [(v, k, v) for k, v in versions])
        conn.execute(f"DELETE FROM {table} WHERE purged = 1 AND synced = version")
        conn.execute("COMMIT")

    def pending_node_events(self, limit: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self._conn().execute("SELECT id, data FROM node_events ORDER BY id LIMIT ?", (limit,))
        return [(row_id, json.loads(data)) for row_id, data in rows]

    def drop_node_events(self, ids: list[int]) -> None:
        self._conn().executemany("DELETE FROM node_events WHERE id = ?", [(i,) for i in ids])

    def set_aside(self, kind: str, key: str, data: dict[str, Any], error: str, now: float) -> None:
        """Keep a record the accounting database refused, so that it never blocks the others."""
        self._conn().execute("INSERT INTO rejected (kind, key, data, error, time) VALUES (?, ?, ?, ?, ?)",
                             (kind, key, json.dumps(data), error[:2000], now))

    def rejected(self, limit: int = 100) -> list[dict[str, Any]]:
        """The records set aside, newest first: what, which, why and when (not the record itself)."""
        rows = self._conn().execute("SELECT kind, key, error, time FROM rejected ORDER BY id DESC LIMIT ?", (limit,))
        return [{"kind": kind, "key": key, "error": error, "time": when} for kind, key, error, when in rows]

    def rejected_count(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM rejected").fetchone()[0])

    def backlog(self) -> int:
        row = self._conn().execute("SELECT COUNT(*) FROM jobs WHERE synced < version").fetchone()
        return int(row[0])

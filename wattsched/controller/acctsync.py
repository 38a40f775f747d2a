"""The accounting thread: copies job records, reservations and node events from the state store's outbox
to the accounting database, in batches, retrying while the database is away.

A batch the database refuses while it answers a plain query holds a record it cannot take (a value out
of a column's range, say). The batch is then written record by record. A refused record is salvaged so
that its usage still counts (fair share, limits, sreport, sacct): written again with its text made
storable (NULs dropped, invalid Unicode replaced) and integers within 64 bits, then with every text cut
short and integers within 32 bits; only a record refused even so is set aside in the state store
(``sdiag`` shows them, with the original) and logged once. Every other record flows on.

AccountingStorageEnforce's ``nosteps`` keeps steps out of the database and ``nojobs`` jobs too, as
in Slurm (their records are dropped from the outbox unwritten). The use that fair share and the
TRES-minutes limits count is read from those records: with ``nojobs`` they count nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from wattsched.accounting.store import AccountingStore
from wattsched.controller.store import StateStore

log = logging.getLogger("wattsched.accounting")

BATCH = 500
# how long changes gather before this thread writes them. Every reader that must see the latest
# records flushes first (sacct and sreport, slurmrestd's jobs, the power report, fair share); the
# others (the dashboard's energy totals, a tool on the database itself) lag by this much. Against
# 0.05 s, a stream of sbatch is written in batches of tens rather than of a few, and the controller's
# CPU per submission fell from 1.9 to 1.6 ms (2-core VM)
COALESCE_S = 0.5


# The two salvage tries: (characters each text keeps, the largest integer kept). Every text column is
# at least 32 characters wide, every integer column at least 32 bits.
SALVAGE = ((None, 2**63 - 1), (32, 2**31 - 1))


def salvaged(value: Any, cut: int | None, top: int) -> Any:
    """A record with every text storable anywhere (NULs dropped, lone surrogates replaced, cut to
    ``cut`` characters when given) and every integer within +-``top``; structure unchanged."""
    if isinstance(value, str):
        text = value.replace("\0", "").encode("utf-8", "replace").decode("utf-8")
        return text[:cut] if cut is not None else text
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(-top, min(top, value))
    if isinstance(value, dict):
        return {key: salvaged(item, cut, top) for key, item in value.items()}
    if isinstance(value, list):
        return [salvaged(item, cut, top) for item in value]
    return value


class AccountingSync:
    def __init__(self, store: StateStore, accounting: AccountingStore, cluster: str,
                 enforce: Collection[str] = ()):
        self.store, self.accounting, self.cluster = store, accounting, cluster
        self.jobs, self.steps = "nojobs" not in enforce, not {"nojobs", "nosteps"} & set(enforce)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one writer at a time: this thread, or a reader's flush()
        self.healthy = True
        self._thread = threading.Thread(target=self._run, name="acctsync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def flush(self) -> None:
        """Write what the outbox holds now, from the caller's thread: a reader sees its own writes
        (sacct right after sbatch must find the job; parsl takes a missing job for a COMPLETED one).
        Raises while the database is away."""
        with self._lock:
            while self.sync_once() >= BATCH:
                pass

    def sync_once(self) -> int:
        """Copy one batch; returns how many records were handled (written or set aside). Nothing while
        this controller's lease may have ended: another controller may be copying the same rows."""
        if not self.store.fresh():
            return 0
        rows = self.store.unsynced("jobs", BATCH)
        if self.jobs:
            self._write("job", [data if self.steps else dict(data, steps=[]) for data, _ in rows],
                        lambda b: self.accounting.upsert_jobs(self.cluster, b), lambda d: str(d.get("job_id")))
        self.store.mark_synced("jobs", [(data["job_id"], version) for data, version in rows])
        resvs = self.store.unsynced("reservations", BATCH)
        self._write("reservation", [data for data, _ in resvs],
                    lambda b: self.accounting.upsert_reservations(self.cluster, b), lambda d: str(d.get("name")))
        self.store.mark_synced("reservations", [(data["resv_id"], version) for data, version in resvs])
        runs = self.store.pending("ended_runs", BATCH)  # each a job record of its own, by its submit time
        if self.jobs:
            self._write("job", [data if self.steps else dict(data, steps=[]) for _, data in runs],
                        lambda b: self.accounting.upsert_jobs(self.cluster, b),
                        lambda d: f"{d.get('job_id')}@{d.get('submit_time')}")
        self.store.drop("ended_runs", [i for i, _ in runs])
        events = self.store.pending("node_events", BATCH)
        self._write("node_event", [e for _, e in events], self.accounting.add_node_events,
                    lambda d: f"{d.get('node')}@{d.get('time')}")
        self.store.drop("node_events", [i for i, _ in events])
        return len(rows) + len(runs) + len(events) + len(resvs)

    def _write(self, kind: str, records: list[dict[str, Any]], write: Callable[[list[dict[str, Any]]], None],
               key_of: Callable[[dict[str, Any]], str]) -> None:
        """Write a batch; if the database is up but refuses it, write one by one and set aside what it
        refuses. Raises while the database is away (the outbox keeps everything for the retry)."""
        if not records:
            return
        try:
            write(records)
            return
        except Exception:
            if not self.accounting.ping():
                raise
        for record in records:
            error = ""
            for attempt in (record, *(salvaged(record, cut, top) for cut, top in SALVAGE)):
                try:
                    write([attempt])
                except Exception as exc:
                    if not self.accounting.ping():
                        raise
                    error = error or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    continue
                if attempt is not record:
                    log.warning("accounting database refused a record; written salvaged: %s %s: %s",
                                kind, key_of(record), error)
                break
            else:
                log.error("accounting database refused a record; set aside (sdiag lists it): %s %s: %s",
                          kind, key_of(record), error)
                self.store.set_aside(kind, key_of(record), record, error, time.time())

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                with self._lock:
                    written = self.sync_once()
                if not self.healthy:
                    log.warning("accounting database reachable again")
                self.healthy, delay = True, 0.5
                if written >= BATCH:
                    continue
            except Exception as exc:  # the database may be down: keep the outbox, retry later
                if self.healthy:
                    log.error("accounting write failed, records kept for a retry: %s", exc)
                self.healthy, delay = False, min(delay * 2, 10.0)
                self._stop.wait(delay)
                continue
            self._wake.wait(0.2)
            self._wake.clear()
            # coalesce bursts into larger batches (a reader that cannot wait flushes: flush())
            self._stop.wait(COALESCE_S)

"""The accounting thread: copies job records, reservations and node events from the state store's outbox
to the accounting database, in batches, retrying while the database is away."""

from __future__ import annotations

import logging
import threading
import time

from wattsched.accounting.store import AccountingStore
from wattsched.controller.store import StateStore

log = logging.getLogger("wattsched.accounting")

BATCH = 500


class AccountingSync:
    def __init__(self, store: StateStore, accounting: AccountingStore, cluster: str):
        self.store, self.accounting, self.cluster = store, accounting, cluster
        self._wake = threading.Event()
        self._stop = threading.Event()
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

    def sync_once(self) -> int:
        """Copy one batch; returns how many records were written."""
        rows = self.store.unsynced("jobs", BATCH)
        self.accounting.upsert_jobs(self.cluster, [data for data, _ in rows])
        self.store.mark_synced("jobs", [(data["job_id"], version) for data, version in rows])
        resvs = self.store.unsynced("reservations", BATCH)
        self.accounting.upsert_reservations(self.cluster, [data for data, _ in resvs])
        self.store.mark_synced("reservations", [(data["resv_id"], version) for data, version in resvs])
        events = self.store.pending_node_events(BATCH)
        self.accounting.add_node_events([e for _, e in events])
        self.store.drop_node_events([i for i, _ in events])
        return len(rows) + len(events) + len(resvs)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
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
            time.sleep(0.05)  # coalesce bursts into larger batches

"""The carbon-intensity series at the controller (CarbonIntensity, wattsched.carbon): read from a
file, again whenever the file changes, or fetched from a URL every REFRESH_S on a thread of its
own (a slow grid-data service never holds up scheduling). A series that cannot be read leaves the
last good one in place, logged once per failure; the controller starts without one.

The location is the administrator's (the configuration's), never a user's; a relative path is
taken from the configuration file's folder.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import httpx

from wattsched import carbon
from wattsched.config import Config

log = logging.getLogger("wattsched.controller")
REFRESH_S = 900.0  # grid-data services publish hourly or every 5 to 15 minutes
TIMEOUT_S = 10.0


def _location(config: Config) -> str:
    where = config.carbon_intensity
    if not where or where.startswith(("http://", "https://")) or os.path.isabs(where):
        return where
    return os.path.join(os.path.dirname(os.path.abspath(config.source)), where)


class CarbonFeed:
    def __init__(self, config: Config):
        self.where = _location(config)
        self.series: carbon.Series | None = None
        self._mtime = -1.0
        self._fetched = -REFRESH_S
        self._fetching = False
        self.error = ""
        if self.where:
            self.poll(time.time(), wait=True)

    @property
    def remote(self) -> bool:
        return self.where.startswith(("http://", "https://"))

    def poll(self, now: float, wait: bool = False) -> None:
        """Read the file if it changed, or fetch the URL if REFRESH_S passed (``wait``: on this
        thread, at start)."""
        if not self.where:
            return
        if not self.remote:
            try:
                mtime = os.stat(self.where).st_mtime
            except OSError as exc:
                self._failed(str(exc))
                return
            if mtime != self._mtime:
                self._mtime = mtime
                try:
                    with open(self.where, encoding="utf-8") as file:
                        self._take(file.read(carbon.MAX_BYTES + 1))
                except (OSError, UnicodeDecodeError) as exc:
                    self._failed(str(exc))
            return
        if self._fetching or now - self._fetched < REFRESH_S:
            return
        self._fetched, self._fetching = now, True
        if wait:
            self._fetch()
        else:
            threading.Thread(target=self._fetch, name="carbon-feed", daemon=True).start()

    def _fetch(self) -> None:
        try:
            with httpx.stream("GET", self.where, timeout=TIMEOUT_S, follow_redirects=False) as reply:
                reply.raise_for_status()
                body = bytearray()  # (bytes += would copy the whole body at every chunk)
                for chunk in reply.iter_bytes():
                    body += chunk
                    if len(body) > carbon.MAX_BYTES:
                        raise carbon.CarbonError(f"more than {carbon.MAX_BYTES} bytes")
            self._take(body.decode("utf-8"))
        except (httpx.HTTPError, UnicodeDecodeError, carbon.CarbonError) as exc:
            self._failed(str(exc))
        finally:
            self._fetching = False

    def _take(self, text: str) -> None:
        try:
            series = carbon.parse(text)
        except carbon.CarbonError as exc:
            self._failed(str(exc))
            return
        self.series, self.error = series, ""  # one reference replaced: readers see one series or the other
        log.info("carbon intensity read", extra={"source": self.where, "points": len(series.times)})

    def _failed(self, error: str) -> None:
        if error != self.error:
            log.warning("carbon intensity not read; the last series stays", extra={"source": self.where,
                                                                                   "error": error})
        self.error = error

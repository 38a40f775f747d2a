"""How both daemons serve HTTP: uvicorn, with limits on connections that no client may exceed.

uvicorn waits forever for a new connection's first request and takes connections until the process
runs out of file descriptors, so anyone could hold them all with connections that say nothing (the
commands then get "Unable to contact slurm controller"). Here:

* a connection must deliver its first request, headers and body, within MessageTimeout (Slurm's key,
  default 10 s), else it is closed;
* connections that have not yet sent a request are at most ``HALF_OPEN_MAX``: past that the oldest of
  them is closed to admit the new one (a real client sends its request as soon as it connects, so only
  a silent one is ever old);
* the process's descriptor limit is raised to its hard limit, and connections stop ``HEADROOM``
  descriptors short of it, kept for the state, the database, the agents and the commands' retries;
* each kind of closing is logged at most once per ``LOG_INTERVAL_S``, with how many since.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from collections import OrderedDict
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("wattsched.http")

HALF_OPEN_MAX = 4096  # above the accept backlog (2048): a client's fresh connection outlives one accept burst
HEADROOM = 512
LOG_INTERVAL_S = 60.0


def raise_fd_limit() -> int:
    """The soft descriptor limit raised to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


class _Closings:
    """Counts closings by kind and logs each kind at most once per interval."""

    def __init__(self) -> None:
        self.since: dict[str, int] = {}
        self.logged: dict[str, float] = {}

    def note(self, kind: str, peer: Any) -> None:
        self.since[kind] = self.since.get(kind, 0) + 1
        now = time.monotonic()
        if now - self.logged.get(kind, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
            log.warning("closing connections: %s (%d since the last report; latest from %s)", kind,
                        self.since[kind], peer[0] if peer else "?")
            self.logged[kind], self.since[kind] = now, 0


def guarded_protocol(message_timeout_s: float, max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol with the limits above (one class per server: it holds their registry)."""
    silent: OrderedDict[Guarded, None] = OrderedDict()  # connections with no request yet, oldest first
    closings = _Closings()

    class Guarded(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _served = False  # a whole request has arrived on this connection

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # a closed connection leaves self.connections only at its connection_lost: count closings
            over = max(len(silent) + 1 - HALF_OPEN_MAX, len(self.connections) - max_connections)
            closed = 0
            while closed < over and silent:
                oldest, _ = silent.popitem(last=False)
                closings.note("too many connections that sent nothing", oldest.client)
                oldest.transport.close()
                closed += 1
            if len(self.connections) - closed > max_connections:
                closings.note("descriptor limit near", self.client)
                transport.close()
                return
            silent[self] = None
            self._timer = self.loop.call_later(message_timeout_s, self._expire)

        def on_headers_complete(self) -> None:
            silent.pop(self, None)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._served = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            silent.pop(self, None)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _expire(self) -> None:
            self._timer = None
            if not self._served and not self.transport.is_closing():
                closings.note(f"no whole request within MessageTimeout ({message_timeout_s:g} s)", self.client)
                silent.pop(self, None)
                self.transport.close()

    return Guarded


def server(app: Any, host: str, port: int, message_timeout_s: float,
           max_connections: int | None = None) -> uvicorn.Server:
    """A server of ``app`` with the limits above; ``run()`` serves until a signal or ``should_exit``
    (after which open connections get a second to finish). ``max_connections``: fewer open
    connections than the descriptor limit allows (slurmrestd's --max-connections)."""
    limit = max(64, raise_fd_limit() - HEADROOM)
    protocol = guarded_protocol(message_timeout_s, min(limit, max_connections or limit))
    served = uvicorn.Server(uvicorn.Config(app, host=host, port=port, http=protocol, log_level="warning",
                                           access_log=False, backlog=2048, timeout_graceful_shutdown=1))
    if hasattr(app, "state"):
        app.state.server = served  # for stop(): the daemon stopped by a request of its own
    return served


def stop(app: Any) -> None:
    """Stop serving ``app`` as on SIGTERM, once the request asking for it has been answered (a
    daemon's shutdown order: scontrol shutdown)."""
    served = getattr(app.state, "server", None)
    if served is not None:
        served.should_exit = True


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, to be served by one server after another
    (:func:`serve_on`): the port never refuses a connection in between."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def serve_on(server_: uvicorn.Server, sock: socket.socket) -> None:
    """Run ``server_`` on a copy of ``sock``: the server closes its copy when it stops, the
    socket stays open for the next one."""
    server_.run(sockets=[sock.dup()])


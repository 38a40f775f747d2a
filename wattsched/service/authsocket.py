"""The local token service: a Unix socket that mints a token for whoever connects.

The caller's uid comes from the kernel (SO_PEERCRED), so a user who cannot read the
cluster key still gets a credential for exactly their own identity and no other.

Every local user can reach the socket, so it must survive any of them (docs/admin/security.md):
a client that closes at once, never reads, or floods it costs its own connection and nothing
else. Connections are served one at a time (bounded concurrency: one), each with a send timeout;
a failed accept (out of descriptors, say) is retried with a growing pause, logged once per kind;
and a watchdog thread starts the service again, on a fresh socket, should it ever stop.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: every command that has no key imports this module for fetch()
if TYPE_CHECKING:
    import socket
    import threading

TOKEN_LIFESPAN_S = 300
SEND_TIMEOUT_S = 1.0  # a token is a few hundred bytes: only a client that never reads takes this long
BACKOFF_S = (0.01, 1.0)  # the pause after a failed accept, doubling from the first to the second
RESTART_PAUSE_S = 1.0  # the watchdog's pause before starting a stopped service again


class TokenService:
    """The socket, the thread serving it and the watchdog that restarts that thread."""

    def __init__(self, path: str, key: bytes, lifespan_s: int = TOKEN_LIFESPAN_S):
        self.path, self.key, self.lifespan_s = path, key, lifespan_s
        self.served = self.failed = self.restarts = 0  # counters for the tests and the logs
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> TokenService:
        import threading

        self._thread = self._spawn()
        threading.Thread(target=self._watch, name="authsocket-watchdog", daemon=True).start()
        return self

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _bind(self) -> socket.socket:
        import socket

        folder = os.path.dirname(self.path)
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o755)  # every local user must reach the socket; nothing else lives here
        if os.path.lexists(self.path):
            os.unlink(self.path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.path)
        os.chmod(self.path, 0o666)
        server.listen(socket.SOMAXCONN)  # a flood of connections waits here, not in the clients' refusals
        return server

    def _spawn(self) -> threading.Thread:
        import threading

        if self._server is not None:
            self._server.close()
        self._server = self._bind()
        thread = threading.Thread(target=self._serve, args=(self._server,), name="authsocket", daemon=True)
        thread.start()
        return thread

    def _watch(self) -> None:
        import logging
        import time

        log = logging.getLogger("wattsched.controller")
        while True:
            assert self._thread is not None
            self._thread.join()  # (a thread that could not be started again is joined at once)
            self.restarts += 1
            log.error("the token service stopped; starting it again", extra={"socket": self.path})
            time.sleep(RESTART_PAUSE_S)
            try:
                self._thread = self._spawn()
            except OSError as exc:  # its folder is gone or the host is out of descriptors: after the pause
                log.error("the token service cannot listen", extra={"socket": self.path, "error": str(exc)})

    def _serve(self, server: socket.socket) -> None:
        import errno
        import logging
        import time

        log = logging.getLogger("wattsched.controller")
        pause, said = BACKOFF_S[0], set()
        while True:
            try:
                conn, _ = server.accept()
            except (InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF or server.fileno() < 0:  # closed: this thread's socket was replaced
                    return
                if exc.errno not in said:  # EMFILE, ENFILE, ENOBUFS, ENOMEM: once per kind, then quietly
                    said.add(exc.errno)
                    log.warning("the token service cannot accept a connection; retrying",
                                extra={"error": str(exc)})
                time.sleep(pause)
                pause = min(pause * 2, BACKOFF_S[1])
                continue
            pause = BACKOFF_S[0]
            try:
                self._answer(conn)
                self.served += 1
            except OSError:  # the client closed, reset or never read: its connection alone is lost
                self.failed += 1
            finally:
                conn.close()

    def _answer(self, conn: socket.socket) -> None:
        import socket
        import struct

        from wattsched import auth

        conn.settimeout(SEND_TIMEOUT_S)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        conn.sendall(auth.user_token(self.key, uid, lifespan_s=self.lifespan_s).encode())


def fetch(path: str, timeout_s: float = 2.0) -> str:
    """Ask the local token service for a token for the calling user. (Through _socket: the socket
    module's enums and selectors cost a command ~3 ms to import, for nothing it needs here.)"""
    import _socket
    import time

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                sock.connect(path)
                break
            except BlockingIOError:  # the service's backlog is full (a flood): wait for a place in it
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    finally:
        sock.close()
    return b"".join(chunks).decode()

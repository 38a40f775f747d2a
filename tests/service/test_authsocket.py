"""The token service in process: it answers after clients that close at once or never read, and its
watchdog starts it again should its thread ever stop."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from wattsched import auth
from wattsched.harness.testing import wait_for
from wattsched.service import authsocket

KEY = b"k" * 32


def _service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> authsocket.TokenService:
    monkeypatch.setattr(authsocket, "RESTART_PAUSE_S", 0.05)
    return authsocket.TokenService(str(tmp_path / "auth" / "auth.sock"), KEY).start()


def test_clients_that_close_at_once_or_never_read_cost_only_their_own_connection(tmp_path, monkeypatch) -> None:
    service = _service(tmp_path, monkeypatch)
    for _ in range(500):  # the report's thread died after about 66 of these
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(service.path)
    silent = []
    for _ in range(20):  # and these never read what they are sent
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(service.path)
        silent.append(sock)
    try:
        who, _issued = auth.identity(KEY, authsocket.fetch(service.path))
        assert service.alive() and service.restarts == 0
        assert who.uid == os.getuid()
        wait_for(lambda: service.served + service.failed >= 521, 10, what="every connection answered")
    finally:
        for sock in silent:
            sock.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_watchdog_starts_a_stopped_service_again(tmp_path, monkeypatch) -> None:
    service = _service(tmp_path, monkeypatch)
    answer = service._answer
    calls = []

    def breaks_once(conn: socket.socket) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the service")  # not a client's fault: the thread ends
        answer(conn)

    monkeypatch.setattr(service, "_answer", breaks_once)
    assert authsocket.fetch(service.path, timeout_s=5) == ""  # closed with nothing sent
    wait_for(lambda: service.restarts == 1 and service.alive(), 10, what="the service started again")
    started = time.monotonic()
    token = wait_for(lambda: _fetched(service.path), 10, what="a token from the restarted service")
    assert auth.identity(KEY, token)[0].uid == os.getuid() and time.monotonic() - started < 10


def _fetched(path: str) -> str | None:
    try:
        return authsocket.fetch(path) or None
    except OSError:
        return None

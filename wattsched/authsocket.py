"""The local token service: a Unix socket that mints a token for whoever connects.

The caller's uid comes from the kernel (SO_PEERCRED), so a user who cannot read the
cluster key still gets a credential for exactly their own identity and no other.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: every command that has no key imports this module for fetch()
if TYPE_CHECKING:
    import threading

TOKEN_LIFESPAN_S = 300


def serve(path: str, key: bytes) -> threading.Thread:
    """Start serving tokens on ``path`` in a daemon thread."""
    # here, not at the top: every command without the key imports this module for fetch()
    import socket
    import struct
    import threading

    from wattsched import auth

    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    os.chmod(folder, 0o755)  # every local user must reach the socket; nothing else lives here
    if os.path.lexists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(64)

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                _pid, uid, _gid = struct.unpack("3i", creds)
                conn.sendall(auth.user_token(key, uid, lifespan_s=TOKEN_LIFESPAN_S).encode())

    thread = threading.Thread(target=loop, name="authsocket", daemon=True)
    thread.start()
    return thread


def fetch(path: str, timeout_s: float = 2.0) -> str:
    """Ask the local token service for a token for the calling user. (Through _socket: the socket
    module's enums and selectors cost a command ~3 ms to import, for nothing it needs here.)"""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    finally:
        sock.close()
    return b"".join(chunks).decode()

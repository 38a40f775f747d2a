"""Private state on disk: folders only their owner may enter, SQLite files only their owner may read.

The daemons also run with umask 077, so what they create is private from the start; these helpers
repair what an older version (or another umask) left readable, and make the files before SQLite
does, because SQLite gives a database's WAL and shared-memory files the database file's mode.
"""

from __future__ import annotations

import json
import os
from typing import Any


def private_dir(path: str) -> None:
    """A folder of its owner's alone (0700), whatever it was before."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def private_sqlite(db_path: str) -> None:
    """An SQLite database and its companion files readable by their owner alone (0600)."""
    for path in (db_path, db_path + "-wal", db_path + "-shm", db_path + "-journal"):
        if os.path.exists(path) and os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)
    if not os.path.exists(db_path):
        os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def private_json(path: str, data: Any) -> None:
    """``data`` as JSON in a file of its owner's alone (0600), written whole and synced, then
    renamed into place (a reader sees the old file or the new one, never half of it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    draft = path + ".tmp"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(draft, path)

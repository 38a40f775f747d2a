"""Private state on disk: folders only their owner may enter, SQLite files only their owner may read.

The daemons also run with umask 077, so what they create is private from the start; these helpers
repair what an older version (or another umask) left readable, and make the files before SQLite
does, because SQLite gives a database's WAL and shared-memory files the database file's mode.
"""

from __future__ import annotations

import os


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

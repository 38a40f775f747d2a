"""Listings whose cost grows with the cluster (every job in squeue's or Slurm's REST layout), served so
that no user can starve the others with them.

Each user has one listing built at a time (their further ones wait their turn), at most
``AT_ONCE`` are built in all, and each is built in slices of ``SLICE`` records, serialised as it
goes, with the event loop free for every other request between slices. So a user who asks for
the 9,000-job REST document from eight threads at once holds one listing in progress, and another
user's sbatch or squeue waits for at most a slice, not for eight whole documents. The records are
those of the moment the listing started (the loop owns the state; nothing here runs elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson

SLICE = 25  # records per slice: ~6 ms of the loop in Slurm's REST layout (0.23 ms a job, measured)
AT_ONCE = 2  # listings built at the same time, all users together
SENTINEL = "\x00records"  # where the records go in a document's head (no record can hold a NUL)


class ListingGate:
    def __init__(self, at_once: int = AT_ONCE):
        self._all = asyncio.Semaphore(at_once)
        self._users: dict[int, list[Any]] = {}  # uid -> [its lock, how many of its listings wait or run]

    @contextlib.asynccontextmanager
    async def turn(self, uid: int) -> AsyncIterator[None]:
        """Wait for this user's turn, then for a free place among all users'."""
        entry = self._users.setdefault(uid, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0], self._all:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._users[uid]


async def sliced(records: Iterable[Any], build: Callable[[Any], Any]) -> list[bytes]:
    """``build(r)`` of every record as JSON, a slice at a time with the loop free in between: the
    slices' items, comma-separated, for :func:`document`."""
    items = list(records)
    parts = []
    for start in range(0, len(items), SLICE):
        if start:
            await asyncio.sleep(0)
        parts.append(orjson.dumps([build(r) for r in items[start:start + SLICE]])[1:-1])
    return parts


def document(head: dict[str, Any], key: str, parts: list[bytes]) -> bytes:
    """A document whose ``key`` holds the records of ``parts`` (``head[key]`` is replaced), joined in
    one copy: a 40 MB listing costs the loop one pass over its bytes, not three."""
    text = orjson.dumps({**head, key: SENTINEL})
    before, found, after = text.rpartition(orjson.dumps(SENTINEL))
    assert found, "the head lost its placeholder"
    pieces = [before, b"["]
    for part in parts:
        if part:
            pieces += (part, b",")
    if pieces[-1] == b",":
        pieces.pop()
    return b"".join([*pieces, b"]", after])

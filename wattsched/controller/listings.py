"""Listings whose cost grows with the cluster (every job in squeue's or Slurm's REST layout), served so
that no user can starve the others with them.

Each user has one listing built at a time (their further ones wait their turn), at most
``AT_ONCE`` are built in all, and each is built in slices of at most ``SLICE_S`` of the loop's time,
serialised as it goes, with the event loop free for every other request between slices. So a user who asks for
the 9,000-job REST document from eight threads at once holds one listing in progress, and another
user's sbatch or squeue waits for at most a slice, not for eight whole documents. The records are
those of the moment the listing started (the loop owns the state; nothing here runs elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson

# A slice is bounded by time, not by a count of records: a count tuned on a quiet machine (25 records,
# ~6 ms here) held the loop four times longer on a loaded one, and another user's squeue waited for
# each of those slices in turn.
SLICE_S = 0.004
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
    parts, built = [], []
    until = time.perf_counter() + SLICE_S
    for record in list(records):
        built.append(build(record))
        if time.perf_counter() >= until:
            parts.append(orjson.dumps(built)[1:-1])
            built = []
            await asyncio.sleep(0)
            until = time.perf_counter() + SLICE_S
    parts.append(orjson.dumps(built)[1:-1])
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

"""The accounting database as the HTTP routes reach it: called off the event loop, its outages
answered as Slurm's tools word them (503, "accounting database unavailable"), and anything else
left to be what it is, a bug (500, logged with its traceback)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import exc as sa_exc

from wattsched.controller.actions import Refused

if TYPE_CHECKING:
    from wattsched.accounting.store import AccountingStore
    from wattsched.controller.acctsync import AccountingSync

T = TypeVar("T")
# the database is away, refuses connections or is locked: not a bug of ours
UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError, sa_exc.DisconnectionError)


def store(accounting: AccountingStore | None) -> AccountingStore:
    """The accounting store, or the refusal a cluster without accounting gives."""
    if accounting is None:
        raise Refused("Accounting storage is disabled (AccountingStorageType=accounting_storage/none)", 400)
    return accounting


async def call(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a worker thread; a database outage becomes Slurm's 503."""
    try:
        return await asyncio.to_thread(function, *args)
    except UNAVAILABLE as exc:
        raise Refused("Problem talking to the database: accounting database unavailable "
                      f"({type(exc).__name__})", 503) from exc


async def flushed(sync: AccountingSync | None) -> None:
    """The outbox written to the database first, for a reader that must see the latest records (a
    caller's own changes, the last moments' node events); nothing without accounting."""
    if sync is not None:
        await call(sync.flush)

"""What both daemons' HTTP apps share: the request authentication dependency and the lifespan
that runs a daemon's background loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from wattsched import auth


def identity(request: Request) -> auth.Identity:
    """The caller, from its bearer token (checked with ``app.state.key``); 401 without a valid one."""
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        raise HTTPException(401, "Authentication required", headers={"WWW-Authenticate": "Bearer"})
    try:
        return auth.identity(request.app.state.key, header[7:].strip())
    except auth.AuthError as exc:
        raise HTTPException(401, f"Invalid authentication credential: {exc}",
                            headers={"WWW-Authenticate": "Bearer"}) from exc


Who = Annotated[auth.Identity, Depends(identity)]


def require_role(role: str):
    """A dependency that admits only daemons of ``role`` (``node`` or ``controller``)."""

    def check(who: Who) -> auth.Identity:
        if who.role != role:
            raise HTTPException(403, "Access/permission denied")
        return who

    return Depends(check)


def loop_lifespan(run: Callable[[], Awaitable[None]], start: Callable[[], None] = lambda: None,
                  stop: Callable[[], Awaitable[None]] | None = None):
    """A FastAPI lifespan: ``start()``, run ``run()`` as a task while serving, then cancel it and ``stop()``."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        start()
        task = asyncio.get_running_loop().create_task(run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if stop is not None:
                await stop()

    return lifespan

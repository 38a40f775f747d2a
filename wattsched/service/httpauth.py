"""What both daemons' HTTP apps share: the request authentication dependency and the lifespan
that runs a daemon's background loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from wattsched import auth
from wattsched.config import Config
from wattsched.ratelimit import RateLimiter

log = logging.getLogger("wattsched.controller")


async def identity(request: Request) -> auth.Identity:
    """The caller, from its token (checked with ``app.state.key``); 401 without a valid one.

    The token comes as ``Authorization: Bearer`` or, as slurmrestd takes it, ``X-SLURM-USER-TOKEN``
    with ``X-SLURM-USER-NAME``. A user name that is not the token's own is refused unless the
    token is root's or a daemon's, which may act for any user (slurmrestd's rule for SlurmUser).

    A coroutine, as every dependency of both apps: FastAPI runs a plain-def one on a worker thread,
    a hop that cost each request a thread switch (and ran the rate limiter off the loop that owns
    it). Only the user-name lookup, which may ask a directory service, leaves the loop.
    """
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else \
        request.headers.get("x-slurm-user-token", "").strip()
    if not token:
        raise HTTPException(401, "Authentication required", headers={"WWW-Authenticate": "Bearer"})
    try:
        who, issued = auth.identity(request.app.state.key, token)
        if not who.is_daemon:
            await _still_theirs(request, who, issued)
    except auth.AuthError as exc:
        raise HTTPException(401, f"Invalid authentication credential: {exc}",
                            headers={"WWW-Authenticate": "Bearer"}) from exc
    name = request.headers.get("x-slurm-user-name", "").strip()
    if name and name != who.user:
        if who.uid != 0 and not who.is_daemon:
            raise HTTPException(401, f"Invalid authentication credential: the token is {who.user}'s, "
                                     f"not {name[:64]}'s")
        uid = await asyncio.to_thread(auth.lookup_uid, name)
        if uid is None:
            raise HTTPException(401, f"Invalid user: {name[:64]}")
        return auth.Identity(uid=uid, user=name, role="user")  # root acting for a user: root's rate
    _rate_limit(request, who)
    return who


# (name, uid) -> (whether the user database agrees, until when that may be believed): it is asked
# again after this, so a deleted user's tokens stop working within it, without a lookup per request
UID_CACHE_S = 10.0
_agrees: dict[tuple[str, int], tuple[bool, float]] = {}


async def _still_theirs(request: Request, who: auth.Identity, issued: float) -> None:
    """A user's token is honoured while this host's user database gives its name and its uid to no
    one else (auth.same_user: a deleted user whose uid went to another, or a name given another
    uid, ends it, as Slurm's auth/jwt resolves the name at use) and it was issued after any
    revocation of that user's tokens (``scontrol token revoke``)."""
    now = time.monotonic()
    agrees, until = _agrees.get((who.user, who.uid), (False, 0.0))
    if until < now:
        agrees = await asyncio.to_thread(auth.same_user, who.user, who.uid)
        if len(_agrees) > 10_000:  # bounded: only valid tokens reach here, but any user may mint many
            _agrees.clear()
        _agrees[(who.user, who.uid)] = (agrees, now + UID_CACHE_S)
    if not agrees:
        raise auth.AuthError(f"the token's user {who.user[:64]} is not uid {who.uid} here")
    revoked = getattr(request.app.state, "revoked", None)
    if revoked is not None and issued <= revoked(who.user):
        raise auth.AuthError("the token was revoked")


def _rate_limit(request: Request, who: auth.Identity) -> None:
    """SlurmctldParameters=rl_enable: a user's request past their bucket is refused with 429 before
    any work (root and the daemons are never limited); a refusal is logged once per user per interval."""
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if limiter is None or who.uid == 0 or who.is_daemon:
        return
    limiter.configure(request.app.state.rate_limits())
    now = time.monotonic()
    if not limiter.limits.enabled or limiter.take(who.uid, now):
        return
    if limiter.should_log(who.uid, now):
        log.warning("RPC rate limit exceeded by uid %d with %s %s, telling to back off", who.uid,
                    request.method, request.url.path[:128])
    raise HTTPException(429, "Rate limit exceeded, please retry momentarily",
                        headers={"Retry-After": str(limiter.retry_after_s())})


Who = Annotated[auth.Identity, Depends(identity)]


def require_role(role: str):
    """A dependency that admits only daemons of ``role`` (``node`` or ``controller``)."""

    async def check(who: Who) -> auth.Identity:
        if who.role != role:
            raise HTTPException(403, "Access/permission denied")
        return who

    return Depends(check)


def metrics_access():
    """A dependency that admits a scrape of ``/metrics`` as slurm.conf's Metrics* keys say:
    off unless MetricsType=metrics/openmetrics; with MetricsAuthUsers, only those users, root,
    AdminUsers and the daemons; else with MetricsParameters=ignore_private_data, anyone without
    a token; else any valid token (Slurm would be open here; we ask for a token by default).
    The daemon's configuration of now (scontrol reconfigure may have changed it) is
    ``app.state.config()``."""
    return Depends(_check_scrape)


async def _check_scrape(request: Request) -> auth.Identity | None:
    config: Config = request.app.state.config()
    if config.metrics_type != "metrics/openmetrics":
        raise HTTPException(404, "Metrics are off: set MetricsType=metrics/openmetrics")
    if not config.metrics_auth_users and "ignore_private_data" in config.metrics_parameters:
        return None
    who = await identity(request)
    if config.metrics_auth_users and not (who.uid == 0 or who.is_daemon or who.user in config.admin_users
                                          or who.user in config.metrics_auth_users):
        raise HTTPException(403, "Access/permission denied: not in MetricsAuthUsers")
    return who


def loop_lifespan(run: Callable[[], Coroutine[Any, Any, None]], start: Callable[[], None] = lambda: None,
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

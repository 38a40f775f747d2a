"""The daemons' request authentication: a FastAPI dependency that yields the caller."""

from __future__ import annotations

from typing import Annotated

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

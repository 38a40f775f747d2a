"""Limits on requests for both daemons' HTTP apps, enforced before anything parses them.

Pure ASGI (no Starlette base class): a declared Content-Length over the limit is refused at once
with 413; a body sent without one (chunked) is counted as it arrives and refused the moment it
passes the limit, so no request makes the server buffer more than the limit. A NUL in the path or
the query is refused with 400 (no store keeps it). A request whose fields fail validation gets 422
naming each field, echoing at most an excerpt of what was sent (:func:`bounded_validation_errors`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wattsched.usertext import excerpt


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, streamed: dict[str, int]):
        self.app, self.default_max, self.streamed = app, max_bytes, streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\0" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            await _answer(send, 400, "NULL character in the request's path or query")
            return
        limit = self.streamed.get(scope.get("path", ""), self.default_max)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > limit
            except ValueError:
                too_large = True
            if too_large:
                await _refuse(send, limit)
                return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await _refuse(send, limit)


async def _refuse(send: Send, limit: int) -> None:
    await _answer(send, 413, f"Request body larger than {limit} bytes")


async def _answer(send: Send, status: int, detail: str) -> None:
    data = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})


ERRORS_MAX = 20  # validation errors listed in one answer


def validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """The request's validation errors as FastAPI lists them, with each input cut to an excerpt."""
    listed = []
    for error in exc.errors()[:ERRORS_MAX]:
        item = {"loc": [excerpt(p) if isinstance(p, str) else p for p in error.get("loc", ())],
                "msg": excerpt(str(error.get("msg", ""))), "type": error.get("type", "")}
        if "input" in error:
            item["input"] = excerpt(error["input"])
        listed.append(item)
    return listed


async def bounded_validation_errors(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": validation_errors(exc)}, status_code=422)


def guard(app: FastAPI, max_bytes: int, streamed: dict[str, int] | None = None) -> None:
    """Both limits on an app: the body's size, and bounded validation errors. ``streamed``: the
    paths whose route passes its body on as it arrives (sbcast's file), with their own limit."""
    app.add_middleware(BodyLimit, max_bytes=max_bytes, streamed=streamed or {})
    app.add_exception_handler(RequestValidationError, bounded_validation_errors)  # type: ignore[arg-type]

"""slurmrestd's daemon: Slurm's REST API on the addresses a site gives it (``host:port``,
``unix:/path``), each request sent on to the controller in charge, which serves the API itself.

Sites run slurmrestd apart from slurmctld, on a port of its own (6820), often on another host, behind
their proxies; tools are configured with its address. It holds no state and no key: the caller's
credentials (``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN``, or ``Authorization: Bearer``) go on with
the request, and the controller decides. A request goes to the controller that answered last,
else to each configured one in turn (a standby refuses, naming itself); none answering is Slurm's
"Unable to contact slurm controller (connect failure)", 503. Requests are bounded as the
controller's are (body size, connections, MessageTimeout for a request to arrive).
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from typing import Any

import httpx
import orjson
from starlette.types import Receive, Scope, Send

from wattsched.service import httpserve
from wattsched.service.httplimits import BodyLimit

MAX_BODY_BYTES = 16 * 1024 * 1024  # the controller's own limit (wattsched.controller.app)
HEAD_MAX_BYTES = 64 * 1024  # a request's line and headers on standard input (inetd's clients are the network's)
# hop-by-hop headers (RFC 9110, 7.6.1) and those httpx sets again for the request it makes
_NOT_FORWARDED = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
                            b"transfer-encoding", b"upgrade", b"host", b"content-length"})
CONNECT_FAILURE = {"error": "Unable to contact slurm controller (connect failure)", "error_number": 1800,
                   "source": "slurmrestd", "description": ""}


class RestProxy:
    """ASGI: each request sent on to the controller in charge, its answer returned as it came.
    ``local_token``: the credential of whoever runs slurmrestd on a pipe (rest_auth/local), sent
    with a request that brings none of its own."""

    def __init__(self, controllers: list[str], timeout_s: float, local_token: str | None = None):
        self.controllers = controllers
        self.last = controllers[0]  # the one that answered last
        self.timeout_s = timeout_s
        self.local_token = local_token
        self.client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.client = httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.client is not None:
                    await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()  # bounded by BodyLimit, which wraps this application
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _NOT_FORWARDED]
        if self.local_token and not any(k.lower() in (b"authorization", b"x-slurm-user-token") for k, _ in headers):
            headers.append((b"authorization", f"Bearer {self.local_token}".encode()))
        target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        assert self.client is not None
        for base in sorted(self.controllers, key=lambda url: url != self.last):
            try:
                reply = await self.client.request(scope["method"], base + target, headers=headers,
                                                  content=bytes(body))
            except httpx.TransportError:
                continue
            if reply.status_code == 503 and b'"standby":true' in reply.content:
                continue
            self.last = base
            kept = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()
                    if k.lower().encode() not in _NOT_FORWARDED and k.lower() != "content-encoding"]
            await _answer(send, reply.status_code, reply.content, kept)
            return
        await _answer(send, 503, orjson.dumps({"errors": [CONNECT_FAILURE], "warnings": []}),
                      [(b"content-type", b"application/json")])


async def _answer(send: Send, status: int, content: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(content)).encode())]})
    await send({"type": "http.response.body", "body": content})


def serve_pipe(controllers: list[str], message_timeout_s: float, local_token: str | None) -> int:
    """slurmrestd with no address to listen on (started by inetd, or given a request on a pipe):
    the HTTP requests on standard input, each answered on standard output by the same proxy, until
    the input ends or a request asks to close; a malformed request, or one cut short, ends it with
    1, as Slurm's "fail on first error" for a piped process. (httptools, uvicorn's own parser, as it
    takes an HTTP/1.1 request without Host, as Slurm's does and its suite sends.)"""
    import asyncio
    import http

    import httptools

    proxy = RestProxy(controllers, max(30.0, message_timeout_s), local_token)
    done: list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes, bool]] = []

    class Message:
        def __init__(self) -> None:
            self.url, self.headers, self.body = b"", [], bytearray()  # type: ignore[var-annotated]
            self.head = 0  # bytes of the request line and headers so far: bounded, as uvicorn's are
            self.begun = False  # a request has begun and is not yet complete

        def on_message_begin(self) -> None:
            self.url, self.headers, self.body, self.head, self.begun = b"", [], bytearray(), 0, True

        def _count(self, size: int) -> None:
            self.head += size
            if self.head > HEAD_MAX_BYTES:
                raise httptools.HttpParserError("request line and headers too large")

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            self.headers.append((name.lower(), value))

        def on_body(self, data: bytes) -> None:
            self.body += data
            if len(self.body) > MAX_BODY_BYTES:
                raise httptools.HttpParserError("request body too large")

        def on_message_complete(self) -> None:
            self.begun = False
            done.append((parser.get_method(), self.url, self.headers, bytes(self.body), parser.should_keep_alive()))

    message = Message()
    parser = httptools.HttpRequestParser(message)

    async def answer(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        path, _, query = target.partition(b"?")
        scope = {"type": "http", "method": method.decode(), "path": path.decode("latin-1"), "raw_path": path,
                 "query_string": query, "headers": headers}
        sent: dict[str, Any] = {}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.update(message)

        await proxy(scope, receive, send)
        status = sent["status"]
        head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
        head += [k + b": " + v for k, v in sent["headers"]]
        os.write(1, b"\r\n".join(head) + b"\r\n\r\n" + sent["body"])

    async def run() -> int:
        proxy.client = httpx.AsyncClient(timeout=proxy.timeout_s, follow_redirects=False)
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    if message.begun:
                        os.write(2, b"slurmrestd: error: request on standard input cut short\n")
                    return 1 if message.begun else 0
                try:
                    parser.feed_data(data)
                except httptools.HttpParserError as exc:
                    os.write(2, f"slurmrestd: error: bad request on standard input: {exc}\n".encode())
                    return 1
                while done:
                    method, target, headers, body, keep_alive = done.pop(0)
                    await answer(method, target, headers, body)
                    if not keep_alive:
                        return 0
        finally:
            await proxy.client.aclose()

    return asyncio.run(run())


def listen(address: str) -> socket.socket:
    """A listening socket for one of slurmrestd's addresses: ``unix:/path`` (made afresh; its
    folder's permissions decide who reaches it) or ``[host]:port`` (no host: every address)."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if not path:
            raise ValueError(f"Unable to parse {address}")
        if os.path.exists(path) and not os.path.isdir(path):
            os.unlink(path)  # a socket left by an earlier run
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
    else:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"Unable to parse {address}")
        host = host.strip("[]") or "0.0.0.0"
        host = "127.0.0.1" if host == "localhost" else host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def serve(sockets: list[socket.socket], controllers: list[str], message_timeout_s: float,
          max_connections: int | None = None) -> None:
    """Serve the proxy on ``sockets`` until stopped (SIGINT, SIGTERM)."""
    app: Any = BodyLimit(RestProxy(controllers, max(30.0, message_timeout_s)), MAX_BODY_BYTES, {})
    server = httpserve.server(app, "127.0.0.1", 0, message_timeout_s, max_connections)
    server.run(sockets=sockets)

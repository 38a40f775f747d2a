"""What every command shares: finding the cluster, credentials, calling the controller, errors."""

from __future__ import annotations

import os
import sys
import time

from wattsched import jsonwire

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, NoReturn

DEFAULT_CONF = "/etc/wattsched/wattsched.conf"
SLURM_DEFAULT_CONF = "/etc/slurm/slurm.conf"  # where a Slurm site keeps it: read where ours is absent


class CLIError(Exception):
    """An error to print in Slurm's voice (``<prog>: error: <message>``) before exiting non-zero."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class Unreachable(CLIError):
    """No controller answers (nor its credential service, which lives in the controller)."""


def config_path() -> str:
    explicit = os.environ.get("WATTSCHED_CONF") or os.environ.get("SLURM_CONF")
    if explicit:
        return explicit
    return SLURM_DEFAULT_CONF if not os.path.exists(DEFAULT_CONF) and os.path.exists(SLURM_DEFAULT_CONF) \
        else DEFAULT_CONF


def config_file(path: str | None) -> str:
    """The configuration a daemon or tool was given, else the usual one, as an absolute path."""
    chosen = path or config_path()
    if not os.path.exists(chosen):
        raise CLIError(f"configuration file {chosen} not found")
    return os.path.abspath(chosen)


def load_config(full: bool = False):
    from wattsched import config as config_mod

    try:
        return config_mod.load(config_path(), globals_only=not full)
    except config_mod.ConfigError as exc:
        raise CLIError(str(exc)) from exc


def die(prog: str, message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    raise SystemExit(code)


# The part of the installation (pyproject's extras) a command needs beyond the commands' own.
EXTRA_FOR = {"controller": "controller", "noded": "node", "bmc": "node", "emulate": "controller,node",
             "power": "node", "simulate": "simulator", "profile": "plots", "sh5util": "node"}


def missing_part(command: str, exc: ModuleNotFoundError, shown: str = "") -> CLIError:
    """What to say when ``command`` meets a package this installation was made without (a module
    of wattsched's own missing is no such thing: it is raised again, a bug)."""
    if (exc.name or "wattsched").split(".")[0] == "wattsched":
        raise exc
    extra = EXTRA_FOR.get(command, "all")
    return CLIError(f"{shown or command} needs the Python package {exc.name}, which this installation lacks: "
                    f"pip install 'wattsched[{extra}]'")


# What a command needs of the configuration. Parsing the file costs a command more than the rest of
# its start-up (the Config class alone takes ~9 ms to build: measured with -X importtime), so these
# few values are kept in the user's cache, checked against every file read (path, size, mtime).
CLIENT_SETTINGS = ("controller_url", "controller_urls", "slurmctld_hosts", "slurmctld_timeout_s",
                   "message_timeout_s", "cluster_name", "key_file", "auth_socket_path", "mpi_default",
                   "kill_on_bad_exit", "wait_time_s", "kill_wait_s")


class Settings:
    """The configuration values a command uses (see CLIENT_SETTINGS)."""

    def __init__(self, values: dict[str, Any]):
        self.controller_url = values["controller_url"]
        self.controller_urls: list[str] = list(values["controller_urls"])
        self.controller_names: list[str] = [name for name, _addr in values["slurmctld_hosts"]]
        self.slurmctld_timeout_s = float(values["slurmctld_timeout_s"])
        self.message_timeout_s = float(values["message_timeout_s"])
        self.cluster_name = values["cluster_name"]
        self.key_file = values["key_file"]
        self.auth_socket_path = values["auth_socket_path"]
        self.mpi_default: str = values["mpi_default"]
        self.kill_on_bad_exit = bool(values["kill_on_bad_exit"])
        self.wait_time_s = int(values["wait_time_s"])
        self.kill_wait_s = int(values["kill_wait_s"])


def _stamp(path: str) -> list[int]:
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def _cache_path(conf: str) -> str:
    """The cache file of a configuration path: a CRC names it (hashlib would cost every command ~3 ms
    of OpenSSL start-up); the cache records the path itself, so that a collision is only a miss."""
    import binascii

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = binascii.crc32(os.path.abspath(conf).encode())
    return os.path.join(base, "wattsched", f"client-{os.getuid()}-{digest:08x}.json")


def client_settings() -> Settings:
    """The settings from the cache when no configuration file changed since; else parsed, and cached."""
    conf = config_path()
    cache = _cache_path(conf)
    try:
        with open(cache, "rb") as handle:
            data = jsonwire.loads(handle.read(65536))
        # (a cache an older version wrote lacks the settings added since: parsed again)
        if data["source"] == os.path.abspath(conf) and all(_stamp(path) == stamp for path, stamp in data["files"]) \
                and set(CLIENT_SETTINGS) <= set(data["settings"]):
            return Settings(data["settings"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    config = load_config()
    values = {name: getattr(config, name) for name in CLIENT_SETTINGS}
    try:
        os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
        tmp = f"{cache}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(jsonwire.dumps({"source": os.path.abspath(conf), "settings": values,
                                         "files": [[path, _stamp(path)] for path in config.files]}))
        os.replace(tmp, cache)
    except OSError:  # no writable home: parse every time
        pass
    return Settings(values)


RATE_LIMITED_WAIT_S = 60.0  # how long a rate-limited command keeps retrying before it gives up
MAX_HEAD_BYTES = 65536  # an answer's status line and headers: more is no agent of ours


class Client:
    """A small JSON-over-HTTP client for the controller, and the one HTTP client of the commands
    (srun's streams to the node agents use the same exchange: :func:`exchange`, :func:`stream`).

    Plain sockets rather than http.client or httpx: importing http.client (and the email parser it
    brings) costs a command ~20 ms and httpx ~90 ms (measured with -X importtime on a 2-core VM),
    more than the request itself on loopback. Each request is one HTTP/1.1 exchange with
    ``Connection: close``, so the answer is read to EOF.
    """

    def __init__(self, config=None):
        self.config = config or client_settings()
        override = os.environ.get("WATTSCHED_CONTROLLER")
        self.controllers = [host_port(url) for url in ([override] if override else self.config.controller_urls)]
        self.host, self.port = self.controllers[0]  # the one that answered last
        self._token: str | None = None

    def only(self, index: int) -> Client:
        """A client of the controller at ``index`` alone (scontrol ping and takeover ask each)."""
        single = Client(self.config)
        single.controllers = [self.controllers[index]]
        single.host, single.port = self.controllers[index]
        single._token = self._token
        return single

    @classmethod
    def for_options(cls, opts: dict[str, Any]) -> Client:
        """A client for a command's options: -M/--clusters must name this cluster (or all)."""
        client = cls()
        if opts.get("clusters"):
            check_clusters(opts["clusters"], client.config.cluster_name)
        return client

    def token(self) -> str:
        if self._token is None:
            self._token = obtain_token(self.config)
        return self._token

    def _exchange(self, method: str, path: str, body: Any, timeout: float) -> tuple[int, bytes]:
        """The answer of the controller in charge: the one that answered last, else each listed in
        turn (a standby refuses, naming itself). With backups, while none is in charge (a failover)
        all are tried again for one and a half SlurmctldTimeout, as Slurm's commands do; and each
        is given MessageTimeout to answer, as Slurm's are (one that is frozen holds none up longer)."""
        deadline = 0.0
        if len(self.controllers) > 1:
            timeout = min(timeout, self.config.message_timeout_s)
        while True:
            for host, port in sorted(self.controllers, key=lambda c: c != (self.host, self.port)):
                try:
                    status, data = exchange(host, port, http_request(method, host, port, path, self.token(), body),
                                            timeout)
                except (OSError, ValueError):
                    continue
                if status == 503 and b'"standby":true' in data:
                    continue
                self.host, self.port = host, port
                return status, data
            now = time.monotonic()
            deadline = deadline or now + 1.5 * self.config.slurmctld_timeout_s
            if len(self.controllers) == 1 or now >= deadline:
                raise Unreachable("Unable to contact slurm controller (connect failure)")
            time.sleep(0.5)  # a takeover is seconds long: a finer poll answers sooner

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                timeout: float = 30.0) -> Any:
        if params:
            path = f"{path}?{query_string(params)}"
        wait = 0.0
        while True:
            status, data = self._exchange(method, path, body, timeout)
            if status != 429 or wait >= RATE_LIMITED_WAIT_S:
                break
            # rate limited (SlurmctldParameters=rl_enable): back off and retry, as Slurm's commands do
            pause = min(2 ** int(wait).bit_length(), RATE_LIMITED_WAIT_S - wait)
            time.sleep(pause)
            wait += pause
        try:
            decoded = _loads(data) if data else {}
        except ValueError:
            decoded = {"detail": data.decode(errors="replace")}
        if status >= 400:
            raise CLIError(_detail(decoded), status)
        return decoded


# what a query string keeps as it is (RFC 3986's unreserved characters), as urllib.parse.quote_plus
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def _quoted(value: object) -> str:
    text = str(value)
    if all(char in _UNRESERVED for char in text):
        return text
    return "".join(chr(byte) if chr(byte) in _UNRESERVED else "+" if byte == 0x20 else f"%{byte:02X}"
                   for byte in text.encode())


def query_string(params: dict[str, Any]) -> str:
    """``urllib.parse.urlencode`` of ``params`` (a list or tuple value repeats its key; None is left
    out), without importing urllib.parse (~3 ms, with the ipaddress module it brings)."""
    return "&".join(f"{_quoted(key)}={_quoted(item)}" for key, value in params.items() if value is not None
                    for item in (value if isinstance(value, list | tuple) else [value]))


def host_port(url: str, default_port: int = 6817) -> tuple[str, int]:
    """``http://host:port/...`` (or ``[v6]:port``) as (host, port), without urllib (~3 ms to import)."""
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    return host or "127.0.0.1", int(port) if port.isdigit() else default_port


def http_request(method: str, host: str, port: int, path: str, token: str, body: Any = None) -> bytes:
    """One HTTP/1.1 request with a bearer token and a JSON body (if any), closing the connection."""
    payload = b"" if body is None else jsonwire.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Authorization: Bearer {token}\r\nAccept: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            + ("Content-Type: application/json\r\n" if body is not None else "") + "\r\n")
    return head.encode() + payload


def _connect(host: str, port: int, timeout: float | None):
    """A connected socket of _socket, the C module: the socket module's wrappers (selectors,
    enums) cost a command ~3 ms to import, for nothing it needs."""
    import _socket

    error: OSError = OSError(f"cannot resolve {host}")
    # an ASCII name as bytes: a str would be IDNA-encoded first, importing that codec (~1 ms)
    name = host.encode() if host.isascii() else host
    for family, kind, proto, _name, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def _head(raw: bytes) -> tuple[int, dict[bytes, bytes]]:
    lines = raw.split(b"\r\n")
    status = int(lines[0].split(None, 2)[1])
    return status, {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}


def _chunked(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"transfer-encoding", b"").lower() == b"chunked"


def exchange(host: str, port: int, request: bytes, timeout: float, more: Iterable[bytes] = ()) -> tuple[int, bytes]:
    """Send one request (``more``: the rest of its body, sent piece by piece as it is made), read
    the answer to EOF; (status, body), chunked transfer decoded."""
    sock = _connect(host, port, timeout)
    cut: OSError | None = None
    try:
        sock.sendall(request)
        try:
            for part in more:
                sock.sendall(part)
        except OSError as exc:  # the server answered before it read all: its answer says why
            cut = exc
        chunks = []
        try:
            while chunk := sock.recv(262144):
                chunks.append(chunk)
        except OSError as exc:  # a reset after the answer came leaves the answer
            if not chunks:
                raise (cut or exc) from None
        if cut is not None and not chunks:
            raise cut
    finally:
        sock.close()
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("truncated HTTP answer")
    status, headers = _head(head)
    if _chunked(headers):
        return status, _dechunk(body)
    # a server that died while it answered (a controller killed mid-failover) leaves the headers and
    # a cut body: that is no answer, and the next controller is asked instead
    if len(body) < int(headers.get(b"content-length", b"0") or 0):
        raise ValueError("truncated HTTP answer")
    return status, body


def stream(host: str, port: int, request: bytes) -> Iterator[bytes]:
    """Send one request and yield its answer's lines as they arrive (a step's output, newline-
    delimited JSON, for as long as the step runs: no timeout). A refusal (an HTTP error) raises
    CLIError with its detail."""
    sock = _connect(host, port, None)
    try:
        sock.sendall(request)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk or len(buffer) > MAX_HEAD_BYTES:
                raise ValueError("truncated or oversized HTTP answer")
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        status, headers = _head(head)
        received = _received(sock, buffer)
        body = _dechunked(received) if _chunked(headers) else received
        if status >= 400:
            raw = b"".join(body)
            try:
                raise CLIError(_detail(jsonwire.loads(raw)), status)
            except ValueError:
                raise CLIError(raw.decode(errors="replace") or f"HTTP {status}", status) from None
        pending = b""
        for piece in body:
            pending += piece
            *lines, pending = pending.split(b"\n")
            yield from lines
        if pending:
            yield pending
    finally:
        sock.close()


def _received(sock, first: bytes) -> Iterator[bytes]:
    if first:
        yield first
    while chunk := sock.recv(65536):
        yield chunk


def _dechunked(pieces: Iterator[bytes], whole: bool = False) -> Iterator[bytes]:
    """The data of a chunked transfer as it arrives (read by offset: a whole body in one piece is
    gone through once, not copied at every chunk). ``whole``: ValueError if the pieces end before
    the last chunk (the server died mid-answer)."""
    buffer, pos = b"", 0
    for piece in pieces:
        buffer, pos = buffer[pos:] + piece, 0
        while (end := buffer.find(b"\r\n", pos)) >= 0:
            size = int(buffer[pos:end].split(b";")[0], 16)
            if size == 0:
                return
            if len(buffer) < end + 2 + size + 2:
                break
            yield buffer[end + 2:end + 2 + size]
            pos = end + 2 + size + 2
    if whole:
        raise ValueError("truncated HTTP answer")


def _dechunk(body: bytes) -> bytes:
    return b"".join(_dechunked(iter((body,)), whole=True))


def _loads(data: bytes) -> Any:
    """JSON of an answer. orjson parses big answers (squeue of 10,000 jobs) several times faster,
    but importing it costs a command ~15 ms (measured with -X importtime): small answers use the
    standard library's parser (wattsched.jsonwire)."""
    if len(data) < 1 << 20:
        return jsonwire.loads(data)
    try:
        import orjson
    except ImportError:  # orjson is a dependency; the standard parser keeps the CLI working without it
        return jsonwire.loads(data)
    return orjson.loads(data)


def _detail(decoded: Any) -> str:
    detail = decoded.get("detail") if isinstance(decoded, dict) else decoded
    if isinstance(detail, list):  # pydantic validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail)
    return str(detail)


def obtain_token(config) -> str:
    """SLURM_JWT if set; else sign with the cluster key if readable; else ask the auth socket."""
    token = os.environ.get("SLURM_JWT")
    if token:
        return token
    if os.access(config.key_file, os.R_OK):  # (checked first: users without the key skip importing auth)
        from wattsched import auth

        try:
            return auth.user_token(auth.read_key(config.key_file), os.getuid(), lifespan_s=300)
        except (OSError, auth.AuthError):
            pass
    from wattsched.service import authsocket

    sock = config.auth_socket_path
    try:
        return authsocket.fetch(sock)
    except OSError as exc:
        raise Unreachable(f"Unable to obtain a credential (no SLURM_JWT, key unreadable, {sock}: "
                          f"{exc.strerror or exc})") from exc


def split_list(values: list[str] | None) -> list[str]:
    """Slurm list options accept repeats and commas: -u a,b -u c; a comma inside brackets belongs to
    its item (a hostlist's ``n[01-02,05]``, an array's ``12_[1-4,6]``)."""
    items = []
    for value in values or []:
        depth, start = 0, 0
        for index, char in enumerate(value):
            if char == "[":
                depth += 1
            elif char == "]":
                depth = max(0, depth - 1)
            elif char == "," and depth == 0:
                items.append(value[start:index])
                start = index + 1
        items.append(value[start:])
    return [item for item in items if item]


def every(period: int | None, render: Callable[[], str]) -> int:
    """Print ``render()`` once, or every ``period`` seconds until interrupted (squeue/sinfo -i)."""
    import time

    if period is not None and period <= 0:
        raise CLIError("--iterate period must be a positive number of seconds")
    while True:
        text = render()
        if text:
            print(text, flush=True)
        if period is None:
            return 0
        time.sleep(period)
        print()


def check_clusters(values: list[str] | str | None, cluster_name: str) -> None:
    """-M/--clusters: this cluster (by ClusterName) or ``all`` are this cluster; another is an error,
    since wattsched does not federate and a silent answer from this one would mislead."""
    for name in split_list([values] if isinstance(values, str) else values):
        if name.lower() not in ("all", cluster_name.lower()):
            raise CLIError(f"No cluster '{name}' known by database (this cluster is '{cluster_name}').")


def wants_json(opts: dict[str, Any]) -> bool:
    """``--json[=data_parser]`` given (and a data_parser this wattsched speaks)."""
    if "json" not in opts:
        return False
    from wattsched import dataparser

    try:
        dataparser.check_version(opts["json"] if isinstance(opts["json"], str) else None)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    return True


def json_text(obj: Any) -> str:
    import json  # (only --json output is indented)

    return json.dumps(obj, indent=2, sort_keys=True)


def print_json(obj: Any) -> None:
    sys.stdout.write(json_text(obj) + "\n")

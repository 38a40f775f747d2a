"""What every command shares: finding the cluster, credentials, calling the controller, errors."""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.parse
from typing import Any, NoReturn

DEFAULT_CONF = "/etc/wattsched/wattsched.conf"


class CLIError(Exception):
    """An error to print in Slurm's voice (``<prog>: error: <message>``) before exiting non-zero."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


def config_path() -> str:
    return os.environ.get("WATTSCHED_CONF") or os.environ.get("SLURM_CONF") or DEFAULT_CONF


def load_config(full: bool = False):
    from wattsched import config as config_mod

    try:
        return config_mod.load(config_path(), globals_only=not full)
    except config_mod.ConfigError as exc:
        raise CLIError(str(exc)) from exc


def die(prog: str, message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    raise SystemExit(code)


class Client:
    """A small JSON-over-HTTP client for the controller (standard library only, for start-up speed)."""

    def __init__(self, config=None):
        self.config = config or load_config()
        url = os.environ.get("WATTSCHED_CONTROLLER") or self.config.controller_url
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 6817
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            self._token = obtain_token(self.config)
        return self._token

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                timeout: float = 30.0) -> Any:
        if params:
            query = urllib.parse.urlencode([(k, v) for k, vs in params.items() if vs is not None
                                            for v in (vs if isinstance(vs, list | tuple) else [vs])])
            path = f"{path}?{query}"
        headers = {"Authorization": f"Bearer {self.token()}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
        except (ConnectionError, OSError, http.client.HTTPException) as exc:
            raise CLIError("Unable to contact slurm controller (connect failure)") from exc
        finally:
            conn.close()
        try:
            decoded = _loads(data) if data else {}
        except ValueError:
            decoded = {"detail": data.decode(errors="replace")}
        if reply.status >= 400:
            raise CLIError(_detail(decoded), reply.status)
        return decoded


def _loads(data: bytes) -> Any:
    try:
        import orjson
    except ImportError:  # orjson is a dependency; plain json keeps the CLI working without it
        return json.loads(data)
    return orjson.loads(data)


def _detail(decoded: Any) -> str:
    detail = decoded.get("detail") if isinstance(decoded, dict) else decoded
    if isinstance(detail, list):  # pydantic validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail)
    return str(detail)


def obtain_token(config) -> str:
    """SLURM_JWT if set; else sign with the cluster key if readable; else ask the auth socket."""
    from wattsched import auth

    token = os.environ.get("SLURM_JWT")
    if token:
        return token
    try:
        key = auth.read_key(config.key_file)
    except (OSError, auth.AuthError):
        key = None
    if key is not None:
        return auth.user_token(key, os.getuid(), lifespan_s=300)
    from wattsched import authsocket

    sock = config.auth_socket_path
    try:
        return authsocket.fetch(sock)
    except OSError as exc:
        raise CLIError(f"Unable to obtain a credential (no SLURM_JWT, key unreadable, {sock}: "
                       f"{exc.strerror or exc})") from exc


def split_list(values: list[str] | None) -> list[str]:
    """Slurm list options accept repeats and commas: -u a,b -u c."""
    return [item for value in values or [] for item in value.split(",") if item]


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")

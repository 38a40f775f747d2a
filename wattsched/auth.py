"""Authentication: HS256 JSON Web Tokens signed with the cluster key.

The mechanism (documented in docs/admin/security.md):

* The cluster key (``AuthAltParameters=jwt_key=PATH``, default ``StateSaveLocation/jwt_hs256.key``)
  is readable only by root / the cluster's service user, like MUNGE's key.
* A caller who can read the key mints its own short-lived token for its real uid.
* Any other local user gets a token from the controller's auth socket
  (``AuthInfo=socket=PATH``, default ``auth/auth.sock`` beside StateSaveLocation), which reads
  the caller's uid from the kernel (SO_PEERCRED), so it cannot be forged; or uses a token from ``scontrol token``
  exported as ``SLURM_JWT``.
* Daemons sign their calls with role ``node`` or ``controller``; the controller signs step
  credentials that node agents check before launching tasks.

Tokens are made and checked with the standard library rather than PyJWT because every
CLI call pays the import time (PyJWT pulls in ``cryptography``: ~0.15 s), and squeue must
answer in under 0.25 s. The tests check that PyJWT decodes our tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pwd
import time
from collections import namedtuple

TYPE_CHECKING = False  # not typing's: every command that signs a token imports this module
if TYPE_CHECKING:
    from typing import Any

DEFAULT_LIFESPAN_S = 1800
# Credentials never travel in or are stored with a job's environment: its commands get their own.
SECRET_ENV = ("SLURM_JWT",)


class AuthError(Exception):
    """A missing, malformed, forged or expired credential."""


class Identity(namedtuple("Identity", ["uid", "user", "role"], defaults=["user"])):
    """Who is calling: a user (by uid and name), a node agent or the controller. (A plain namedtuple:
    every command that signs its own token imports this module, and a dataclass or a typing.NamedTuple
    costs it 5-8 ms of imports.)"""

    __slots__ = ()

    @property
    def is_daemon(self) -> bool:
        return self.role in ("node", "controller")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_HEADER = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())


def sign(key: bytes, claims: dict[str, Any]) -> str:
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    signing_input = f"{_HEADER}.{body}".encode()
    return f"{_HEADER}.{body}.{_b64(hmac.new(key, signing_input, hashlib.sha256).digest())}"


def verify(key: bytes, token: str, now: float | None = None) -> dict[str, Any]:
    """Return the claims of a valid token, or raise :class:`AuthError`."""
    try:
        header_s, body_s, sig_s = token.split(".")
        header = json.loads(_unb64(header_s))
        claims = json.loads(_unb64(body_s))
        signature = _unb64(sig_s)
    except (ValueError, json.JSONDecodeError) as exc:
        raise AuthError("malformed credential") from exc
    if header.get("alg") != "HS256":
        raise AuthError("unsupported credential algorithm")
    expected = hmac.new(key, f"{header_s}.{body_s}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise AuthError("invalid credential signature")
    if not isinstance(claims, dict) or claims.get("exp", 0) < (now if now is not None else time.time()):
        raise AuthError("credential expired")
    return claims


def user_token(key: bytes, uid: int, user: str | None = None, lifespan_s: int = DEFAULT_LIFESPAN_S,
               role: str = "user") -> str:
    now = int(time.time())
    return sign(key, {"sun": user or username(uid), "uid": uid, "role": role, "iat": now,
                      "exp": now + lifespan_s})


def identity(key: bytes, token: str) -> Identity:
    claims = verify(key, token)
    try:
        return Identity(uid=int(claims["uid"]), user=str(claims["sun"]), role=str(claims.get("role", "user")))
    except (KeyError, ValueError) as exc:
        raise AuthError("credential lacks identity") from exc


def username(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def lookup_uid(name: str) -> int | None:
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def read_key(path: str) -> bytes:
    with open(path, "rb") as handle:
        key = handle.read().strip()
    if len(key) < 16:
        raise AuthError(f"key file {path} is too short")
    return key


def ensure_key(path: str) -> bytes:
    """Read the cluster key, creating a random one (mode 0600) if there is none yet; an existing key
    readable by others is made private again."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            import secrets  # only here: every command that signs a token imports this module

            handle.write(secrets.token_hex(32) + "\n")
    elif os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o600)
    return read_key(path)

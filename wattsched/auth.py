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
CLI call pays the import time (PyJWT pulls in ``cryptography``: ~0.15 s). For the same reason a
command signs with the interpreter's built-in SHA-256 rather than through hashlib and hmac, whose
OpenSSL start-up costs every command ~3 ms (``python -X importtime``; HMAC is RFC 2104's few lines,
checked against hmac in tests/cli/test_lean.py), and base64 is binascii's (the base64 module imports
re). The tests check that PyJWT decodes our tokens.
"""

from __future__ import annotations

import binascii
import os
import pwd
import time

from wattsched import jsonwire

try:
    from _sha2 import sha256  # Python 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:  # an interpreter built with OpenSSL's hashes only
        from hashlib import sha256

TYPE_CHECKING = False  # not typing's: every command that signs a token imports this module
if TYPE_CHECKING:
    from typing import Any

DEFAULT_LIFESPAN_S = 1800
# Credentials never travel in or are stored with a job's environment: its commands get their own.
SECRET_ENV = ("SLURM_JWT",)


class AuthError(Exception):
    """A missing, malformed, forged or expired credential."""


class Identity(tuple[int, str, str]):
    """Who is calling: a user (by uid and name), a node agent or the controller: an immutable
    (uid, user, role). (A tuple by hand: every command that signs its own token imports this module,
    and a namedtuple's collections, a dataclass or a typing.NamedTuple costs it 2-8 ms of imports.)"""

    __slots__ = ()

    def __new__(cls, uid: int, user: str, role: str = "user") -> Identity:
        return tuple.__new__(cls, (uid, user, role))

    @property
    def uid(self) -> int:
        return self[0]

    @property
    def user(self) -> str:
        return self[1]

    @property
    def role(self) -> str:
        return self[2]

    @property
    def is_daemon(self) -> bool:
        return self.role in ("node", "controller")

    def __repr__(self) -> str:
        return f"Identity(uid={self.uid!r}, user={self.user!r}, role={self.role!r})"

    def __getnewargs__(self) -> tuple[int, str, str]:  # (copy and pickle make it again through __new__)
        return self.uid, self.user, self.role


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_BLOCK = 64  # SHA-256's block size in bytes (RFC 2104's B)
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def _b64(data: bytes) -> str:
    """base64url without padding (RFC 7515)."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """base64url, padded or not, as base64.urlsafe_b64decode reads it; binascii.Error is a ValueError."""
    return binascii.a2b_base64((text + "=" * (-len(text) % 4)).encode().translate(_FROM_URLSAFE))


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104): ``hmac.new(key, message, hashlib.sha256).digest()``."""
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_INNER) + message).digest()
    return sha256(key.translate(_OUTER) + inner).digest()


_HEADER = _b64(jsonwire.dumps({"alg": "HS256", "typ": "JWT"}).encode())


def sign(key: bytes, claims: dict[str, Any]) -> str:
    body = _b64(jsonwire.dumps(claims, sort_keys=True).encode())
    signing_input = f"{_HEADER}.{body}".encode()
    return f"{_HEADER}.{body}.{_b64(hmac_sha256(key, signing_input))}"


def verify(key: bytes, token: str, now: float | None = None) -> dict[str, Any]:
    """Return the claims of a valid token, or raise :class:`AuthError`."""
    import hmac  # (the daemons check tokens; a command only signs them)

    try:
        header_s, body_s, sig_s = token.split(".")
        header = jsonwire.loads(_unb64(header_s))
        claims = jsonwire.loads(_unb64(body_s))
        signature = _unb64(sig_s)
    except ValueError as exc:
        raise AuthError("malformed credential") from exc
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise AuthError("unsupported credential algorithm")
    expected = hmac.new(key, f"{header_s}.{body_s}".encode(), "sha256").digest()
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


def identity(key: bytes, token: str) -> tuple[Identity, float]:
    """Who a valid token names, and when it was issued."""
    claims = verify(key, token)
    try:
        who = Identity(uid=int(claims["uid"]), user=str(claims["sun"]), role=str(claims.get("role", "user")))
        return who, float(claims.get("iat", 0))
    except (KeyError, ValueError, TypeError) as exc:
        raise AuthError("credential lacks identity") from exc


def username(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def same_user(name: str, uid: int) -> bool:
    """Whether a token's (name, uid) is still one user here: the name resolves to that uid, or it
    resolves to nothing and no other name holds the uid. (An identity the host knows neither by name
    nor by uid is taken as the token says: a site whose users the controller's host cannot list.
    A user deleted since, whose uid went to someone else, or whose name now has another uid, is not.)"""
    if name == str(uid):  # a uid without a name, as user_token names it
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return True
        return False
    try:
        return pwd.getpwnam(name).pw_uid == uid
    except KeyError:
        pass
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return True
    return False


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

"""Text a user sends, and text shown back to other users: the rules at the API boundary.

Every string in a request must be text every part of the system can keep: no NUL (PostgreSQL refuses
it, C strings end at it) and no lone surrogate (it cannot be encoded as UTF-8, so a database or a
JSON answer would fail on it later). Labels (job, step and reservation names, comments, accounts,
partitions, wckeys) also carry no control characters, so no name can forge a line or drive a
terminal in another user's listing. Both are refused with 422 before anything is queued (every
request model derives from wattsched.api.Strict, which checks the first rule at any depth).

Text that may hold control characters (paths, submit lines, records from before these rules) is
escaped when a command prints it (``printable``). An error answer echoes at most an excerpt of what
was sent (``excerpt``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the commands import this module to print (typing costs ~5 ms)
if TYPE_CHECKING:
    from re import Match
    from typing import Any

_SURROGATE = "[\ud800-\udfff]"
# control characters, and the invisible ones that reorder or break a line as a terminal shows it:
# the bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), the marks
# (U+200E, U+200F, U+061C) and the line and paragraph separators (U+2028, U+2029)
_CONTROL = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
EXCERPT_MAX = 120  # characters of a refused value echoed in an error


def check_text(value: str) -> str:
    """``value``, or ValueError when it holds a NUL or a lone surrogate."""
    if "\0" in value:
        raise ValueError("text contains a NULL character")
    if not value.isascii() and _search(_SURROGATE, value):
        raise ValueError("text is not valid Unicode (a lone surrogate)")
    return value


def check_all_text(value: Any) -> None:
    """Every string in a decoded JSON value, keys included, passes :func:`check_text`."""
    if isinstance(value, str):
        check_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_all_text(key)
            check_all_text(item)
    elif isinstance(value, list | tuple):
        for item in value:
            check_all_text(item)


def check_label(value: str) -> str:
    """A name or comment: no control characters (tabs and newlines included)."""
    found = _search(_CONTROL, value)
    if found:
        raise ValueError(f"control character {found.group()!r} not allowed")
    return value


def printable(value: str) -> str:
    """``value`` with every character Python does not print (controls, format characters such as the
    bidirectional overrides, line and paragraph separators) escaped as Python writes it (``\\n``,
    ``\\x1b``, ``\\u202e``), so it stays one field of one line in a listing, in the order it was typed."""
    return value if value.isprintable() else "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in value)


def _search(pattern: str, value: str) -> Match[str] | None:
    import re  # (the daemons' checks, not the commands' printing: re caches the compiled pattern)

    return re.search(pattern, value)


def excerpt(value: Any) -> str:
    """At most EXCERPT_MAX characters of a value, ASCII-safe (surrogates and controls escaped)."""
    text = value if isinstance(value, str) else repr(value)
    short = text[:EXCERPT_MAX] + ("..." if len(text) > EXCERPT_MAX else "")
    return short.encode("ascii", "backslashreplace").decode("ascii")

"""JSON for the commands and for tokens, without importing the json package.

Why not ``json``: importing it costs every command 2-4 ms on the project's 2-core VM (``python -X
importtime``): its decoder and encoder compile regular expressions at import, which brings in ``re``
and ``enum``, for answers its C accelerator parses without them. This module drives that same
accelerator (``_json``, the one ``json.loads`` and ``json.dumps`` use) with json's defaults, so the
text read and written is json's, byte for byte (tests/cli/test_lean.py compares them).
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False  # not typing's: every command imports this module (typing costs ~5 ms)
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Decoding:
    """The settings ``_json.make_scanner`` reads from a decoder (the attributes it looks up, not the
    class it is typed with): json.JSONDecoder's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _unserialisable(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_scan = _json.make_scanner(_Decoding())  # type: ignore[arg-type]  # (see _Decoding)


def loads(data: bytes | str) -> Any:
    """``json.loads(data)`` for UTF-8 text: ValueError on anything that is not one JSON document."""
    text = data.decode() if isinstance(data, bytes | bytearray) else data
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(obj: Any, sort_keys: bool = False) -> str:
    """``json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys)``: compact, ASCII."""
    # markers (circular references are refused; a new dict each time, as json's, since an error
    # leaves its entries behind), default, string encoder (ensure_ascii), indent, key and item
    # separators, sort_keys, skipkeys, allow_nan: json.dumps's arguments, in _json's order
    encoder = _json.make_encoder({}, _unserialisable, _json.encode_basestring_ascii, None, ":", ",", sort_keys,
                                 False, True)
    return "".join(encoder(obj, 0))

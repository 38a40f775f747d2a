"""A job's TresBind (``--tres-bind``, ``--gpu-bind``, ``scontrol update TresBind=``): the grammar Slurm's
controller checks at submission and update, ``gres/<name>:<binding>`` joined by ``+``.

The binding of a GPU is ``[verbose,]`` then ``closest``, ``map_gpu:<list>`` (``map:``), ``mask_gpu:<list>``
(``mask:``), ``none``, ``per_task:<n>`` or ``single:<n>``; of a shared GRES (``shard``, ``mps``) ``none`` or
``per_task:<n>``. Keywords match by prefix, as Slurm's. Map lists are decimal, mask lists hexadecimal
(``0x`` allowed), each entry optionally ``*<repeat>``. Slurm before 26.05 began checking ``map:`` and
``mask:`` lists four characters late (its issue 50893); the whole list is checked here, as Slurm does
since.
"""

from __future__ import annotations

import re

SHARED = ("shard", "mps")  # the shared GRES: GPUs in slices, bound per task or not at all
MAX_LEN = 1024  # Slurm's limit for the field (its _test_strlen)
LONG_MAX = 2**63 - 1  # strtol's bound, past which Slurm refuses a number

_NUMBER = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)?")


def _number_ok(text: str) -> bool:
    """A count as strtol(text, NULL, 0) reads it: trailing text is ignored; a negative one, or one
    past a long's range, refused."""
    match = _NUMBER.match(text)
    value = int(match.group(2), 0) if match and match.group(2) else 0
    return value < LONG_MAX and not (match and match.group(1) == "-" and value > 0)


def _list_ok(text: str, hex_digits: bool) -> bool:
    """Entries ``<value>[*<repeat>]``, as Slurm reads them: an empty value is 0, an empty repeat too."""
    digits = "0123456789abcdefABCDEF" if hex_digits else "0123456789"
    for entry in (e for e in text.split(",") if e):
        if hex_digits and entry.startswith("0x"):
            entry = entry[2:]
        value, _, repeat = entry.partition("*")
        if any(c not in digits for c in value) or any(c not in "0123456789" for c in repeat):
            return False
        if int(value or "0", 16 if hex_digits else 10) >= LONG_MAX or int(repeat or "0") >= LONG_MAX:
            return False
    return True


def _gpu_binding_ok(spec: str) -> bool:
    lower = spec.lower()
    if lower.startswith("verbose,"):
        spec, lower = spec[8:], lower[8:]
    if lower.startswith(("closest", "none")):
        return True
    for prefix, hex_digits in (("map_gpu:", False), ("map:", False), ("mask_gpu:", True), ("mask:", True)):
        if lower.startswith(prefix):
            return _list_ok(spec[len(prefix):], hex_digits)
    for prefix in ("per_task:", "single:"):
        if lower.startswith(prefix):
            return _number_ok(spec[len(prefix):])
    return False


def _shared_binding_ok(spec: str) -> bool:
    lower = spec.lower().removeprefix("verbose,")
    if lower.startswith("none"):
        return True
    return lower.startswith("per_task:") and _number_ok(lower[9:])


def valid(text: str) -> bool:
    """Whether ``text`` is a TresBind Slurm's controller takes (the empty one clears it)."""
    if len(text) > MAX_LEN:
        return False
    for part in (p for p in text.split("+") if p):
        name, sep, spec = part.partition(":")
        if not sep or not name.startswith("gres/"):
            return False
        ok = _shared_binding_ok(spec) if name[5:] in SHARED else _gpu_binding_ok(spec)
        if not ok:
            return False
    return True

"""A node count as Slurm's commands and slurmrestd read it (-N/--nodes): ``N``, ``MIN-MAX``,
``-MAX`` (at least one) and ``MIN-``, each number with an optional k or m (times 1024, 1024²);
Slurm's words when it is none of them. Lists of sizes (``1,4,8``) are refused: a job of one of
several sizes is not supported."""

from __future__ import annotations

INT_MAX = 2**31 - 1


class NodeCountError(ValueError):
    pass


def _number(text: str) -> int | None:
    """Slurm's str_to_nodes: digits with an optional k/m; None where nothing is given."""
    text = text.strip()
    if not text:
        return None
    digits = len(text) - len(text.lstrip("0123456789"))
    if not digits:
        raise NodeCountError(f'"{text}" is not a valid node count')
    value, rest = int(text[:digits]), text[digits:].strip()
    for suffix, factor in (("k", 1024), ("m", 1024 * 1024)):
        if rest[:1].lower() == suffix:
            value, rest = value * factor, rest[1:].strip()
    if rest or value > INT_MAX:
        raise NodeCountError(f'"{text}" is not a valid node count')
    return value


def parse(text: str) -> tuple[int, int]:
    """(minimum, maximum) nodes; the maximum is 0 where the count names none beyond the minimum."""
    text = text.strip()
    if "," in text or ":" in text:
        raise NodeCountError(f'"{text}" is not a valid node count: lists of job sizes are not supported')
    first, dash, second = text.partition("-")
    low = _number(first)
    if not dash:
        if low is None:
            raise NodeCountError(f'"{text}" is not a valid node count')
        return low, 0
    high = _number(second) if second.strip() else None
    low = 1 if low is None else low
    if high is None:
        raise NodeCountError(f"Maximum node count -1 is less than minimum node count {low}")
    if high < low:
        raise NodeCountError(f"Maximum node count {high} is less than minimum node count {low}")
    return low, high

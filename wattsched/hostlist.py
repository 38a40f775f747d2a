"""Hostlist expressions (``leaf[1000-1255]``), through ClusterShell's NodeSet."""

from __future__ import annotations

from collections.abc import Iterable


class HostlistError(ValueError):
    """A hostlist expression that cannot be parsed."""


MAX_NAMES = 1 << 20  # no hostlist names more nodes than this, whatever the caller's own bound
MAX_LENGTH = 65536  # characters of an expression


def count(expression: str) -> int:
    """How many names an expression would give, from its ranges alone (nothing is expanded); an
    upper bound where ranges overlap. Raises HostlistError for what is not a hostlist.

    Written here rather than asked of ClusterShell because its NodeSet holds every index: parsing
    ``node[1-3000000]`` took it 3.5 s on the development VM, before any bound could be checked."""
    if len(expression) > MAX_LENGTH:
        raise HostlistError(f"hostlist expression of {len(expression)} characters is too long")
    total, depth, product, group = 0, 0, 1, ""
    for char in expression + ",":
        if char == "[":
            depth, group = depth + 1, ""
            if depth > 1:
                raise HostlistError(f"invalid hostlist expression '{expression[:80]}': nested brackets")
        elif char == "]":
            if depth != 1:
                raise HostlistError(f"invalid hostlist expression '{expression[:80]}': unbalanced brackets")
            depth -= 1
            product *= _range_count(group, expression)
        elif depth:
            group += char
        elif char == ",":
            total, product = total + product, 1
    if depth:
        raise HostlistError(f"invalid hostlist expression '{expression[:80]}': unbalanced brackets")
    return total


def _range_count(group: str, expression: str) -> int:
    found = 0
    for item in group.split(","):
        bounds, _, step_s = item.partition("/")
        first, _, last = bounds.partition("-")
        try:
            low, high, step = int(first), int(last or first), int(step_s or 1)
        except ValueError as exc:
            raise HostlistError(f"invalid hostlist expression '{expression[:80]}': bad range '{item}'") from exc
        if high < low or step < 1:
            raise HostlistError(f"invalid hostlist expression '{expression[:80]}': bad range '{item}'")
        found += (high - low) // step + 1
    return found


def expand(expression: str, limit: int = MAX_NAMES) -> list[str]:
    """Return the node names of a hostlist expression, in NodeSet's (natural) order; one that would
    name more than ``limit`` nodes is refused before anything is expanded."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

    if not expression or expression in ("(null)", "None"):
        return []
    size = count(expression)
    if size > min(limit, MAX_NAMES):
        raise HostlistError(f"hostlist expression names {size} nodes, more than the {min(limit, MAX_NAMES)} allowed")
    try:
        return list(NodeSet(expression))
    except (NodeSetParseError, RangeSetParseError) as exc:
        raise HostlistError(f"invalid hostlist expression '{expression}': {exc}") from exc


def compress(names: Iterable[str]) -> str:
    """Return the compact hostlist expression for node names (``node[1-3,7]``)."""
    from ClusterShell.NodeSet import NodeSet

    names = list(names)
    if not names:
        return ""
    return str(NodeSet.fromlist(names))

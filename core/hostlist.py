"""Hostlist expressions (``leaf[1000-1255]``), through ClusterShell's NodeSet."""

from __future__ import annotations

from collections.abc import Iterable


class HostlistError(ValueError):
    """A hostlist expression that cannot be parsed."""


def expand(expression: str) -> list[str]:
    """Return the node names of a hostlist expression, in NodeSet's (natural) order."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

    if not expression or expression in ("(null)", "None"):
        return []
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


def natural_key(name: str) -> tuple:
    """Sort key that orders ``node2`` before ``node10``, as hostlists do."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1, tail)

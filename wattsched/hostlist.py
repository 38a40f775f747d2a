"""Hostlist expressions (``leaf[1000-1255]``), through ClusterShell's NodeSet.

The names clusters use (a prefix, one number, maybe a suffix: ``node017``, ``gpu[01-08]-ib``) are
expanded and folded here, with NodeSet's order and spelling (tests/core/test_hostlist.py compares the two):
importing ClusterShell costs a command ~40 ms on the project's 2-core VM, six times the rest of
sinfo's start-up. Anything else (several numbers in a name, steps, mixed zero-padding) goes to NodeSet.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the commands import this module (typing costs ~5 ms)
if TYPE_CHECKING:
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
    if not expression or expression in ("(null)", "None"):
        return []
    size = count(expression)
    if size > min(limit, MAX_NAMES):
        raise HostlistError(f"hostlist expression names {size} nodes, more than the {min(limit, MAX_NAMES)} allowed")
    simple = _simple_expand(expression)
    if simple is not None:
        return simple
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

    try:
        return list(NodeSet(expression))
    except (NodeSetParseError, RangeSetParseError, ValueError) as exc:  # ValueError: a number past int's digits
        raise HostlistError(f"invalid hostlist expression '{expression[:80]}': {exc}") from exc


def compress(names: Iterable[str]) -> str:
    """Return the compact hostlist expression for node names (``node[1-3,7]``)."""
    names = list(names)
    if not names:
        return ""
    patterns = _patterns(names)
    if patterns is not None:
        return ",".join(_folded(pattern, indexes) for pattern, indexes in patterns)
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(names))


# -- the simple names, as NodeSet reads and writes them ---------------------------------------------
# A name is a pattern (its text with its one number as %s; the name itself when it has none) and an
# index (that number as written, zeros included). NodeSet orders patterns as strings and each
# pattern's indexes by length, then value; it folds a run of consecutive values into a-b.

_DIGITS = frozenset("0123456789")
MAX_INDEX_DIGITS = 18  # a longer number is no node's: left to NodeSet, which refuses what int() cannot read


def _split(name: str) -> tuple[str, str] | None:
    """(pattern, index) of a name with at most one number; None for anything else."""
    first = next((i for i, char in enumerate(name) if char in _DIGITS), -1)
    if first < 0:
        return name, ""
    end = first
    while end < len(name) and name[end] in _DIGITS:
        end += 1
    rest = name[end:]
    if any(char in _DIGITS for char in rest) or "%" in name or end - first > MAX_INDEX_DIGITS:
        return None
    return f"{name[:first]}%s{rest}", name[first:end]


def _patterns(names: Iterable[str]) -> list[tuple[str, list[str]]] | None:
    """The names grouped by pattern, each pattern's indexes deduplicated and in NodeSet's order; None
    when a name is not simple or a pattern mixes zero-padded indexes with others of another length."""
    found: dict[str, set[str]] = {}
    for name in names:
        if not name or not name.isascii() or "," in name or "[" in name or "]" in name or not name.isprintable() \
                or " " in name:
            return None
        split = _split(name)
        if split is None:
            return None
        found.setdefault(split[0], set()).add(split[1])
    result = []
    for pattern in sorted(found):
        indexes = found[pattern]
        padded = any(len(index) > 1 and index[0] == "0" for index in indexes)
        if padded and len({len(index) for index in indexes}) > 1:
            return None
        result.append((pattern, sorted(indexes, key=lambda index: (len(index), int(index or 0)))))
    return result


def _folded(pattern: str, indexes: list[str]) -> str:
    """A pattern and its ordered indexes as NodeSet writes them: ``node[01-03,07]``, ``node7``, ``x``."""
    if indexes == [""]:
        return pattern
    if len(indexes) == 1:
        return pattern % indexes[0]
    runs: list[list[str]] = []
    for index in indexes:
        if runs and int(index) == int(runs[-1][-1]) + 1:
            runs[-1][1:] = [index]
        else:
            runs.append([index])
    return pattern % f"[{','.join('-'.join(run) for run in runs)}]"


def _simple_expand(expression: str) -> list[str] | None:
    """The names of an expression whose items each have at most one bracket of plain ranges (``a-b``,
    no step) and no number outside it; None for anything else, which NodeSet reads."""
    names = []
    items, item, depth = [], "", 0  # the items: split at the commas outside brackets
    for char in expression:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += char
    items.append(item)
    for item in items:
        if not item:
            return None
        open_at = item.find("[")
        if open_at < 0:
            names.append(item)
            continue
        close_at = item.find("]")
        prefix, ranges, suffix = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
        if close_at < open_at or "[" in suffix or "]" in suffix or any(c in _DIGITS for c in prefix + suffix):
            return None
        for part in ranges.split(","):
            first, dash, last = part.partition("-")
            if not first.isdigit() or not first.isascii() or (dash and (not last.isdigit() or not last.isascii())):
                return None
            last = last if dash else first
            width = len(first) if first[0] == "0" and len(first) > 1 else 0
            if int(last) < int(first) or (width and len(last) != width) or (not width and last[0] == "0"
                                                                          and len(last) > 1):
                return None
            names.extend(f"{prefix}{value:0{width}d}{suffix}" for value in range(int(first), int(last) + 1))
    patterns = _patterns(names)
    if patterns is None:
        return None
    return [pattern % index if index else pattern for pattern, indexes in patterns for index in indexes]

"""Slurm's column formats: ``%[.][size]X`` format strings and fixed-width tables. Every value is
printed with its control characters escaped (wattsched.usertext.printable): a user's job name or
path can neither forge a line nor drive the terminal of whoever lists it."""

from __future__ import annotations

from wattsched.usertext import printable

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_NAME = frozenset("abcdefghijklmnopqrstuvwxyz_")


class Column:
    """A %-code with its width (None: as wide as its value) and side (right: ``%.``). A plain class,
    since importing dataclasses or collections (a NamedTuple) costs every command milliseconds."""

    __slots__ = ("code", "right", "width")

    def __init__(self, code: str, width: int | None, right: bool) -> None:
        self.code, self.width, self.right = code, width, right

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Column) and (self.code, self.width, self.right) == (other.code, other.width,
                                                                                     other.right)

    def __repr__(self) -> str:
        return f"Column({self.code!r}, {self.width!r}, {self.right!r})"


def _column_at(fmt: str, pos: int) -> tuple[Column, int] | None:
    """The column ``%[.][width]X`` starting at ``fmt[pos]`` and the index after it, or None when none
    starts there. A code is one letter; a -O field with no %-code of its own (sinfo's GresUsed) is
    written ``%{name}`` by format_from_fields and nowhere else."""
    end = len(fmt)
    pos += 1
    right = pos < end and fmt[pos] == "."
    pos += right
    digits = pos
    while pos < end and fmt[pos].isascii() and fmt[pos].isdigit():
        pos += 1
    width = int(fmt[digits:pos]) if pos > digits else None
    if pos < end and fmt[pos] in _LETTERS:
        return Column(fmt[pos], width, right), pos + 1
    close = fmt.find("}", pos)
    if pos < end and fmt[pos] == "{" and close > pos + 1 and all(c in _NAME for c in fmt[pos + 1:close]):
        return Column(fmt[pos + 1:close], width, right), close + 1
    return None


def parse_format(fmt: str) -> list[str | Column]:
    """Split a format string into literal text and columns (``%.18i`` -> right-justified, width 18)."""
    parts: list[str | Column] = []
    literal = pos = 0
    while (pos := fmt.find("%", pos)) >= 0:
        found = _column_at(fmt, pos)
        if found is None:
            pos += 1
            continue
        if pos > literal:
            parts.append(fmt[literal:pos])
        parts.append(found[0])
        literal = pos = found[1]
    if literal < len(fmt):
        parts.append(fmt[literal:])
    return parts


def compile_row(parts: list[str | Column], value_of: Callable[[str], Callable[[Any], str]]) -> Callable[[Any], str]:
    """A function that renders one record; columns are looked up once, not per row (squeue: 10,000 rows)."""
    pieces: list[Callable[[Any], str]] = []
    for part in parts:
        pieces.append(_literal(part) if isinstance(part, str) else _cell(value_of(part.code), part.width, part.right))
    return lambda rec: "".join([piece(rec) for piece in pieces])


def render_rows(parts: list[str | Column], value_of: Callable[[str], Callable[[Any, Any], str] | None],
                records: list[Any], context: Any) -> list[str]:
    """Every record's line, as :func:`compile_row` renders it with :func:`bound` values, built a
    column at a time: a comprehension per column calls ``value(record, context)`` alone, where a row
    at a time adds three calls per cell (squeue -r: 100,000 rows of 8 cells)."""
    columns: list[list[str]] = []
    for part in parts:
        if isinstance(part, str):
            columns.append([part] * len(records))
            continue
        value = value_of(part.code) or _echo(part.code)
        cells = [v if v.isprintable() else printable(v) for v in [value(rec, context) for rec in records]]
        width = part.width
        if width is not None:
            cells = [v[:width].rjust(width) for v in cells] if part.right else [v[:width].ljust(width) for v in cells]
        columns.append(cells)
    return ["".join(cells) for cells in zip(*columns, strict=True)] if columns else [""] * len(records)


def _literal(text: str) -> Callable[[Any], str]:
    return lambda _rec: text


def _cell(raw: Callable[[Any], str], width: int | None, right: bool) -> Callable[[Any], str]:
    """One column of a row: its printable value, cut and padded to ``width`` when it has one."""
    if width is None:
        return lambda rec: printable(raw(rec))
    if right:
        return lambda rec: printable(raw(rec))[:width].rjust(width)
    return lambda rec: printable(raw(rec))[:width].ljust(width)


def bound(value: Callable[[Any, Any], str] | None, code: str, context: Any) -> Callable[[Any], str]:
    """A column's value function with its context (the time, the partition) bound; unknown codes echo."""
    value = value or _echo(code)
    return lambda rec: value(rec, context)


def _echo(code: str) -> Callable[[Any, Any], str]:
    """An unknown code's value: the code itself, as Slurm prints it."""
    return lambda _rec, _context: f"%{code}"


def render_header(parts: list[str | Column], titles: Mapping[str, str]) -> str:
    return compile_row(parts, lambda code: lambda _rec: titles.get(code, code.upper()))(None)


def format_table(rows: list[dict[str, Any]], fields: list[tuple[str, int]], parsable: str | None,
                 trailing: bool, header: bool, titles: Mapping[str, str] | None = None) -> list[str]:
    """sacct/sshare-style tables: right-justified columns (negative width: left), '+' on truncation,
    or delimiter-separated values for --parsable."""
    titles = titles or {}
    lines = []
    if parsable is not None:
        end = parsable if trailing else ""
        if header:
            lines.append(parsable.join(titles.get(name, name) for name, _ in fields) + end)
        lines.extend(parsable.join(printable(str(row.get(name, ""))) for name, _ in fields) + end for row in rows)
        return lines
    if header:
        lines.append(" ".join(_fixed(titles.get(name, name), width) for name, width in fields) + " ")
        lines.append(" ".join("-" * abs(width) for _, width in fields) + " ")
    for row in rows:
        lines.append(" ".join(_fixed(printable(str(row.get(name, ""))), width) for name, width in fields) + " ")
    return lines


def parse_fields(spec: str, widths: Mapping[str, int]) -> list[tuple[str, int]]:
    """``JobID,JobName%30,State`` (sacct --format, sshare -o, sacctmgr format=): known field names,
    any case, with an optional %width; the default width's sign (left/right) is kept."""
    lower = {name.lower(): name for name in widths}
    fields = []
    for item in spec.split(","):
        if not item:
            continue
        name, _, width = item.partition("%")
        canonical = lower.get(name.strip().lower())
        if canonical is None:
            raise ValueError(f'Invalid field requested: "{name}"')
        default = widths[canonical]
        size = int(width) if width.lstrip("-").isdigit() else default
        fields.append((canonical, -abs(size) if default < 0 else abs(size)))
    return fields


def field_table(rows: list[Any], spec: str, catalogue: Mapping[str, tuple[int, Callable[[Any], str]]],
                parsable: bool, parsable2: bool, header: bool) -> list[str]:
    """sshare/sacctmgr output: ``spec`` names fields of ``catalogue`` (width, value of a row);
    -p/-P give '|'-separated values (-p with a trailing '|')."""
    columns = parse_fields(spec, {name: width for name, (width, _value) in catalogue.items()})
    records = [{name: catalogue[name][1](row) for name, _ in columns} for row in rows]
    return format_table(records, columns, "|" if parsable or parsable2 else None, trailing=parsable, header=header)


def _fixed(value: str, width: int) -> str:
    size = abs(width)
    if len(value) > size:
        value = value[:size - 1] + "+"
    return value.ljust(size) if width < 0 else value.rjust(size)


def format_from_fields(spec: str, by_name: Mapping[str, str], kind: str) -> str:
    """-O/--Format ``Name[:[.]size],...`` (squeue, sinfo) as the equivalent %-format: a field's
    size defaults to 20 and a leading ``.`` right-justifies it, as in Slurm."""
    parts = []
    for item in spec.split(","):
        name, _, size = item.partition(":")
        code = by_name.get(name.strip().lower())
        if code is None:
            from wattsched.cli.common import CLIError

            raise CLIError(f"Invalid {kind} format specification: {name}")
        code = code if len(code) == 1 else f"{{{code}}}"
        parts.append(f"%{'.' if size.startswith('.') else ''}{size.lstrip('.') or '20'}{code}")
    return "".join(parts)


def num_unit(value: float | None, units: str = " KMGTP") -> str:
    """A number as Slurm's convert_num_unit2 prints it (divisor 1000): 850, 12K, 1.25M; ``units``
    starts at the value's own unit (kHz frequencies start at K: 2400000 -> 2.40G)."""
    number = float(value or 0)
    index = 0
    while number >= 1000 and index < len(units) - 1:
        number, index = number / 1000, index + 1
    unit = units[index].strip()
    return f"{number:.0f}{unit}" if number == int(number) else f"{number:.2f}{unit}"

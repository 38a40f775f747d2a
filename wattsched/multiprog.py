"""srun --multi-prog: Slurm's MPMD configuration file, checked by srun and read per task by the agent.

Each line gives task ranks and the program they run with its arguments::

    # ranks   program and arguments
    0         ./controller --workers 3
    1-3       ./worker --id %o --rank %t
    *         ./idle

Ranks are numbers and ranges joined by commas, or ``*`` for every task not named before it (the
last line). The first line naming a rank gives its command. In arguments ``%t`` stands for the
task's rank and ``%o`` for its offset within the line's ranks; single quotes keep what they enclose;
a backslash keeps the next character, and one at the end of a line continues it on the next. Lines
whose first non-blank is ``#`` are comments. Arguments given to srun after the file name are
appended to every task's. (Slurm's srun/multi_prog.c and slurmstepd/multi_prog.c, their grammar.)
"""

from __future__ import annotations

MAX_BYTES = 1 << 20  # a configuration file's size, checked before it is read through
MAX_ARGC = 128  # arguments per task, as Slurm's stepd (beyond: dropped, as there)


class MultiProgError(ValueError):
    """An invalid configuration: Slurm's words, one message per line."""


def _lines(text: str) -> list[tuple[int, str]]:
    """The lines that start an entry, numbered from 1: neither blank, nor a comment, nor the
    continuation of a line ending in a backslash."""
    out: list[tuple[int, str]] = []
    continued = False
    for number, line in enumerate(text.split("\n"), 1):
        was_continued, continued = continued, line.endswith("\\")
        if was_continued:
            continue
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            out.append((number, stripped))
    return out


def _ranges(spec: str) -> list[tuple[int, int]]:
    """A line's ranks (``*`` excluded) as (low, high) ranges in their order."""
    ranges = []
    for part in spec.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise MultiProgError(f"Invalid task range specification ({part})")
        ranges.append((int(low), int(high) if dash else int(low)))
    return ranges


def validate(text: str, ntasks: int | None, path: str) -> int:
    """The step's task count once ``text`` (the file at ``path``) is checked: every task has exactly
    one program. Without ``ntasks`` (no -n) the count starts at one and grows to the ranks named
    until a ``*`` line, as Slurm's srun does."""
    covered: set[int] = set()
    count, grows, starred = ntasks or 1, ntasks is None, False
    for number, line in _lines(text):
        fields = line.split(None, 1)
        if len(fields) < 2:
            raise MultiProgError(f"Line {number} of configuration file {path} invalid")
        try:
            if starred and fields[0] != "*":
                raise MultiProgError("Task range specification with asterisk must be last")
            starred = starred or fields[0] == "*"
            count, grows = _cover(fields[0], count, grows, covered)
        except MultiProgError as exc:
            raise MultiProgError(f"{exc}\nLine {number} of configuration file {path} invalid") from None
    for rank in range(count):
        if rank not in covered:
            raise MultiProgError(f"Configuration file {path} invalid, no record for task id {rank}")
    return count


def _cover(spec: str, count: int, grows: bool, covered: set[int]) -> tuple[int, bool]:
    """Mark one line's ranks in ``covered``; the task count and whether it may still grow."""
    if spec == "*":  # every task not named yet; the count is settled
        covered.update(range(count))
        return count, False
    for low, high in _ranges(spec):
        if low > high:
            raise MultiProgError(f"Invalid task range, {low}-{high}")
        if high >= count:
            if not grows:
                raise MultiProgError(f"Invalid task id, {high} >= ntasks")
            count = high + 1
        for rank in range(low, high + 1):
            if rank in covered:
                raise MultiProgError(f"Duplicate record for task {rank}")
            covered.add(rank)
    return count, grows


def _offset(rank: int, spec: str) -> int | None:
    """The rank's offset within the line's ranks, or None where the line does not name it."""
    if spec == "*":
        return rank
    passed = 0
    for low, high in _ranges(spec):
        if low <= rank <= high:
            return passed + rank - low
        passed += high - low + 1
    return None


def task_argv(text: str, rank: int, extra: list[str]) -> list[str]:
    """The command task ``rank`` runs: its line's arguments, expanded, then ``extra``."""
    rows = text.split("\n")
    for number, line in _lines(text):
        spec, rest = [*line.split(None, 1), ""][:2]
        offset = _offset(rank, spec)
        if offset is None:
            continue
        argv = _arguments(rest, rows[number:], rank, offset)
        return [*argv, *extra][:MAX_ARGC - 1]
    raise MultiProgError(f"Program for task rank {rank} not specified.")


def _arguments(rest: str, following: list[str], rank: int, offset: int) -> list[str]:
    """Split a line's arguments as Slurm's stepd does: blanks separate, ``%t``/``%o`` expand, a
    backslash keeps the next character (or, last on its line, joins the next line), single quotes
    keep all they enclose."""
    argv: list[str] = []
    word: list[str] | None = None
    text, i, more = rest, 0, iter(following)
    while i < len(text):
        char = text[i]
        if char.isspace():
            if word is not None:
                argv.append("".join(word))
                word = None
            i += 1
            continue
        word = word if word is not None else []
        if char == "%":
            code = text[i + 1:i + 2]
            word.append(str(rank) if code == "t" else str(offset) if code == "o" else "")
            i += 2
        elif char == "\\" and i + 1 < len(text):
            word.append(text[i + 1])
            i += 2
        elif char == "\\":
            text, i = next(more, ""), 0
        elif char == "'":
            close = text.find("'", i + 1)
            quoted = text[i + 1:] if close < 0 else text[i + 1:close]
            while close < 0 and quoted.endswith("\\"):  # the quote goes on on the next line
                line = next(more, None)
                if line is None:
                    break
                text, close = line, line.find("'")
                quoted = quoted[:-1] + (line if close < 0 else line[:close])
            if close < 0:
                raise MultiProgError("Program arguments specification format invalid")
            word.append(quoted)
            i = close + 1
        else:
            word.append(char)
            i += 1
    if word is not None:
        argv.append("".join(word))
    return argv

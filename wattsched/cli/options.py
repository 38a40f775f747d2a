"""Command-line options the way Slurm's commands read them: getopt_long, driven by one table per command.

The grammar is glibc's getopt_long, which every Slurm command uses: a long option may be
given by any unique prefix (``--job`` for ``--jobs``) or by its full name even when it is the
prefix of another; ``--opt=value`` and ``--opt value`` for a required argument, only
``--opt=value`` for an optional one; short options bundle (``-vvl``, ``-N2``, ``-n 4``);
``--`` ends the options. Commands that run a program (sbatch, srun, salloc) stop at the first
argument that is not an option, as Slurm asks getopt with a leading ``+``; the others permute,
so options may follow their operands. Errors use glibc's words and Slurm's ``Try "prog --help"``.

Why not the standard library: ``getopt`` (before Python 3.13) has no optional arguments and
``argparse`` takes ``--opt value`` for an optional argument and gives its own messages and help
layout; both would change what a Slurm user's command line means.

Each option is declared once, with what wattsched does with it: acted on, accepted and ignored
(as a site without that plugin ignores it; ``-v`` says so), or refused with a reason (where
ignoring it would change a result the user relies on).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, NoReturn

NO, REQ, OPT = 0, 1, 2  # argument: none, required, optional (as getopt_long's has_arg)

IGNORED = "ignored"


class Opt:
    """One option: its letters, whether it takes an argument, where its value goes, and its help.

    ``kind``: ``str`` (the last value wins), ``int`` (checked as Slurm's "Invalid numeric value"),
    ``list`` (values accumulate), ``count`` (each use adds one), ``flag`` (stores ``const``),
    ``help``, ``usage`` or ``version``. ``status``: ``None`` when wattsched acts on it,
    ``IGNORED``, or the reason it is refused.
    """

    __slots__ = ("arg", "const", "dest", "help", "kind", "long", "metavar", "short", "status")

    def __init__(self, short: str | None, long: str | None, arg: int = NO, help: str = "", *,
                 dest: str | None = None, metavar: str | None = None, kind: str | None = None,
                 const: Any = True, status: str | None = None):
        self.short, self.long, self.arg, self.help = short, long, arg, help
        self.dest = dest or (long or short or "").replace("-", "_")
        self.metavar = metavar or ("value" if arg else "")
        self.kind = kind or ("str" if arg else "flag")
        self.const, self.status = const, status

    @property
    def shown(self) -> str:
        """The option as help prints it: ``-N, --nodes=N``."""
        value = "" if not self.arg else (f"[={self.metavar}]" if self.arg == OPT else f"={self.metavar}")
        if self.long and self.short:
            return f"-{self.short}, --{self.long}{value}"
        if self.long:
            return f"    --{self.long}{value}"
        return f"-{self.short}" + (f" {self.metavar}" if self.arg else "")


def ignored(short: str | None, long: str, arg: int = REQ, help: str = "") -> Opt:
    """An option Slurm has that wattsched accepts and ignores (noted under -v)."""
    return Opt(short, long, arg, help or "accepted, no effect here", status=IGNORED, kind="str" if arg else "flag")


def refused(short: str | None, long: str, arg: int, reason: str) -> Opt:
    """An option wattsched cannot honour and must not ignore: using it is an error saying why."""
    return Opt(short, long, arg, reason, status=reason, kind="str" if arg else "flag")


def standard(help_letter: str | None = "h") -> tuple[Opt, ...]:
    """--help, --usage and -V/--version; squeue, sinfo and sacct give -h another meaning."""
    return (Opt(help_letter, "help", NO, "show this help message", kind="help"),
            Opt(None, "usage", NO, "display brief usage message", kind="usage"),
            Opt("V", "version", NO, "output version information and exit", kind="version"))


STANDARD = standard()


# The order of Slurm's option table (common_options in src/common/slurm_opt.c, 23.11), in which
# sbatch, salloc and srun -v list the options set ("defined options"); by long name.
SLURM_ORDER = (
    "accel-bind", "account", "acctg-freq", "array", "batch", "bcast", "bcast-exclude", "begin", "bell", "bb", "bbf",
    "cluster-constraint", "chdir", "cluster", "clusters", "comment", "compress", "container", "container-id",
    "context", "contiguous", "constraint", "core-spec", "cores-per-socket", "cpu-bind", "cpu_bind", "cpu-freq",
    "cpus-per-gpu", "cpus-per-task", "deadline", "debugger-test", "delay-boot", "environment", "dependency",
    "disable-status", "distribution", "epilog", "error", "exact", "exclude", "exclusive", "export",
    "external-launcher", "extra", "extra-node-info", "get-user-env", "gid", "gpu-bind", "gpu-freq", "gpus",
    "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help", "het-group", "hint", "hold",
    "ignore-pbs", "immediate", "input", "interactive", "jobid", "job-name", "kill-command", "kill-on-bad-exit",
    "kill-on-invalid-dep", "label", "licenses", "mail-type", "mail-user", "threads", "mcs-label", "mem", "mem-bind",
    "mem-per-cpu", "mem-per-gpu", "mincpus", "mpi", "msg-timeout", "multi-prog", "network", "nice", "no-allocate",
    "no-bell", "no-kill", "no-shell", "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "ntasks-per-tres", "open-mode", "output", "overcommit",
    "overlap", "oversubscribe", "pack-group", "parsable", "partition", "power", "prefer", "preserve-env", "priority",
    "profile", "prolog", "propagate", "pty", "qos", "quiet", "quit-on-interrupt", "reboot", "relative", "requeue",
    "reservation", "resv-ports", "send-libs", "signal", "slurmd-debug", "sockets-per-node", "spread-job",
    "switches", "task-epilog", "task-prolog", "tasks-per-node", "test-only", "thread-spec", "threads-per-core",
    "time", "time-min", "tmp", "treewidth", "tres-bind", "tres-per-task", "uid", "unbuffered", "use-min-nodes",
    "verbose", "version", "umask", "usage", "wait", "wait-all-nodes", "wait-for-srun", "wckey", "whole", "wrap",
    "x11",
)


class Command:
    """A command's option table, usage line and operand rule."""

    def __init__(self, prog: str, usage: str, options: Iterable[Opt | str], *, stop_at_operand: bool = False,
                 operands: bool = True, epilog: str = "", help_usage: str | None = None,
                 operand_usage: str | None = None, option_list: bool = False):
        """``usage``: what follows ``Usage: prog`` for --usage and atop --help; ``help_usage``: atop
        --help instead (Slurm's ``[OPTIONS]``); ``operand_usage``: --usage lists every option in
        brackets, then this (``executable [args...]``), as sbatch, salloc and srun do;
        ``option_list``: --help in the layout of Slurm's database commands (sacct, sstat,
        sacctmgr): ``prog [<OPTION>]``, then each option on a line of its own."""
        self.prog, self.usage, self.epilog = prog, usage, epilog
        self.help_usage, self.operand_usage, self.option_list = help_usage, operand_usage, option_list
        self.takes_operands = operands  # False: an operand is an error
        self.items = list(options)  # strings are section titles in --help
        self.options = [o for o in self.items if isinstance(o, Opt)]
        self.stop_at_operand = stop_at_operand
        self.by_short = {o.short: o for o in self.options if o.short}
        self.by_long = {o.long: o for o in self.options if o.long}

    # -- parsing ------------------------------------------------------------------------------
    def parse(self, argv: list[str], *, context: str = "") -> tuple[dict[str, Any], list[str]]:
        """The options given (by dest; only those given) and the operands, or exit 2 as Slurm does.

        ``context`` names where the arguments came from in messages (a script's #SBATCH line).
        """
        values: dict[str, Any] = {}
        operands: list[str] = []
        noted: list[Opt] = []
        index = 0
        while index < len(argv):
            token = argv[index]
            index += 1
            if token == "--":
                operands.extend(argv[index:])
                break
            if token.startswith("--"):
                name, eq, attached = token[2:].partition("=")
                opt = self._long(name, context)
                if opt.arg == NO and eq:
                    self.fail(f"option '--{opt.long}' doesn't allow an argument", context)
                value: str | None = attached if eq else None
                if opt.arg == REQ and not eq:
                    if index >= len(argv):
                        self.fail(f"option '--{opt.long}' requires an argument", context)
                    value = argv[index]
                    index += 1
                self._store(opt, value, values, noted, context)
            elif token.startswith("-") and token != "-":
                pos = 1
                while pos < len(token):
                    letter = token[pos]
                    pos += 1
                    opt = self.by_short.get(letter) or self.fail(f"invalid option -- '{letter}'", context)
                    value = None
                    if opt.arg != NO and pos < len(token):
                        value, pos = token[pos:], len(token)
                    elif opt.arg == REQ:
                        if index >= len(argv):
                            self.fail(f"option requires an argument -- '{letter}'", context)
                        value = argv[index]
                        index += 1
                    self._store(opt, value, values, noted, context)
            else:
                operands.append(token)
                if self.stop_at_operand:
                    operands.extend(argv[index:])
                    break
        if operands and not self.takes_operands:
            self.fail(f"unrecognized argument '{operands[0]}'", context)
        if noted and values.get("verbose"):
            for opt in noted:
                sys.stderr.write(f"{self.prog}: option --{opt.long or opt.short} is not supported by this "
                                 "site and is ignored\n")
        return values, operands

    def from_environment(self, variables: Iterable[tuple[str, str]],
                         environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The options Slurm's input environment variables give (``variables``: each variable and
        the option it stands for, ``-A`` or ``--acctg-freq``, in Slurm's order: a later one wins),
        read as that option's argument; a flag's variable sets it whatever its value."""
        found = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        noted: list[Opt] = []
        for variable, option in variables:
            value = found.get(variable)
            if value is None:
                continue
            opt = self.by_short[option[1]] if len(option) == 2 else self.by_long[option[2:]]
            self._store(opt, value if opt.arg != NO else None, values, noted, "")
        return values

    def defined_options(self, values: dict[str, Any]) -> str:
        """What -v prints first, as Slurm's sbatch, salloc and srun do: the options set, in Slurm's
        table's order, ``name : value`` (a flag's value ``set``)."""
        lines = ["defined options", "-------------------- --------------------"]
        shown: set[str] = set()
        for name in SLURM_ORDER:
            opt = self.by_long.get(name)
            if opt is None or opt.dest not in values or opt.dest in shown or opt.status is not None:
                continue
            value = values[opt.dest]
            if opt.kind == "flag" and opt.arg == NO and value != opt.const:
                continue  # the other name of the same setting (--requeue, --no-requeue)
            shown.add(opt.dest)
            lines.append(f"{name:<20}: {'set' if opt.kind == 'flag' and opt.arg == NO else value}")
        lines += ["-------------------- --------------------", "end of defined options"]
        return "".join(f"{self.prog}: {line}\n" for line in lines)

    def _long(self, name: str, context: str) -> Opt:
        exact = self.by_long.get(name)
        if exact is not None:
            return exact
        matches = [o for long, o in self.by_long.items() if long.startswith(name)] if name else []
        # as glibc: several names for one option (same destination and argument) are not ambiguous
        if matches and all((m.dest, m.arg, m.kind, m.const) == (matches[0].dest, matches[0].arg, matches[0].kind,
                                                                 matches[0].const) for m in matches):
            return matches[0]
        if matches:
            names = " ".join(f"'--{m.long}'" for m in matches)
            self.fail(f"option '--{name}' is ambiguous; possibilities: {names}", context)
        self.fail(f"unrecognized option '--{name}'", context)

    def _store(self, opt: Opt, value: str | None, values: dict[str, Any], noted: list[Opt], context: str) -> None:
        kind = opt.kind
        if kind == "help":
            sys.stdout.write(self.help_text())
            raise SystemExit(0)
        if kind == "usage":
            sys.stdout.write(self.usage_text())
            raise SystemExit(0)
        if kind == "version":
            from wattsched import version_line

            sys.stdout.write(version_line() + "\n")
            raise SystemExit(0)
        if opt.status == IGNORED:
            noted.append(opt)
            return
        if opt.status is not None:
            self.fail(f"--{opt.long or opt.short}: {opt.status}", context, usage=False)
        if kind == "count":
            values[opt.dest] = values.get(opt.dest, 0) + 1
        elif kind == "flag":
            values[opt.dest] = opt.const if value is None else value
        elif kind == "list":
            values.setdefault(opt.dest, []).append(value if value is not None else opt.const)
        elif kind == "int":
            values[opt.dest] = _integer(value, opt, self, context) if value is not None else opt.const
        else:
            values[opt.dest] = value if value is not None else opt.const

    def fail(self, message: str, context: str = "", usage: bool = True) -> NoReturn:
        if context:  # a script's directive: say so, as sbatch's "Invalid directive found in batch script"
            sys.stderr.write(f"{self.prog}: error: Invalid {context} found in batch script: {message}\n")
        elif usage:  # glibc's getopt message, then Slurm's hint
            sys.stderr.write(f'{self.prog}: {message}\nTry "{self.prog} --help" for more information\n')
        else:
            sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(1)

    # -- help ---------------------------------------------------------------------------------
    def usage_text(self, usage: str | None = None) -> str:
        """``Usage: prog [...]`` wrapped at 80 columns under its first bracket, as Slurm lays it out."""
        if usage is None:
            usage = self.usage if self.operand_usage is None else " ".join(
                [_bracketed(o) for o in self.options if o.status != IGNORED and o.kind not in ("help", "usage")
                 and (o.status is None or o.kind == "version")] + [self.operand_usage])
        head = f"Usage: {self.prog} "
        lines, line = [], head
        for word in usage.replace("] [", "]\0[").split("\0"):
            if len(line) + len(word) > 79 and line.strip() != head.strip():
                lines.append(line.rstrip())
                line = " " * len(head)
            line += word + " "
        lines.append(line.rstrip())
        return "\n".join(lines) + "\n"

    def help_text(self) -> str:
        if self.option_list:
            lines = [f"{self.prog} {self.help_usage or '[<OPTION>]'}", "    Valid <OPTION> values are:"]
        else:
            lines = [self.usage_text(self.help_usage or self.usage).rstrip(), ""]
        unsupported = []
        for item in self.items:
            if isinstance(item, str):
                lines.extend(["", item])
            elif item.status is None or item.kind in ("help", "usage", "version"):
                lines.append(_listed(item) if self.option_list else _help_line(item))
            else:
                unsupported.append(item)
        for title, kept in (("Accepted for compatibility, no effect here:", IGNORED),
                            ("Refused here (wattsched cannot honour them):", None)):
            chosen = [o for o in unsupported if (o.status == IGNORED) == (kept == IGNORED)]
            if chosen:
                lines.extend(["", title])
                lines.extend(_help_line(o, o.help if kept is None else "") for o in chosen)
        if self.epilog:
            lines.extend(["", self.epilog])
        return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


class QuietCommand(Command):
    """getopt_long with its own messages off, as Slurm's daemons read their options (opterr = 0): a
    bad option prints the program's usage message (``text``) alone, on standard error, exit 1."""

    def __init__(self, prog: str, usage: str, text: str, options: Iterable[Opt | str], **kwargs: Any):
        super().__init__(prog, usage, options, **kwargs)
        self.text = text

    def fail(self, message: str, context: str = "", usage: bool = True) -> NoReturn:
        sys.stderr.write(self.text)
        raise SystemExit(1)


def _bracketed(opt: Opt) -> str:
    """An option as --usage lists it: ``[-N nnodes]``, ``[--begin=time]``, ``[-l]``."""
    if opt.short:
        return f"[-{opt.short}{' ' + opt.metavar if opt.arg == REQ else ''}]"
    return f"[--{opt.long}{'=' + opt.metavar if opt.arg == REQ else ''}]"


def _listed(opt: Opt) -> str:
    """An option in the database commands' --help: ``     -A, --accounts:`` and its text below."""
    names = ", ".join(n for n in (f"-{opt.short}" if opt.short else "", f"--{opt.long}" if opt.long else "") if n)
    return f"     {names}:\n\t           {opt.help}" if opt.help else f"     {names}:"


def _help_line(opt: Opt, text: str | None = None) -> str:
    shown = opt.shown
    text = opt.help if text is None else text
    if not text:
        return f"  {shown}"
    # Slurm's help puts descriptions at column 30; a longer option pushes it to the next line
    return f"  {shown:<28}{text}" if len(shown) < 28 else f"  {shown}\n  {'':<28}{text}"


def _integer(value: str, opt: Opt, command: Command, context: str) -> int:
    text = value.strip()
    if not (text.lstrip("+-").isdigit()):
        command.fail(f"Invalid numeric value \"{value}\" for --{opt.long or opt.short}.", context, usage=False)
    number = int(text)
    if not -(2**31) <= number < 2**31:
        command.fail(f"Numeric argument ({value}) too big for --{opt.long or opt.short}.", context, usage=False)
    return number


def run(prog: str, body: Callable[[], int | None], message: Callable[[Any], str] = str) -> NoReturn:
    """Run a command's body and exit with its code; a CLIError becomes Slurm's ``prog: error: ...``
    (worded by ``message``) and exit 1.

    The process ends with ``os._exit`` once its output is flushed: a command owns no resource the
    interpreter's shutdown would release (no atexit hook, no thread, no open file but its streams),
    and that shutdown (collecting every module) is a quarter of squeue's time on an empty cluster."""
    from wattsched.cli.common import CLIError, missing_part

    code = 1
    try:
        try:
            code = body() or 0
        finally:
            sys.stdout.flush()  # here, where a reader gone away is handled below, not at exit
    except CLIError as exc:
        sys.stderr.write(f"{prog}: error: {message(exc)}\n")
    except ModuleNotFoundError as exc:
        sys.stderr.write(f"{prog}: error: {missing_part(prog, exc)}\n")
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:  # a command's own exit (--help, a usage error, die())
        code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
    except BrokenPipeError:
        # the reader went away (squeue | head -1): end as Slurm's C commands do, quietly, by SIGPIPE
        # (Python ignores the signal and would print a traceback, then fail again flushing at exit)
        import signal

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)

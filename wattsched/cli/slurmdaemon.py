"""What Slurm's daemon programs (slurmctld, slurmd) share here: their option grammar and usage
message, and how they start: the configuration checked in the foreground (its error printed, exit
1), then, unless -D, in the background; the pid file; the nice value (-n); -s; logs one level
louder per -v; --systemd (foreground, READY=1 to systemd once serving)."""

from __future__ import annotations

import os
import sys

from wattsched.cli.common import CLIError, config_file
from wattsched.cli.options import NO, REQ, Opt, QuietCommand

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from wattsched.config import Config
    from wattsched.service.daemonstart import Start


class DaemonCommand(QuietCommand):
    """slurmctld's and slurmd's options: their own, and those both take (-D foreground, -f file,
    -L log file, -s, -n, -v, -V, --systemd; -h prints the usage message too, on standard error)."""

    def __init__(self, prog: str, usage: str, options: list[Opt]):
        super().__init__(prog, "[OPTIONS]", usage, [*options, Opt("h", None, NO, dest="help"),
                                                    Opt("D", None, NO, dest="foreground", const=True),
                                                    Opt("f", None, REQ, dest="file"),
                                                    Opt("L", None, REQ, dest="log_file"),
                                                    Opt("s", None, NO, dest="setwd"),
                                                    Opt("n", None, REQ, dest="nice"),
                                                    Opt("v", None, NO, kind="count", dest="verbose"),
                                                    Opt("V", "version", NO, kind="version"),
                                                    Opt(None, "systemd", NO)], operands=False)


def start(command: DaemonCommand, argv: list[str],
          files: Callable[[Config, dict[str, Any]], tuple[str, str]],
          run: Callable[[str, Config, dict[str, Any], Start], None]) -> int:
    """Parse ``argv``, check the configuration, start as asked and ``run`` the daemon. ``files``:
    the configuration's pid file and the folder -s moves to (the log file's, else the spool's)."""
    from wattsched import config as config_mod
    from wattsched.service.daemonstart import Start, background, stop_previous, write_pid_file

    opts, _ = command.parse(argv)
    if opts.get("help"):
        sys.stderr.write(command.text)
        return 0
    prog = command.prog
    systemd = bool(opts.get("systemd"))
    if systemd and not os.environ.get("NOTIFY_SOCKET"):
        sys.stderr.write(f"{prog}: fatal: Missing NOTIFY_SOCKET.\n")
        return 1
    try:
        path = config_file(opts.get("file"))
        config = config_mod.load(path)
    except (CLIError, config_mod.ConfigError) as exc:
        sys.stderr.write(f"{prog}: fatal: {exc}\n")
        return 1
    if "nice" in opts:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, int(opts["nice"]))
        except ValueError:
            sys.stderr.write(f"{prog}: error: Invalid option for -n option (nice value), ignored\n")
        except OSError as exc:
            sys.stderr.write(f"{prog}: error: Unable to reset {prog} priority: {exc.strerror}\n")
    foreground = systemd or opts.get("foreground", False)
    pid_file, workdir = files(config, opts)
    if not foreground:
        background()
    stop_previous(pid_file)  # as Slurm's: the daemon of the same pid file, still running, stops first
    try:
        write_pid_file(pid_file)
    except OSError as exc:  # as Slurm's: said, and the daemon runs on
        sys.stderr.write(f"{prog}: error: Unable to open pidfile `{pid_file}': {exc.strerror}\n")
    if opts.get("setwd") or systemd:
        os.chdir(workdir)
    try:
        run(path, config, opts, Start(log_file=opts.get("log_file", ""), verbose=opts.get("verbose", 0),
                                      syslog=not foreground, clear_state=bool(opts.get("clear")), notify=systemd))
    except (ValueError, RuntimeError, OSError) as exc:  # configuration, start-up: in the background, only
        import logging  # the log hears it (with the traceback, should it be a fault of ours)

        logging.getLogger("wattsched").critical("%s cannot start: %s", prog, exc, exc_info=True)
        sys.stderr.write(f"{prog}: fatal: {exc}\n")
        return 1
    return 0

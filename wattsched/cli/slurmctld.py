"""slurmctld: the controller under Slurm's program name and options (slurmctld(8)), as an
administrator's habits, init scripts and systemd units, and Slurm's own test suite, start it.

It runs the same controller as ``wattsched controller``: in the background unless -D, with its pid
in SlurmctldPidFile, logging to -L's file or SlurmctldLogFile (standard error in the foreground,
else syslog, where neither is set). -c starts without the saved jobs and reservations (once this
controller is in charge); -r and -R (recover, the default) and -i (ignore errors in Slurm's state
files: the state here is a transactional database, which has none to ignore) are accepted.
"""

from __future__ import annotations

import os
import sys

from wattsched.cli.options import NO, Opt
from wattsched.cli.slurmdaemon import DaemonCommand, start

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any

    from wattsched.config import Config
    from wattsched.service.daemonstart import Start

USAGE = """\
Usage: slurmctld [OPTIONS]
  -c            Do not recover state from last checkpoint.
  -D            Run daemon in foreground, with logging copied to stdout.
  -f file       Use specified file for slurmctld configuration.
  -h            Print this help message.
  -i            Ignore errors found while reading in state files on startup.
  -L logfile    Log messages to the specified file.
  -n value      Run the daemon at the specified nice value.
  -R            Recover full state from last checkpoint.
  -s            Change working directory to SlurmctldLogFile/StateSaveLocation.
  --systemd     Started from a systemd unit file.
  -v            Verbose mode. Multiple -v's increase verbosity.
  -V            Print version information and exit.
"""

COMMAND = DaemonCommand("slurmctld", USAGE, [
    Opt("c", None, NO, dest="clear"),
    Opt("d", None, NO, dest="foreground", const=False),
    Opt("i", None, NO, dest="ignore_errors"),
    Opt("r", None, NO, dest="recover"),
    Opt("R", None, NO, dest="recover"),
])


def files(config: Config, _opts: dict[str, Any]) -> tuple[str, str]:
    folder = os.path.dirname(config.slurmctld_log_file) if config.slurmctld_log_file else config.state_save_location
    return config.slurmctld_pid_file, folder


def run(path: str, _config: Config, _opts: dict[str, Any], how: Start) -> None:
    from wattsched.service.daemonstart import without_unused_imports

    without_unused_imports()  # before the daemon's libraries are imported
    from wattsched.controller.main import run as run_controller

    run_controller(path, start=how)  # (its start-up errors: slurmdaemon.start's to tell)


def main() -> None:
    raise SystemExit(start(COMMAND, sys.argv[1:], files, run))

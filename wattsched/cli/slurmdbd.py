"""slurmdbd under Slurm's name: its version (-V) and usage (-h), and, asked to start, why there is
nothing to start. wattsched has no accounting daemon: the controller writes the accounting records
to the database itself (AccountingStorageLoc; AccountingStorageType=accounting_storage/slurmdbd names
the same accounting), so a site's unit or script that starts slurmdbd learns so, and fails, rather
than seeming to run a daemon that does nothing."""

from __future__ import annotations

import sys

from wattsched.cli.options import NO, OPT, REQ, Opt, QuietCommand

USAGE = (  # Slurm's words, trailing spaces included
    "Usage: slurmdbd [OPTIONS]\n"
    "  -D         \tRun daemon in foreground.\n"
    "  -h         \tPrint this help message.\n"
    "  -n value   \tRun the daemon at the specified nice value.\n"
    "  -R [Names] \tReset the lft and rgt values of the associations \n"
    "\t\tin the given cluster list. \n"
    "\t\tLft and rgt values are used to distinguish \n"
    "\t\thierarical groups in the slurm accounting database.  \n"
    "\t\tThis option should be very rarely used.\n"
    "  -s         \tChange working directory to LogFile dirname or /var/tmp/.\n"
    "  -v         \tVerbose mode. Multiple -v's increase verbosity.\n"
    "  -V         \tPrint version information and exit.\n"
)


COMMAND = QuietCommand("slurmdbd", "[OPTIONS]", USAGE, [
    Opt("D", None, NO, dest="foreground"), Opt("h", None, NO, dest="help"), Opt("n", None, REQ, dest="nice"),
    Opt("R", None, OPT, dest="reset"), Opt("s", None, NO, dest="setwd"), Opt("v", None, NO, kind="count"),
    Opt("V", None, NO, kind="version"),
])


def main() -> None:
    opts, _ = COMMAND.parse(sys.argv[1:])
    if opts.get("help"):
        sys.stderr.write(USAGE)
        raise SystemExit(0)
    sys.stderr.write("slurmdbd: fatal: wattsched has no accounting daemon to start: slurmctld writes the "
                     "accounting to AccountingStorageLoc itself (accounting_storage/slurmdbd names that "
                     "accounting here)\n")
    raise SystemExit(1)

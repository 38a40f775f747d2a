"""wattsched: an energy-aware, Slurm-compatible resource and job manager.

This package is the small shared core: configuration, domain types, time and hostlist
helpers, authentication and the pure scheduling pass used by the controller and the
simulator alike. The daemons, CLI, accounting and plugins live in subpackages mapped
from the repository's top-level folders.
"""

__version__ = "0.1.0"
# the Slurm release whose behaviour, layouts and data_parser this follows: what the commands' -V
# and slurmrestd's meta tell the tools that read Slurm's version
SLURM_RELEASE = ("23", "11", "4")


def version_line() -> str:
    """The commands' -V/--version (and scontrol version): exactly Slurm's "slurm X.Y.Z", which tools
    and Slurm's own testsuite parse for the version they talk to (a suffix breaks them).
    wattsched's own version is ``wattsched --version``'s and scontrol show config's."""
    return f"slurm {'.'.join(SLURM_RELEASE)}"

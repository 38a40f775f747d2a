"""wattsched: an energy-aware, Slurm-compatible resource and job manager.

This package is the small shared core: configuration, domain types, time and hostlist
helpers, authentication and the pure scheduling pass used by the controller and the
simulator alike. The daemons, CLI, accounting and plugins live in subpackages mapped
from the repository's top-level folders.
"""

__version__ = "0.1.0"

"""Slurm's PropagateResourceLimits: the soft resource limits of the shell a job was submitted from
(ulimit -c, -n, -s, ...) go with it and are set on its tasks, for the limits the configuration names
(ALL by default, less PropagateResourceLimitsExcept). The commands read them (:func:`current`); the
node agent keeps the ones to propagate (:func:`chosen`); the step daemon sets them once it is the
user (wattsched.noded.stepd), so a user can never raise a limit above the node's hard one."""

from __future__ import annotations

import resource

# Slurm's names for the limits it propagates, and the kernel's
LIMITS = {"AS": resource.RLIMIT_AS, "CORE": resource.RLIMIT_CORE, "CPU": resource.RLIMIT_CPU,
          "DATA": resource.RLIMIT_DATA, "FSIZE": resource.RLIMIT_FSIZE, "MEMLOCK": resource.RLIMIT_MEMLOCK,
          "NOFILE": resource.RLIMIT_NOFILE, "NPROC": resource.RLIMIT_NPROC, "RSS": resource.RLIMIT_RSS,
          "STACK": resource.RLIMIT_STACK}
UNLIMITED = -1  # RLIM_INFINITY, as the messages carry it


def current() -> dict[str, int]:
    """This process's soft limits, by Slurm's names."""
    found = {}
    for name, which in LIMITS.items():
        soft = resource.getrlimit(which)[0]
        found[name] = UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)
    return found


def names(text: str) -> set[str]:
    """``ALL``, ``NONE`` or a list of Slurm's names (PropagateResourceLimits, srun --propagate);
    ValueError names an unknown one."""
    words = {w.strip().upper() for w in text.split(",") if w.strip()}
    if words == {"ALL"}:
        return set(LIMITS)
    if not words or words == {"NONE"}:
        return set()
    unknown = sorted(words - set(LIMITS))
    if unknown:
        raise ValueError(f"Invalid resource limit name: {unknown[0]}")
    return words


def chosen(limits: dict[str, int], propagate: str, excepted: str) -> dict[str, int]:
    """Of the limits a command sent, those the configuration propagates."""
    wanted = names(propagate) - names(excepted)
    return {name: value for name, value in limits.items() if name in wanted}

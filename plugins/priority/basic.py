"""priority/basic: first in, first out.

Slurm's basic plugin gives each job a priority that falls by one with each job id, so the
queue runs in submit order. An administrator's ``scontrol update job Priority=N`` replaces
it; a held job shows priority 0.
"""

from __future__ import annotations

from wattsched.config import Config
from wattsched.scheduling import Snapshot

# Slurm's basic plugin starts from this value (NO_VAL - 2^16 - 1) and counts down by job id.
BASE_PRIORITY = 4294901760


class BasicPriority:
    """Priority by submit order; administrators' settings win."""

    def __init__(self, config: Config | None = None):
        del config  # nothing to configure: taken for a uniform plugin interface

    def priorities(self, snapshot: Snapshot) -> dict[int, int]:
        result = {}
        for job in snapshot.pending:
            if job.hold:
                result[job.job_id] = 0
            elif job.admin_priority is not None:
                result[job.job_id] = job.admin_priority
            else:
                result[job.job_id] = max(1, BASE_PRIORITY - job.job_id)
        return result

"""priority/basic: first in, first out.

Slurm's basic plugin gives each job a priority that falls by one with each job id, so the
queue runs in submit order. An administrator's ``scontrol update job Priority=N`` replaces
it; a held job shows priority 0.
"""

from __future__ import annotations

from wattsched.config import Config
from wattsched.scheduling.records import Snapshot

# Slurm's basic plugin starts from this value (NO_VAL - 2^16 - 1) and counts down by job id.
BASE_PRIORITY = 4294901760


class BasicPriority:
    """Priority by submit order; administrators' settings win."""

    static = True  # a job's priority depends on nothing but the job (wattsched.memos.QueueMemo)

    def __init__(self, config: Config | None = None):
        del config  # nothing to configure: taken for a uniform plugin interface

    def priorities(self, snapshot: Snapshot) -> dict[int, int]:
        return {job.job_id: 0 if job.hold else job.admin_priority if job.admin_priority is not None
                else max(1, BASE_PRIORITY - job.job_id) for job in snapshot.pending}

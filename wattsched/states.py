"""Slurm's job state names, their short codes and pending reasons. (A node's states are in
wattsched.nodestates: the commands that list jobs import this module, and its enums would cost each
of them the enum module, ~3 ms.)"""

from __future__ import annotations

PENDING, RUNNING, COMPLETING = "PENDING", "RUNNING", "COMPLETING"
COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL = "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"
REQUEUED, OUT_OF_MEMORY, PREEMPTED = "REQUEUED", "OUT_OF_MEMORY", "PREEMPTED"
DEADLINE = "DEADLINE"  # --deadline: it could no longer end before it, and was removed
# a RUNNING job whose nodes are still powering up (Slurm's CONFIGURING flag): shown, never stored
CONFIGURING = "CONFIGURING"
# a RUNNING job an admin suspended (scontrol suspend): its processes are frozen, its time stands still
SUSPENDED = "SUSPENDED"
# a RUNNING job its processes were sent SIGSTOP (scancel -s STOP), until SIGCONT: its time runs on
STOPPED = "STOPPED"

JOB_STATES = (PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, REQUEUED,
              OUT_OF_MEMORY, CONFIGURING, SUSPENDED, STOPPED, PREEMPTED, DEADLINE)
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, DEADLINE})
ACTIVE = frozenset({PENDING, RUNNING, COMPLETING})

JOB_SHORT = {
    PENDING: "PD", RUNNING: "R", COMPLETING: "CG", COMPLETED: "CD", FAILED: "F", CANCELLED: "CA",
    TIMEOUT: "TO", NODE_FAIL: "NF", REQUEUED: "RQ", OUT_OF_MEMORY: "OOM", CONFIGURING: "CF",
    SUSPENDED: "S", STOPPED: "ST", PREEMPTED: "PR", DEADLINE: "DL",
}
SHORT_TO_STATE = {short: state for state, short in JOB_SHORT.items()}


def parse_job_state(text: str) -> str:
    """Accept a long or short job state name (case-insensitive), as squeue -t and sacct -s do."""
    upper = text.strip().upper()
    if upper in JOB_STATES:
        return upper
    if upper in SHORT_TO_STATE:
        return SHORT_TO_STATE[upper]
    raise ValueError(f"Invalid job state specified: {text}")


# Pending reasons, spelled as squeue prints them.
R_NONE = "None"
R_PRIORITY = "Priority"
R_RESOURCES = "Resources"
R_DEPENDENCY = "Dependency"
R_DEP_NEVER = "DependencyNeverSatisfied"
R_HELD_USER = "JobHeldUser"
R_HELD_ADMIN = "JobHeldAdmin"
R_BEGIN = "BeginTime"
R_PART_TIME = "PartitionTimeLimit"
R_PART_NODES = "PartitionNodeLimit"
R_PART_DOWN = "PartitionDown"
R_ARRAY_LIMIT = "JobArrayTaskLimit"
R_NODE_NOT_AVAIL = "ReqNodeNotAvail"
R_NODE_DOWN = "NodeDown"
R_RESERVATION = "Reservation"
R_RESV_DELETED = "ReservationDeleted"
R_MAINT = "ReqNodeNotAvail, Reserved for maintenance"
R_POWER = "PowerNotAvail"
R_LICENSES = "Licenses"  # the licenses it asked for are held by other jobs
R_POWER_RESERVED = "PowerReserved"
R_DEADLINE = "DeadLine"  # the reason a job ended DEADLINE

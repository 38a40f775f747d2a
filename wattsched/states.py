"""Slurm's job and node state names, their short codes and pending reasons."""

from __future__ import annotations

PENDING, RUNNING, COMPLETING = "PENDING", "RUNNING", "COMPLETING"
COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL = "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"
REQUEUED, OUT_OF_MEMORY = "REQUEUED", "OUT_OF_MEMORY"
# a RUNNING job whose nodes are still powering up (Slurm's CONFIGURING flag): shown, never stored
CONFIGURING = "CONFIGURING"
# a RUNNING job an admin suspended (scontrol suspend): its processes are frozen, its time stands still
SUSPENDED = "SUSPENDED"

JOB_STATES = (PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, REQUEUED,
              OUT_OF_MEMORY, CONFIGURING, SUSPENDED)
FINISHED = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY})
ACTIVE = frozenset({PENDING, RUNNING, COMPLETING})

JOB_SHORT = {
    PENDING: "PD", RUNNING: "R", COMPLETING: "CG", COMPLETED: "CD", FAILED: "F", CANCELLED: "CA",
    TIMEOUT: "TO", NODE_FAIL: "NF", REQUEUED: "RQ", OUT_OF_MEMORY: "OOM", CONFIGURING: "CF",
    SUSPENDED: "S",
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
R_POWER_RESERVED = "PowerReserved"

# Node power-saving flags (scontrol's +FLAG, sinfo's suffix).
P_POWER_DOWN, P_POWERED_DOWN, P_POWERING_UP, P_POWERING_DOWN = "POWER_DOWN", "POWERED_DOWN", "POWERING_UP", \
    "POWERING_DOWN"
POWER_SUFFIX = {P_POWER_DOWN: "!", P_POWERED_DOWN: "~", P_POWERING_UP: "#", P_POWERING_DOWN: "%"}

# Node base states and flags.
N_IDLE, N_ALLOCATED, N_MIXED, N_DOWN, N_UNKNOWN, N_FUTURE = "IDLE", "ALLOCATED", "MIXED", "DOWN", "UNKNOWN", \
    "FUTURE"
NODE_SHORT = {N_IDLE: "idle", N_ALLOCATED: "alloc", N_MIXED: "mix", N_DOWN: "down", N_UNKNOWN: "unk",
              N_FUTURE: "futr"}


def node_state_long(base: str, drain: bool, not_responding: bool, completing: bool = False,
                    reserved: str = "", power: str = "") -> str:
    """scontrol's State= value, e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING, MIXED+COMPLETING, IDLE+MAINT.
    ``reserved`` is "RESERVED" or "MAINT" for a node in an active reservation."""
    parts = [base]
    if reserved:
        parts.append(reserved)
    if completing:
        parts.append("COMPLETING")
    if drain:
        parts.append("DRAIN")
    if power:
        parts.append(power)
    if not_responding:
        parts.append("NOT_RESPONDING")
    return "+".join(parts)


def node_state_short(base: str, drain: bool, not_responding: bool, completing: bool = False,
                     reserved: str = "", power: str = "") -> str:
    """sinfo's %t value: idle, alloc, mix, down, drain, drng, comp, maint, resv, with '*' when not
    responding, or a power-saving suffix: '~' powered down, '#' powering up, '%' powering down,
    '!' to be powered down (which Slurm shows before '*')."""
    if drain:
        short = "drng" if base in (N_ALLOCATED, N_MIXED) else "drain"
    elif completing and base != N_DOWN:
        short = "comp"
    elif reserved == "MAINT" and base != N_DOWN:
        short = "maint"
    elif reserved and base == N_IDLE:
        short = "resv"
    else:
        short = NODE_SHORT.get(base, base.lower())
    return short + _suffix(not_responding, power)


def _suffix(not_responding: bool, power: str) -> str:
    if power:
        return POWER_SUFFIX[power]
    return "*" if not_responding else ""


def node_state_sinfo_long(base: str, drain: bool, not_responding: bool, completing: bool = False,
                          reserved: str = "", power: str = "") -> str:
    """sinfo's %T value: idle, allocated, mixed, down, drained, draining, completing, maint,
    reserved (+ '*')."""
    if drain:
        word = "draining" if base in (N_ALLOCATED, N_MIXED) else "drained"
    elif completing and base != N_DOWN:
        word = "completing"
    elif reserved == "MAINT" and base != N_DOWN:
        word = "maint"
    elif reserved and base == N_IDLE:
        word = "reserved"
    else:
        word = {N_IDLE: "idle", N_ALLOCATED: "allocated", N_MIXED: "mixed", N_DOWN: "down",
                N_UNKNOWN: "unknown", N_FUTURE: "future"}.get(base, base.lower())
    return word + _suffix(not_responding, power)

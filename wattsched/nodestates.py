"""A node's states: its base state and power-saving flag as Slurm names them, scontrol's and sinfo's
spellings of them, the power states the power policies see, and the one mapping to them from a
node's state."""

from __future__ import annotations

from enum import StrEnum

# the reason a node is DOWN when its agent stopped answering (scontrol and sinfo -R show it)
NODE_NOT_RESPONDING = "Not responding"


class PowerFlag(StrEnum):
    """A node's power-saving flag (scontrol's +FLAG, sinfo's suffix); NONE: on, no switch asked.
    POWER_DOWN: to be switched off once idle (Slurm's "!")."""

    NONE = ""
    POWER_DOWN = "POWER_DOWN"
    POWERED_DOWN = "POWERED_DOWN"
    POWERING_UP = "POWERING_UP"
    POWERING_DOWN = "POWERING_DOWN"


POWER_SUFFIX: dict[str, str] = {PowerFlag.POWER_DOWN: "!", PowerFlag.POWERED_DOWN: "~", PowerFlag.POWERING_UP: "#",
                PowerFlag.POWERING_DOWN: "%"}


class NodeBase(StrEnum):
    """A node's base state (the first word of scontrol's State=); its flags are kept apart."""

    IDLE = "IDLE"
    ALLOCATED = "ALLOCATED"
    MIXED = "MIXED"
    DOWN = "DOWN"
    UNKNOWN = "UNKNOWN"
    FUTURE = "FUTURE"


NODE_SHORT: dict[str, str] = {NodeBase.IDLE: "idle", NodeBase.ALLOCATED: "alloc", NodeBase.MIXED: "mix",
                              NodeBase.DOWN: "down", NodeBase.UNKNOWN: "unk", NodeBase.FUTURE: "futr"}
NODE_LONG: dict[str, str] = {NodeBase.IDLE: "idle", NodeBase.ALLOCATED: "allocated", NodeBase.MIXED: "mixed",
                             NodeBase.DOWN: "down", NodeBase.UNKNOWN: "unknown", NodeBase.FUTURE: "future"}
_UP = frozenset({NodeBase.IDLE, NodeBase.MIXED, NodeBase.ALLOCATED})
_UNAVAILABLE = frozenset({NodeBase.DOWN, NodeBase.UNKNOWN, NodeBase.FUTURE})


class PowerState(StrEnum):
    """What a node draws and can do, as the power policies see it (the cap, power saving, their
    shells in the controller and the simulator): one vocabulary, derived by :func:`power_state`."""

    BUSY = "busy"  # a job holds CPUs on it
    IDLE = "idle"
    OFF = "off"  # powered down (PowerSaveWatts)
    SWITCHING_ON = "switching_on"
    SWITCHING_OFF = "switching_off"
    DOWN = "down"  # down, unknown, future or not responding (DownWatts)


def schedulable(flag: str, base: str, drain: bool, not_responding: bool) -> bool:
    """Whether work may be placed on a node, now or when it is free: up (or powered down or
    powering up, to be woken for the job), responding, not drained, not being powered down."""
    if base not in _UP or drain:
        return False
    if flag in (PowerFlag.POWERED_DOWN, PowerFlag.POWERING_UP):
        return True
    return not not_responding and flag not in (PowerFlag.POWERING_DOWN, PowerFlag.POWER_DOWN)


def power_state(flag: str, base: str, not_responding: bool, held: bool) -> PowerState:
    """The one mapping from a node's state to its power state, used by the controller and the
    simulator alike: a switch under way (or done) first, then a node that cannot run work, then
    busy if a job holds it (``held``), else idle. Drain is not a power state: power saving reads
    it apart (wattsched.powersave.seen_state), the cap counts a drained node by what it holds."""
    if flag == PowerFlag.POWERED_DOWN:
        return PowerState.OFF
    if flag == PowerFlag.POWERING_DOWN:
        return PowerState.SWITCHING_OFF
    if flag == PowerFlag.POWERING_UP:
        return PowerState.SWITCHING_ON
    if base in _UNAVAILABLE or not_responding:
        return PowerState.DOWN
    return PowerState.BUSY if held else PowerState.IDLE


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
    shown = _condition(base, drain, completing, reserved)
    return (_CONDITION_SHORT[shown] if shown else NODE_SHORT.get(base, base.lower())) + _suffix(not_responding, power)


def node_state_sinfo_long(base: str, drain: bool, not_responding: bool, completing: bool = False,
                          reserved: str = "", power: str = "") -> str:
    """sinfo's %T value: idle, allocated, mixed, down, drained, draining, completing, maint,
    reserved (+ '*')."""
    shown = _condition(base, drain, completing, reserved)
    return (shown or NODE_LONG.get(base, base.lower())) + _suffix(not_responding, power)


# sinfo's %t for what _condition names (its %T)
_CONDITION_SHORT = {"draining": "drng", "drained": "drain", "completing": "comp", "maint": "maint",
                    "reserved": "resv"}


def _condition(base: str, drain: bool, completing: bool, reserved: str) -> str:
    """What sinfo shows in place of a node's base state, in %T's words ("" for the base state
    itself): drained or draining, completing, maint, reserved, in that precedence."""
    if drain:
        return "draining" if base in (NodeBase.ALLOCATED, NodeBase.MIXED) else "drained"
    if completing and base != NodeBase.DOWN:
        return "completing"
    if reserved == "MAINT" and base != NodeBase.DOWN:
        return "maint"
    if reserved and base == NodeBase.IDLE:
        return "reserved"
    return ""


def _suffix(not_responding: bool, power: str) -> str:
    if power:
        return POWER_SUFFIX[power]
    return "*" if not_responding else ""

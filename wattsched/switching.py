"""A node's electrical power states and the cost of switching it on and off (seed
001_a14c27c70de9f6bd.txt): computing, idle, off, switching on, switching off, each with its
watts, and the times the two switches take.

A node's chassis is a *target* (on or off) and the moment it was last set. The state follows:
``switching_on`` for ``on_s`` seconds after an "on", then ``on``; ``switching_off`` for ``off_s``
seconds after an "off", then ``off``. Both the emulated BMC and the node agent derive the state
from that record with :func:`chassis_state`, so they never disagree, and a restart of either
resumes a switch where it was.

Watts: computing = MaxWatts, idle = IdleWatts, off = PowerSaveWatts; the switching watts are
node settings (``SwitchOnWatts``, ``SwitchOffWatts``). The defaults are the table of Poquet 2017.
"""

from __future__ import annotations

from dataclasses import dataclass

ON, OFF, SWITCHING_ON, SWITCHING_OFF = "on", "off", "switching_on", "switching_off"

# Poquet 2017, "Energy information" (simulator column)
DEFAULT_ON_S, DEFAULT_OFF_S = 6.1, 151.52
DEFAULT_ON_WATTS, DEFAULT_OFF_WATTS = 125.174, 100.997
DEFAULT_P_OFF, DEFAULT_P_IDLE, DEFAULT_P_COMP = 9.75, 95.0, 190.738


@dataclass(frozen=True, slots=True)
class Switching:
    """How long a node takes to switch, and what it draws meanwhile."""

    on_s: float = DEFAULT_ON_S
    off_s: float = DEFAULT_OFF_S
    on_watts: float = DEFAULT_ON_WATTS
    off_watts: float = DEFAULT_OFF_WATTS


@dataclass(frozen=True, slots=True)
class Chassis:
    """The last power command given to a node's chassis: its target and when."""

    target: str = ON
    since: float = float("-inf")  # never switched: settled for ever

    def state(self, now: float, switching: Switching) -> str:
        return chassis_state(self, now, switching)

    def settles_at(self, switching: Switching) -> float:
        return self.since + (switching.on_s if self.target == ON else switching.off_s)

    def dumps(self) -> str:
        return f"{self.target} {self.since:.3f}\n"


def parse_chassis(text: str) -> Chassis:
    """``on 1732300000.000`` (or a bare ``on``/``off``: settled long ago)."""
    parts = text.split()
    if not parts or parts[0] not in (ON, OFF):
        return Chassis()
    try:
        since = float(parts[1]) if len(parts) > 1 else float("-inf")
    except ValueError:
        since = float("-inf")
    return Chassis(parts[0], since)


def chassis_state(chassis: Chassis, now: float, switching: Switching) -> str:
    if now < chassis.settles_at(switching):
        return SWITCHING_ON if chassis.target == ON else SWITCHING_OFF
    return chassis.target


def command(current: Chassis, target: str, now: float, switching: Switching) -> Chassis:
    """The chassis after a power command: repeating the current target changes nothing (a node
    already on, or on its way, is not switched again); reversing a switch starts the new one now."""
    if target == current.target:
        return current
    return Chassis(target, now)


def state_watts(state: str, switching: Switching, off_watts: float) -> float | None:
    """Watts of the off and switching states (None for on: the node's load decides)."""
    if state == OFF:
        return off_watts
    if state == SWITCHING_ON:
        return switching.on_watts
    if state == SWITCHING_OFF:
        return switching.off_watts
    return None

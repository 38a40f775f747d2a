"""Power saving in virtual time: the configured policies asked after each pass
(wattsched.powersave.decide, with the controller's inputs), nodes switched off and on taking their
SwitchOffTime / SwitchOnTime (the hardware's times, where the live controller waits
SuspendTimeout), and the switches counted and logged as power events. A node that comes up hands
the jobs waiting for it back to the engine, which starts those whose last node it was."""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping

from wattsched import capadmission, plugins, powersave
from wattsched.config import Config
from wattsched.nodestates import NodeBase, PowerState, power_state
from wattsched.simulator.clusterpower import ClusterPower
from wattsched.simulator.nodeview import NodeView
from wattsched.simulator.records import (
    IDLE,
    OFF,
    ON,
    POWERED_OFF,
    SLEEPING,
    SWITCHING_OFF,
    SWITCHING_ON,
    WAKING,
    SimNode,
)

Push = Callable[[float, str], None]  # (when, node): its switch is over then


class PowerSaving:
    """The policies, their memories, the switches under way and done (see the module docstring)."""

    def __init__(self, config: Config, nodes: Mapping[str, SimNode], power: ClusterPower, view: NodeView,
                 switched_at: Push):
        self.config = config
        self.nodes = nodes
        self.power = power
        self.view = view
        self.switched_at = switched_at
        self.policies = plugins.power_save_policies(config)
        self.memories: dict[str, dict] = {}
        self.excluded = config.suspend_excluded
        # the policies' periodic call, and the idle timeout after which a node is looked at again
        self.period = min((p.period for _n, p in self.policies if hasattr(p, "period")), default=None)
        self.t_idle = next((p.t_idle for _n, p in self.policies if hasattr(p, "t_idle")), None)
        self.switches_on = self.switches_off = 0
        self.suspends: collections.deque[float] = collections.deque()
        self.resumes: collections.deque[float] = collections.deque()
        self.events: list[tuple[float, str, str, str]] = []  # (time, node, what, why) as they came

    def tick(self, now: float, pending: tuple[powersave.PendingBrief, ...], releases: tuple[tuple[float, int], ...],
             power_snap: capadmission.PowerSnap | None) -> None:
        """The policies' decision after a pass, carried out."""
        nodes = tuple(powersave.PsNode(n.conf.name, self._power_state(n), n.idle_since, n.conf.name in self.excluded)
                      for n in self.nodes.values())
        snap = powersave.PowerSaveSnap(now, nodes, pending, releases, power_snap,
                                       powersave.recent(self.suspends, now), powersave.recent(self.resumes, now))
        off, on, self.memories = powersave.decide(self.policies, snap, self.memories, self.config.suspend_rate,
                                                  self.config.resume_rate)
        for name in off:
            self.switch(self.nodes[name], False, now, "")
        for name in on:
            self.switch(self.nodes[name], True, now, "")

    @staticmethod
    def _power_state(node: SimNode) -> PowerState:
        """The node's power state by the controller's own mapping (a simulated node is never down
        or drained)."""
        return power_state(node.power, NodeBase.IDLE, False, bool(node.jobs))

    def switch(self, node: SimNode, on: bool, now: float, reason: str) -> None:
        node.power = WAKING if on else SLEEPING
        self.view.changed(node)
        if on:
            self.switches_on += 1
            self.resumes.append(now)
        else:
            self.switches_off += 1
            self.suspends.append(now)
        self.events.append((now, node.conf.name, node.power, reason))
        self.power.set_category(node, SWITCHING_ON if on else SWITCHING_OFF, now)
        sw = node.conf.switching
        self.switched_at(now + (sw.on_s if on else sw.off_s), node.conf.name)

    def switched(self, node: SimNode, now: float) -> list[int]:
        """The node's switch is over: off, or on (the jobs waiting for it, returned)."""
        if node.power == SLEEPING:
            node.power = POWERED_OFF
            self.view.changed(node)
            self.events.append((now, node.conf.name, POWERED_OFF, ""))
            self.power.set_category(node, OFF, now)
            return []
        node.power = ON
        node.idle_since = now
        self.view.changed(node)
        self.events.append((now, node.conf.name, "POWERED_UP", " ".join(f"job {j}" for j in node.jobs)))
        self.power.set_category(node, IDLE, now)
        return list(node.jobs)

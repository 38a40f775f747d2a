"""The nodes as the core sees them in the replay: each node's NodeSnap, rebuilt at a snapshot
only for the nodes changed since the last (a node goes back and forth between a few states, and
an unchanged snapshot is the very same object, which the core's NodeMemo skips), and the
machine's free CPUs, which tell the engine a pass that can start nothing."""

from __future__ import annotations

from collections.abc import Mapping

from wattsched import snapbuild
from wattsched.scheduling.records import NodeSnap
from wattsched.simulator.records import SimNode


class NodeView:
    """The nodes' snapshots and free CPUs, brought up to date with the nodes marked changed."""

    def __init__(self, nodes: Mapping[str, SimNode], memory_consumable: bool):
        self.nodes = nodes
        self.memory_consumable = memory_consumable
        self.snaps = {name: self._snap(node) for name, node in nodes.items()}
        self.position = {name: i for i, name in enumerate(self.snaps)}
        self.dirty: set[str] = set()  # nodes changed since the last snapshot: their NodeSnap is rebuilt then
        self.current: tuple[NodeSnap, ...] | None = None
        self.free = {name: node.conf.cpus for name, node in nodes.items()}  # free CPUs per node
        self.free_cpus = sum(self.free.values())

    def changed(self, node: SimNode) -> None:
        self.dirty.add(node.conf.name)

    def free_total(self) -> int:
        """The machine's free CPUs now."""
        for name in self.dirty:  # (folded again at each call until a snapshot clears them)
            node = self.nodes[name]
            free = node.conf.cpus - node.alloc_cpus
            self.free_cpus += free - self.free[name]
            self.free[name] = free
        return self.free_cpus

    def take(self) -> tuple[tuple[NodeSnap, ...], list[int]]:
        """The nodes' snapshots now, and the positions of those that changed since the last call."""
        changed: list[int] = []
        for name in self.dirty:
            node = self.nodes[name]
            state = (node.alloc_cpus, node.alloc_mem_mb, node.power)
            snap = node.snaps.get(state)
            if snap is None:
                snap = node.snaps[state] = self._snap(node)
            if snap is not self.snaps[name]:
                self.snaps[name] = snap
                changed.append(self.position[name])
        self.dirty.clear()
        if changed or self.current is None:
            self.current = tuple(self.snaps.values())
        return self.current, changed

    def _snap(self, node: SimNode) -> NodeSnap:
        memory = node.alloc_mem_mb if self.memory_consumable else 0
        return snapbuild.node_snap(node.conf, node.alloc_cpus, memory, node.power)

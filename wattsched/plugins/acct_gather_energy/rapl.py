"""acct_gather_energy/rapl: Intel RAPL through the powercap sysfs tree.

Reads ``intel-rapl:N/energy_uj`` of every package and its ``dram`` subzone under
``<EnergySysfsRoot>/sys/class/powercap`` (root "/" on a real node, a directory laid out exactly
as the kernel lays it out in tests), and returns the node's cumulative joules. A counter that
went backwards wrapped at ``max_energy_range_uj``: the wrap is added back, so the node's energy
keeps growing however often the hardware counters wrap.
"""

from __future__ import annotations

import os
import threading

from wattsched.config import Config, NodeConf


class RaplEnergy:
    kind = "energy"  # readings are cumulative joules

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.base = os.path.join(config.energy_sysfs_root or "/", "sys", "class", "powercap")
        self.zones = self._zones()
        self._last: dict[str, int] = {}
        self._total_uj = 0
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def _zones(self) -> list[str]:
        """Package zones (intel-rapl:N) and their dram subzones, whose energy adds up."""
        zones: list[str] = []
        if not os.path.isdir(self.base):
            return zones
        for name in sorted(os.listdir(self.base)):
            path = os.path.join(self.base, name)
            if not name.startswith("intel-rapl:") or name.count(":") != 1:
                continue
            zones.append(path)
            for sub in sorted(os.listdir(path)):
                subpath = os.path.join(path, sub)
                if sub.startswith(name + ":") and _read(os.path.join(subpath, "name"), "") == "dram":
                    zones.append(subpath)
        return zones

    def read(self, node: str, now: float, load: object) -> float:
        """The host's joules since the agent first read them. All nodes an agent hosts share the
        host's counters: the sysfs files are read once per poll (``now``), the others get that."""
        del node, load
        with self._lock:
            if now != self._read_at:
                self._read_zones()
                self._read_at = now
            return self._total_uj / 1e6

    def _read_zones(self) -> None:
        for zone in self.zones:
            value = int(_read(os.path.join(zone, "energy_uj"), "0"))
            last = self._last.get(zone)
            if last is not None:
                delta = value - last
                if delta < 0:  # wrapped
                    delta += int(_read(os.path.join(zone, "max_energy_range_uj"), "0")) + 1
                self._total_uj += delta
            self._last[zone] = value


def _read(path: str, default: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default

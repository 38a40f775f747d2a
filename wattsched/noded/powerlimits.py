"""A node's power limit held by its hardware: RAPL's package limits through the kernel's powercap
tree, set by the agent (root) to the watts the controller orders (the node's CapWatts).

The tree is the kernel's (``<root>/sys/class/powercap/intel-rapl:N``, root ``EnergySysfsRoot``,
"/" on a real node), or for a virtual node one laid out the same way in its spool folder
(:func:`layout_tree`), whose limit, as written and read back, the emulated node honours as
hardware would (wattsched.powermodel.limited_khz). A node's limit is shared equally by its packages, as their long-term
constraint (``constraint_0_power_limit_uw``, the zone ``enabled``); on a real node each package
gets the node's limit less what the rest of the node draws, measured (the node's watts, as its
energy plugin reads them, less the packages' own, from their ``energy_uj``).

Before the first change the site's own settings of every package (limit, time window, enabled)
are saved in ``<spool>/<node>/powerlimit.saved``; lifting the limit writes them back and removes
the file. An agent that starts and finds the file died while a limit was set: it writes the
site's settings back before anything else, and the controller's order comes again with the next
heartbeat reply. A limit is never set under the node's IdleWatts (the hardware cannot hold less
than the idle node draws), nor over what a package allows (``constraint_0_max_power_uw``); the
value is read back after writing, and a limit the hardware did not take is reported as such,
never taken as held.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from wattsched.config import NodeConf
from wattsched.noded import gpulimits
from wattsched.private import private_json

SAVED = "powerlimit.saved"
LIMIT = "constraint_0_power_limit_uw"
WINDOW = "constraint_0_time_window_us"
EMULATED_WINDOW_US = 976_563  # the long-term window a Xeon's firmware sets by default (about a second)


class LimitError(OSError):
    """The hardware refused a limit, or took another value than the one written."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What a node's hardware holds: the node's limit in watts (None: the site's own settings)."""

    watts: float | None


class PowercapTree:
    """One node's RAPL packages under a powercap tree."""

    def __init__(self, root: str, spool: str, node: NodeConf):
        self.base = os.path.join(root, "sys", "class", "powercap")
        self.saved_path = os.path.join(spool, node.name, SAVED)
        self.node = node
        self.watts: float | None = None  # the node's limit now held
        self._energy: tuple[float, int] | None = None  # (time, the packages' energy_uj summed)

    def packages(self) -> list[str]:
        """The package zones (``intel-rapl:N``), in order; none without a powercap tree."""
        if not os.path.isdir(self.base):
            return []
        return [os.path.join(self.base, name) for name in sorted(os.listdir(self.base))
                if name.startswith("intel-rapl:") and name.count(":") == 1]

    def recover(self) -> bool:
        """Write back the site's settings a dead agent left limited; True when there were any."""
        if not os.path.exists(self.saved_path):
            return False
        self.lift()
        return True

    def package_watts(self, now: float) -> float | None:
        """The packages' power since the last call (None on the first, or without counters)."""
        total = 0
        for zone in self.packages():
            text = _read(os.path.join(zone, "energy_uj"))
            if not text.isdigit():
                return None
            total += int(text)
        previous, self._energy = self._energy, (now, total)
        if previous is None or now <= previous[0] or total < previous[1]:  # first, or a counter wrapped
            return None
        return (total - previous[1]) / 1e6 / (now - previous[0])

    def hold(self, watts: float, rest_watts: float = 0.0) -> Applied:
        """Hold the node at ``watts`` (never under its IdleWatts): each package gets its share of
        the watts less ``rest_watts``, what the rest of the node draws."""
        zones = self.packages()
        if not zones:
            raise LimitError(f"no RAPL package under {self.base}")
        watts = max(watts, float(self.node.idle_watts or 0))
        self._save(zones)
        share = max(0.0, watts - rest_watts) / len(zones)
        for zone in zones:
            ceiling = _read(os.path.join(zone, "constraint_0_max_power_uw"))
            wanted = int(share * 1e6)
            if ceiling.isdigit() and int(ceiling) > 0:
                wanted = min(wanted, int(ceiling))
            _write(os.path.join(zone, LIMIT), str(wanted))
            _write(os.path.join(zone, "enabled"), "1")
            taken = _read(os.path.join(zone, LIMIT))
            if taken != str(wanted):
                self.watts = None
                raise LimitError(f"{os.path.basename(zone)} took {taken or 'nothing'} uW for {wanted} uW")
        self.watts = watts
        return Applied(watts)

    def lift(self) -> Applied:
        """The site's own settings back, as saved before the first change."""
        try:
            with open(self.saved_path) as handle:
                saved = json.load(handle)
        except FileNotFoundError:
            self.watts = None
            return Applied(None)
        except (OSError, ValueError) as exc:
            raise LimitError(f"the site's saved limits are unreadable: {exc}") from exc
        for zone, values in saved.items():
            for name in (WINDOW, LIMIT, "enabled"):
                if name in values:
                    _write(os.path.join(self.base, zone, name), values[name])
        os.unlink(self.saved_path)
        self.watts = None
        return Applied(None)

    def _save(self, zones: Sequence[str]) -> None:
        """The site's settings, saved once before the first change (whole, then renamed into place)."""
        if os.path.exists(self.saved_path):
            return
        private_json(self.saved_path, {os.path.basename(zone): {name: value for name in (LIMIT, WINDOW, "enabled")
                                                                if (value := _read(os.path.join(zone, name)))}
                                       for zone in zones})


def layout_tree(root: str, node: NodeConf) -> None:
    """A kernel-shaped powercap tree for a virtual node (kept if present): one package zone that
    stands for the whole node, as its BMC measures it, limited to MaxWatts by its firmware."""
    zone = os.path.join(root, "sys", "class", "powercap", "intel-rapl:0")
    if os.path.isdir(zone):
        return
    os.makedirs(zone, exist_ok=True)
    most = int(float(node.max_watts or node.idle_watts or 0) * 1e6)
    files = {"name": "package-0", "enabled": "0", "energy_uj": "0", "max_energy_range_uj": "262143328850",
             "constraint_0_name": "long_term", LIMIT: str(most), WINDOW: str(EMULATED_WINDOW_US),
             "constraint_0_max_power_uw": str(most), "constraint_1_name": "short_term",
             "constraint_1_power_limit_uw": str(int(most * 1.2)), "constraint_1_time_window_us": "2440",
             "constraint_1_max_power_uw": "0"}
    for name, value in files.items():
        _write(os.path.join(zone, name), value)


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(f"{value}\n")


class NodeLimits:
    """The limits of the nodes an agent hosts: each node's tree and GPUs, what they hold, and why
    not. A node with GPUs shares its limit between its CPU side and its GPUs (noded.gpulimits)."""

    def __init__(self, nodes: dict[str, NodeConf], spool: str, sysfs_root: str, emulated: bool):
        self.emulated = emulated
        self.roots = {name: os.path.join(spool, name, "sysfs") if emulated else sysfs_root for name in nodes}
        self.trees = {name: PowercapTree(self.roots[name], spool, node) for name, node in nodes.items()}
        self.gpus = {name: gpulimits.GpuLimits(node, spool, gpulimits.EmulatedNvml(
            os.path.join(spool, name, gpulimits.EMULATED), node) if emulated else gpulimits.RealNvml(node))
            for name, node in nodes.items() if node.gpus}
        self.watts: dict[str, float] = {}  # each limited node's limit, held by all its parts
        self.errors: dict[str, str] = {}

    def recover(self) -> list[str]:
        """The site's settings back on every node a dead agent left limited; returns those nodes."""
        cpus = {name for name, tree in self.trees.items() if tree.recover()}
        return sorted(cpus | {name for name, gpus in self.gpus.items() if gpus.recover()})

    def order(self, node: str, watts: float | None, node_watts: float | None, now: float,
              busy_gpus: Collection[int] = (), gpu_watts: float = 0.0) -> None:
        """Hold the node at the controller's ``watts`` (None: lift it); ``node_watts``: its power as
        its energy plugin last read it, so that the rest of a real node is left its part; its GPUs
        ``busy_gpus`` held by jobs and drawing ``gpu_watts`` now."""
        tree, gpus = self.trees[node], self.gpus.get(node)
        self.watts.pop(node, None)
        try:
            if watts is None:
                tree.lift()
                if gpus is not None:
                    gpus.lift()
                self.errors.pop(node, None)
                return
            cpu_watts = watts
            if gpus is not None:
                cpu = (float(tree.node.idle_watts or 0), float(tree.node.max_watts or tree.node.idle_watts or 0))
                cpu_watts, each = gpulimits.split(watts, cpu, gpus.ranges(), set(busy_gpus))
                gpus.hold(each)
            if self.emulated:
                layout_tree(self.roots[node], tree.node)
            packages = None if self.emulated else tree.package_watts(now)
            # the rest of a real node: what it draws beyond its packages and its GPUs
            rest = max(0.0, node_watts - packages - gpu_watts) if node_watts is not None and packages is not None \
                else 0.0
            tree.hold(cpu_watts, rest)
            self.watts[node] = watts
            self.errors.pop(node, None)
        except OSError as exc:
            self.errors[node] = str(exc)[:200]
        except Exception as exc:  # NVML raises classes of its own (NVMLError_NoPermission, ...)
            self.errors[node] = f"GPU limit refused: {exc}"[:200]

    def held(self, node: str) -> float | None:
        """The node's limit, when its CPU side and its GPUs hold their parts of it."""
        return self.watts.get(node)

    def gpu_limit(self, node: str, index: int) -> float | None:
        """A virtual GPU's limit, as its emulated NVML holds it (None: none set)."""
        gpus = self.gpus.get(node) if self.emulated else None
        return gpus.held.get(index) if gpus is not None else None

    def emulated_limit(self, node: str) -> float | None:
        """The watts a virtual node's CPU side is held to: what its tree was given and read back
        (kept here: the emulated CPUs ask for it at every poll of every job)."""
        return self.trees[node].watts if self.emulated else None

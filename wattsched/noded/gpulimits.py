"""A node's GPUs held to power limits through NVML: the GPU side of a node's limit
(noded.powerlimits holds the CPU side through RAPL).

When the controller orders a node's limit, the node's parts share it by their ranges
(:func:`split`): its CPU side (IdleWatts to MaxWatts) and each GPU a job holds (its power-
management range, NVML's minimum and maximum constraints) get their floor plus the same fraction
of their span, and add up to the limit; a GPU no job holds is held at its floor, which it does not
pass idle. Each GPU's limit is set with nvmlDeviceSetPowerManagementLimit (milliwatts, as root)
and read back with nvmlDeviceGetPowerManagementLimit: a value the device did not take is reported
as refused, never assumed held.

Before the first change the site's own limit of every GPU of the node is saved in
``<spool>/<node>/gpulimit.saved`` (0600); lifting the node's limit writes them back and removes
the file, and an agent that finds the file at its start (its predecessor died while a limit was
set) writes them back before anything else, as for the node's RAPL packages.

A virtual node's GPUs answer the same calls through :class:`EmulatedNvml`: their limits in
``<spool>/<node>/nvml.json``, the range GpuIdleWatts to GpuMaxWatts, a value out of it refused
(NVML's NVMLError_InvalidArgument); the emulated GPU meter (noded.gpus) draws no more than it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Protocol

from wattsched.config import NodeConf
from wattsched.noded import gpus
from wattsched.private import private_json

SAVED = "gpulimit.saved"
EMULATED = "nvml.json"


class LimitError(OSError):
    """A GPU refused a limit, or took another value than the one set."""


class Nvml(Protocol):
    """The NVML calls the limits need, for one node's GPUs by their numbers there (watts)."""

    def constraints(self, index: int) -> tuple[float, float]: ...

    def get_limit(self, index: int) -> float: ...

    def set_limit(self, index: int, watts: float) -> None: ...


class RealNvml:
    """A real node's GPUs, through nvidia-ml-py (loaded when a GPU is first limited)."""

    def __init__(self, node: NodeConf):
        self.node = node
        self._handles: dict[int, object] = {}

    def _handle(self, index: int):
        import pynvml

        handle = self._handles.get(index)
        if handle is None:
            pynvml.nvmlInit()
            handle = self._handles[index] = gpus.device_handle(pynvml, self.node, index)
        return pynvml, handle

    def constraints(self, index: int) -> tuple[float, float]:
        pynvml, handle = self._handle(index)
        low, high = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return low / 1000.0, high / 1000.0

    def get_limit(self, index: int) -> float:
        pynvml, handle = self._handle(index)
        return pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0

    def set_limit(self, index: int, watts: float) -> None:
        pynvml, handle = self._handle(index)
        pynvml.nvmlDeviceSetPowerManagementLimit(handle, round(watts * 1000))


class EmulatedNvml:
    """A virtual node's GPUs: their limits in a file of its spool folder (see the module docstring)."""

    def __init__(self, path: str, node: NodeConf):
        self.path = path
        self.node = node

    def constraints(self, index: int) -> tuple[float, float]:
        return float(self.node.gpu_idle_watts), float(self.node.gpu_max_watts)

    def _limits(self) -> dict[str, float]:
        try:
            with open(self.path) as handle:
                return {str(k): float(v) for k, v in json.load(handle).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise LimitError(f"{self.path}: {exc}") from exc

    def get_limit(self, index: int) -> float:
        return self._limits().get(str(index), float(self.node.gpu_max_watts))

    def set_limit(self, index: int, watts: float) -> None:
        low, high = self.constraints(index)
        if not low <= watts <= high:
            raise LimitError(f"GPU {index}: {watts:.0f} W is outside {low:.0f}-{high:.0f} W")
        limits = self._limits()
        limits[str(index)] = watts
        private_json(self.path, limits)


def split(limit: float, cpu: tuple[float, float], ranges: Mapping[int, tuple[float, float]],
          busy: set[int]) -> tuple[float, dict[int, float]]:
    """The node's ``limit`` shared by its CPU side (``cpu``: its floor and top) and its GPUs (each
    one's range); the GPUs not in ``busy`` at their floor. Returns the CPU side's watts and each
    GPU's (see the module docstring)."""
    sharing = [cpu, *(ranges[index] for index in ranges if index in busy)]
    floor = sum(low for low, _high in sharing) + sum(ranges[i][0] for i in ranges if i not in busy)
    span = sum(high - low for low, high in sharing)
    share = 1.0 if span <= 0 else max(0.0, min(1.0, (limit - floor) / span))
    given = {index: low + share * (high - low) if index in busy else low for index, (low, high) in ranges.items()}
    return max(cpu[0], limit - sum(given.values())), given


class GpuLimits:
    """One node's GPUs: their limits set, read back, and the site's own saved and restored."""

    def __init__(self, node: NodeConf, spool: str, nvml: Nvml):
        self.indexes = [device.index for device in node.gpus]
        self.saved_path = os.path.join(spool, node.name, SAVED)
        self.nvml = nvml
        self.held: dict[int, float] = {}

    def ranges(self) -> dict[int, tuple[float, float]]:
        return {index: self.nvml.constraints(index) for index in self.indexes}

    def hold(self, limits: Mapping[int, float]) -> None:
        self._save()
        self.held = {}
        for index, watts in sorted(limits.items()):
            self.nvml.set_limit(index, watts)
            taken = self.nvml.get_limit(index)
            if abs(taken - watts) > 0.5:
                raise LimitError(f"GPU {index} took {taken:.0f} W for {watts:.0f} W")
            self.held[index] = watts

    def lift(self) -> None:
        """The site's own limits back, as saved before the first change."""
        try:
            with open(self.saved_path) as handle:
                saved = {int(k): float(v) for k, v in json.load(handle).items()}
        except FileNotFoundError:
            self.held = {}
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise LimitError(f"the site's saved GPU limits are unreadable: {exc}") from exc
        for index, watts in sorted(saved.items()):
            self.nvml.set_limit(index, watts)
        os.unlink(self.saved_path)
        self.held = {}

    def recover(self) -> bool:
        """Write back the site's limits a dead agent left set; True when there were any."""
        if not os.path.exists(self.saved_path):
            return False
        self.lift()
        return True

    def _save(self) -> None:
        if not os.path.exists(self.saved_path):
            private_json(self.saved_path, {str(i): self.nvml.get_limit(i) for i in self.indexes})


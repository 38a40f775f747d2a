"""acct_gather_energy/gpu: the energy of the node's NVIDIA GPUs through NVML (nvidia-ml-py).

Reads each GPU's total energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since
the driver loaded) and returns their sum in joules; GPUs without that counter (before Volta)
are metered from their power reading instead, integrated by the agent like any watts. Used
alone it meters GPU energy only, which Slurm keeps as a TRES of its own (gres/gpu energy);
CPU energy is another plugin's.
"""

from __future__ import annotations

import threading

from wattsched.config import Config, NodeConf


class GpuEnergy:
    kind = "energy"

    def __init__(self, config: Config, nodes: list[NodeConf]):
        del config, nodes
        import pynvml

        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise RuntimeError(f"acct_gather_energy/gpu: NVML is not available here: {exc}") from exc
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self._lock = threading.Lock()
        self._joules = 0.0
        self._last: dict[int, tuple[float, float]] = {}  # power-only GPUs: (time, watts)
        self._power_only: dict[int, float] = {}  # their integrated joules
        self._read_at: float | None = None

    def read(self, node: str, now: float, load: object) -> float:
        del node, load
        with self._lock:
            if now != self._read_at:
                self._joules = sum(self._device_joules(i, h, now) for i, h in enumerate(self.handles))
                self._read_at = now
            return self._joules

    def _device_joules(self, index: int, handle, now: float) -> float:
        try:
            return self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
        except self.nvml.NVMLError:
            watts = self.nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            then, before = self._last.get(index, (now, watts))
            self._power_only[index] = self._power_only.get(index, 0.0) + (before + watts) / 2 * (now - then)
            self._last[index] = (now, watts)
            return self._power_only[index]

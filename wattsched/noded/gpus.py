"""The agent's GPU meter: each GPU's energy counter and each job's GPU energy on each node.

A virtual node's GPUs are emulated: a GPU held by a job running on the node draws GpuMaxWatts, any
other GpuIdleWatts (NodeName keys, ours), no more than its power limit (noded.gpulimits),
integrated over the time between polls; the node's
emulated power (acct_gather_energy/emulated, and the emulated BMC that serves it) includes them, as
a real node's BMC reading includes its GPUs. A real node's GPUs are read through NVML (nvidia-ml-
py): nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded, of the device whose
minor number is the GPU's (gres.conf File= /dev/nvidiaN), else of the device at the GPU's number.

A job's GPU energy on a node is the rise of its GPUs' counters while it held them; the controller
gives it to that job alone when it splits a shared node's energy (controller.energysplit).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from wattsched.config import NodeConf

log = logging.getLogger("wattsched.noded")

# per node: each job's GPU numbers there
JobGpus = Callable[[], dict[str, dict[int, list[int]]]]
_MINOR = re.compile(r"nvidia(\d+)$")


class GpuError(RuntimeError):
    """The node's GPUs are not what its configuration declares."""


@dataclass(slots=True)
class _Gpu:
    joules: float = 0.0
    watts: float = 0.0
    base: float | None = None  # an NVML reading that corresponds to joules=0 here


@dataclass(slots=True)
class GpuMeter:
    nodes: dict[str, NodeConf]
    emulated: bool
    job_gpus: JobGpus
    gpus: dict[tuple[str, int], _Gpu] = field(default_factory=dict)
    job_joules: dict[tuple[str, int], float] = field(default_factory=dict)  # (node, job) -> GPU joules
    _last: float = 0.0
    _handles: dict[tuple[str, int], object] = field(default_factory=dict)
    _warned: set[tuple[str, int]] = field(default_factory=set)  # once per GPU: a missing one must not flood the log
    # a virtual GPU's power limit, watts (None: none): what its emulated NVML holds (noded.gpulimits)
    limit_of: Callable[[str, int], float | None] | None = None

    def __post_init__(self) -> None:
        self.nodes = {name: node for name, node in self.nodes.items() if node.gres}
        for name, node in self.nodes.items():
            for device in node.gpus:
                self.gpus[(name, device.index)] = _Gpu()

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def watts(self, node: str) -> float:
        """The node's GPUs' watts now (what a node's meter adds for them)."""
        return sum(g.watts for (n, _i), g in self.gpus.items() if n == node)

    def poll(self, now: float, running: Mapping[str, Mapping[int, object]],
             held: dict[str, dict[int, list[int]]]) -> None:
        """Read (or, emulated, integrate) every GPU and add each job's share of the rise; ``running``
        names, per node, the jobs running there, ``held`` each job's GPUs (from
        :attr:`job_gpus`, asked before the meter's lock is taken: it takes the agent's)."""
        owner = {(node, index): job for node, jobs in held.items() for job, indices in jobs.items()
                 for index in indices}
        dt = now - self._last if self._last else 0.0
        self._last = now
        for (node, index), gpu in self.gpus.items():
            job = owner.get((node, index))
            live = job is not None and job in running.get(node, {})
            before = gpu.joules
            if self.emulated:
                conf = self.nodes[node]
                gpu.watts = float(conf.gpu_max_watts if live else conf.gpu_idle_watts)
                limit = self.limit_of(node, index) if self.limit_of is not None else None
                if limit is not None:
                    gpu.watts = min(gpu.watts, limit)
                gpu.joules += gpu.watts * max(0.0, dt)
            else:
                self._read(node, index, gpu, dt)
            if job is not None:
                self.job_joules[(node, job)] = self.job_joules.get((node, job), 0.0) + (gpu.joules - before)
        for key in [k for k in self.job_joules if k[1] not in held.get(k[0], {})]:
            del self.job_joules[key]

    def _read(self, node: str, index: int, gpu: _Gpu, dt: float) -> None:
        try:
            import pynvml  # only on nodes with real GPUs: the module is loaded when first needed

            handle = self._handles.get((node, index))
            if handle is None:
                pynvml.nvmlInit()
                handle = self._handles[(node, index)] = device_handle(pynvml, self.nodes[node], index)
            joules = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
        except Exception as exc:
            if (node, index) not in self._warned:
                log.warning("GPU energy not read", extra={"node": node, "gpu": index, "error": str(exc)})
                self._warned.add((node, index))
            return
        if gpu.base is None:
            gpu.base = joules - gpu.joules
        new = joules - gpu.base
        if dt > 0:
            gpu.watts = max(0.0, (new - gpu.joules) / dt)
        gpu.joules = new


def device_handle(pynvml, node: NodeConf, index: int) -> object:
    """The NVML device of the node's GPU ``index``: the one whose minor number is that of its
    /dev/nvidiaN when gres.conf names the file (NVML's own order need not follow the minor
    numbers), else the device at the GPU's number."""
    for device in node.gpus:
        match = _MINOR.search(os.path.basename(device.file)) if device.index == index and device.file else None
        if match:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                if pynvml.nvmlDeviceGetMinorNumber(handle) == int(match.group(1)):
                    return handle
            raise RuntimeError(f"no NVML device has minor number {match.group(1)}")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def detect(nodes: dict[str, NodeConf]) -> dict[str, NodeConf]:
    """gres.conf's AutoDetect=nvml: this host's GPUs from NVML, given in order to each node that
    declares GPUs (an agent's real nodes are this host), each with its ``/dev/nvidiaN`` by minor
    number. NVML missing, or fewer GPUs than a node's Gres= declares, is a GpuError: the agent does
    not start, as slurmd refuses to register such a node."""
    try:
        import pynvml  # only where AutoDetect=nvml is asked for: most agents never load it

        pynvml.nvmlInit()
        files = [f"/dev/nvidia{pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i))}"
                 for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as exc:  # NVML raises classes of its own (NVMLError_LibraryNotFound, ...)
        raise GpuError(f"AutoDetect=nvml: NVML is not available here: {exc}") from exc
    result = {}
    for name, node in nodes.items():
        wanted = sum(count for _kind, count in node.gres)
        if wanted > len(files):
            raise GpuError(f"AutoDetect=nvml: node {name} declares {wanted} GPUs but NVML finds {len(files)}")
        paths = iter(files)
        result[name] = replace(node, gpu_files=tuple((kind, next(paths)) for kind, count in node.gres
                                                     for _ in range(count))) if node.gres else node
    return result

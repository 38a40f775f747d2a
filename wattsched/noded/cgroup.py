"""Jobs and steps in control groups (Slurm's proctrack/cgroup and task/cgroup), on cgroup v1 or v2.

Each job on a node gets ``wattsched/<cluster>/node_<node>/job_<id>`` (the cluster's name keeps two
clusters on one host, with the same node names, out of each other's groups), and each of its steps a child
``step_<batch|N>`` in which its processes live: the batch script's child of the step daemon and
each srun task join their step before they become the user (the step daemon writes their pid,
as root, into the step's ``cgroup.procs``). The paths are made by root from the node's name and
the job's number, never from anything a user named.

- Cores (ConstrainCores): the job's ``cpuset.cpus`` are the CPUs the agent picked for it; steps
  inherit them.
- Memory (ConstrainRAMSpace): ``--mem``/``--mem-per-cpu`` x AllowedRAMSpace %, at most MaxRAMPercent
  of the node, at least MinRAMSpace; the same limit on the job and its steps, so that the step
  that goes over is the one the kernel's OOM killer charges (v1 ``memory.oom_control`` oom_kill,
  v2 ``memory.events`` oom_kill) and it ends OUT_OF_MEMORY. ConstrainSwapSpace adds AllowedSwapSpace %
  of swap (v1 ``memory.memsw``, v2 ``memory.swap.max``).
- Tracking: every process of a job is in its cgroup, whatever it did (setsid, double fork), so the
  end of a job kills them all (v2 ``cgroup.kill``; v1 freezes, signals each pid, thaws).
- Devices (ConstrainDevices, v1 only): the job's and its steps' ``devices.deny`` list the node's
  GPUs (gres.conf File=) that are not the job's, so opening another job's GPU fails with EPERM.
  v2 filters devices by eBPF programs, which we do not load: the agent refuses the setting there.
- Processes (MaxPidsPerJob, cgroup.conf, default 8192): the job's ``pids.max``, its processes and
  threads on the node all counted, so a fork bomb is refused (EAGAIN) inside its own job and the
  node, its agent and the other jobs keep their share.
- Freezing: v1 ``freezer.state``, v2 ``cgroup.freeze``.
- Usage: CPU time (v1 ``cpuacct.usage``, v2 ``cpu.stat`` usage_usec) and peak memory (v1
  ``memory.max_usage_in_bytes``, v2 ``memory.peak``) of a step, its descendants included.

Controllers a constraint needs must be available (v1: mounted; v2: listed in ``cgroup.controllers``
of the mount point); the agent refuses to start otherwise, as slurmd does.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import logging
import os
import signal
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

log = logging.getLogger("wattsched.noded")

ROOT = "wattsched"
KILL_TRIES = 50  # rounds of freeze-signal-thaw in v1 before a job's processes are reported left over
MIB = 1024 * 1024


class CgroupError(RuntimeError):
    """The cgroup hierarchy cannot do what the configuration asks."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What a job's cgroup enforces on one node (None: not constrained)."""

    cpus: tuple[int, ...] | None = None
    memory_bytes: int | None = None
    swap_bytes: int | None = None  # memory + swap (v1 memsw) minus memory; None: swap not constrained
    denied_devices: tuple[str, ...] = ()  # v1 devices.deny lines ("c 195:1 rwm"): the node's other jobs' GPUs
    pids: int | None = None  # processes and threads of the whole job on the node (pids.max)


@dataclass(frozen=True, slots=True)
class StepUsage:
    user_cpu_s: float
    system_cpu_s: float
    max_rss_kb: int
    oom_killed: bool


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read(path: str, default: str = "") -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default


def _keyed(path: str) -> dict[str, int]:
    """A ``key value`` per line file (memory.events, cpu.stat, memory.oom_control)."""
    result = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            result[key] = int(value)
    return result


def _safe(name: str) -> str:
    """A path component from an admin's node or cluster name (config), never from a user."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return safe if safe.strip(".") else "_" * max(1, len(safe))  # never "", "." or ".."


def cpu_list(cpus: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


class Hierarchy(abc.ABC):
    """What v1 and v2 share: the job and step paths under each controller's root; what each does
    its own way (creating a step's groups, reading them, freezing and killing a job) is abstract."""

    controllers: tuple[str, ...] = ()

    def __init__(self, mount: str, constrain_cores: bool, constrain_ram: bool, constrain_devices: bool = False,
                 cluster: str = "cluster"):
        self.mount, self.cluster = mount, _safe(cluster)
        self.constrain_cores, self.constrain_ram = constrain_cores, constrain_ram
        self.constrain_devices = constrain_devices

    @abc.abstractmethod
    def _roots(self) -> Iterator[str]: ...

    @abc.abstractmethod
    def create(self, node: str, job_id: int, step: str, limits: Limits) -> list[str]:
        """Make the step's groups with the job's limits; returns the files its process joins by."""

    @abc.abstractmethod
    def freeze(self, node: str, job_id: int, frozen: bool) -> None: ...

    @abc.abstractmethod
    def kill(self, node: str, job_id: int) -> set[int]:
        """SIGKILL every process of the job on the node; returns those still there."""

    @abc.abstractmethod
    def job_usage(self, node: str, job_id: int) -> tuple[float, int]:
        """The job's CPU seconds and memory bytes on the node, all its steps together."""

    @abc.abstractmethod
    def usage(self, node: str, job_id: int, step: str) -> StepUsage: ...

    def job_paths(self, node: str, job_id: int) -> list[str]:
        return [os.path.join(root, ROOT, self.cluster, f"node_{_safe(node)}", f"job_{int(job_id)}")
                for root in self._roots()]

    def step_paths(self, node: str, job_id: int, step: str) -> list[str]:
        return [os.path.join(p, f"step_{_safe(step)}") for p in self.job_paths(node, job_id)]

    def procs_files(self, node: str, job_id: int, step: str) -> list[str]:
        """The files a step's process writes its pid into to join the step."""
        return [os.path.join(p, "cgroup.procs") for p in self.step_paths(node, job_id, step)]

    def pids(self, node: str, job_id: int) -> set[int]:
        """Every process of the job on the node (all steps)."""
        found: set[int] = set()
        for top in self.job_paths(node, job_id)[:1]:  # each hierarchy holds the same processes
            for folder, _dirs, files in os.walk(top):
                if "cgroup.procs" in files:
                    found.update(int(p) for p in _read(os.path.join(folder, "cgroup.procs")).split() if p.isdigit())
        return found

    def remove(self, node: str, job_id: int) -> bool:
        """Remove the job's cgroups (deepest first); False while a process is still in one."""
        ok = True
        for top in self.job_paths(node, job_id):
            for folder, _dirs, _files in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
                try:
                    os.rmdir(folder)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    ok = False
        return ok


class V1(Hierarchy):

    def __init__(self, mount: str, constrain_cores: bool, constrain_ram: bool, constrain_devices: bool = False,
                 cluster: str = "cluster"):
        super().__init__(mount, constrain_cores, constrain_ram, constrain_devices, cluster)
        wanted = ["pids", "freezer", "cpuacct", "memory"] + (["cpuset"] if constrain_cores else []) + \
            (["devices"] if constrain_devices else [])
        missing = [c for c in wanted if not os.path.isfile(os.path.join(mount, c, "cgroup.procs"))]
        if missing:
            raise CgroupError(f"cgroup v1 controllers not mounted under {mount}: {', '.join(missing)}")
        self.controllers = tuple(wanted)

    def _roots(self) -> Iterator[str]:
        return (os.path.join(self.mount, c) for c in self.controllers)

    def _ensure(self, path: str, cpuset: str | None) -> None:
        """Make ``path`` and its parents; a new cpuset folder takes its parent's CPUs and memory
        nodes (a v1 cpuset without them takes no process)."""
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            self._ensure(parent, None if cpuset is None else _read(os.path.join(parent, "..", "cpuset.cpus")))
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
        if cpuset is not None:
            mems = _read(os.path.join(parent, "cpuset.mems"))
            _write(os.path.join(path, "cpuset.mems"), mems)
            _write(os.path.join(path, "cpuset.cpus"), cpuset or _read(os.path.join(parent, "cpuset.cpus")))

    def create(self, node: str, job_id: int, step: str, limits: Limits) -> list[str]:
        for job_path, step_path in zip(self.job_paths(node, job_id), self.step_paths(node, job_id, step), strict=True):
            controller = job_path[len(self.mount) + 1:].split(os.sep, 1)[0]
            cpuset = None
            if controller == "cpuset":
                cpuset = cpu_list(limits.cpus) if limits.cpus else ""
            self._ensure(job_path, cpuset)
            self._ensure(step_path, "" if controller == "cpuset" else None)
            if controller == "memory" and limits.memory_bytes is not None:
                for path in (job_path, step_path):
                    self._memory(path, limits)
            if controller == "pids" and limits.pids:
                _write(os.path.join(job_path, "pids.max"), str(limits.pids))
            if controller == "devices":
                for path in (job_path, step_path):
                    for line in limits.denied_devices:
                        _write(os.path.join(path, "devices.deny"), line)
        return self.procs_files(node, job_id, step)

    @staticmethod
    def _memory(path: str, limits: Limits) -> None:
        assert limits.memory_bytes is not None
        # memsw must stay >= the memory limit: raise it first when it is there (swap accounting on)
        memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
        total = limits.memory_bytes + (limits.swap_bytes or 0)
        if os.path.exists(memsw):
            _write(memsw, "-1")
        _write(os.path.join(path, "memory.limit_in_bytes"), str(limits.memory_bytes))
        if os.path.exists(memsw) and limits.swap_bytes is not None:
            _write(memsw, str(total))

    def freeze(self, node: str, job_id: int, frozen: bool) -> None:
        _write(os.path.join(self.job_paths(node, job_id)[self.controllers.index("freezer")], "freezer.state"),
               "FROZEN" if frozen else "THAWED")

    def kill(self, node: str, job_id: int) -> set[int]:
        """SIGKILL every process of the job: freeze so none can fork meanwhile, signal, thaw so the
        signals are delivered. Returns the pids still there after the last round."""
        left: set[int] = set()
        for _ in range(KILL_TRIES):
            left = self.pids(node, job_id)
            if not left:
                return left
            with contextlib.suppress(OSError):
                self.freeze(node, job_id, True)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.freeze(node, job_id, False)
            time.sleep(0.01)
        return self.pids(node, job_id)

    def job_usage(self, node: str, job_id: int) -> tuple[float, int]:
        paths = dict(zip(self.controllers, self.job_paths(node, job_id), strict=True))
        with open(os.path.join(paths["cpuacct"], "cpuacct.usage")) as handle:
            cpu_ns = int(handle.read())
        memory = int(_read(os.path.join(paths["memory"], "memory.usage_in_bytes"), "0") or 0)
        return cpu_ns / 1e9, memory // 1024

    def usage(self, node: str, job_id: int, step: str) -> StepUsage:
        paths = dict(zip(self.controllers, self.step_paths(node, job_id, step), strict=True))
        ticks = _keyed(os.path.join(paths["cpuacct"], "cpuacct.stat"))
        hz = os.sysconf("SC_CLK_TCK")
        peak = int(_read(os.path.join(paths["memory"], "memory.max_usage_in_bytes"), "0") or 0)
        oom = _keyed(os.path.join(paths["memory"], "memory.oom_control")).get("oom_kill", 0)
        return StepUsage(ticks.get("user", 0) / hz, ticks.get("system", 0) / hz, peak // 1024, oom > 0)


class V2(Hierarchy):

    def __init__(self, mount: str, constrain_cores: bool, constrain_ram: bool, constrain_devices: bool = False,
                 cluster: str = "cluster"):
        super().__init__(mount, constrain_cores, constrain_ram, constrain_devices, cluster)
        if constrain_devices:
            # v2 has no devices controller: access is filtered by an eBPF program attached to the
            # cgroup, which needs a BPF loader we do not ship
            raise CgroupError("ConstrainDevices needs cgroup v1 here (on v2 devices are filtered by eBPF "
                              "programs, which wattsched does not load); set CgroupPlugin=cgroup/v1 or "
                              "ConstrainDevices=no")
        available = set(_read(os.path.join(mount, "cgroup.controllers")).split())
        wanted = {"pids"} | ({"cpuset"} if constrain_cores else set()) | ({"memory"} if constrain_ram else set())
        missing = sorted(wanted - available - {"pids"})
        if missing:
            raise CgroupError(f"cgroup v2 at {mount} lacks the controllers {', '.join(missing)} "
                              f"(available: {' '.join(sorted(available)) or 'none'})")
        self.controllers = tuple(sorted(wanted & available))

    def _roots(self) -> Iterator[str]:
        return iter([self.mount])

    def _ensure(self, path: str) -> None:
        """Make ``path`` and its parents, each parent passing the controllers down (processes
        live only in the step folders, the leaves, as v2 requires once controllers are on)."""
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        self._ensure(parent)
        if self.controllers:
            _write(os.path.join(parent, "cgroup.subtree_control"), " ".join("+" + c for c in self.controllers))
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)

    def create(self, node: str, job_id: int, step: str, limits: Limits) -> list[str]:
        job_path = self.job_paths(node, job_id)[0]
        step_path = self.step_paths(node, job_id, step)[0]
        self._ensure(step_path)
        if "pids" in self.controllers and limits.pids:
            _write(os.path.join(job_path, "pids.max"), str(limits.pids))
        for path in (job_path, step_path):
            if "cpuset" in self.controllers and limits.cpus and path == job_path:
                _write(os.path.join(path, "cpuset.cpus"), cpu_list(limits.cpus))
            if "memory" in self.controllers and limits.memory_bytes is not None:
                _write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
                if limits.swap_bytes is not None and os.path.exists(os.path.join(path, "memory.swap.max")):
                    _write(os.path.join(path, "memory.swap.max"), str(limits.swap_bytes))
        return self.procs_files(node, job_id, step)

    def freeze(self, node: str, job_id: int, frozen: bool) -> None:
        _write(os.path.join(self.job_paths(node, job_id)[0], "cgroup.freeze"), "1" if frozen else "0")

    def kill(self, node: str, job_id: int) -> set[int]:
        path = self.job_paths(node, job_id)[0]
        if os.path.exists(os.path.join(path, "cgroup.kill")):
            with contextlib.suppress(FileNotFoundError):
                _write(os.path.join(path, "cgroup.kill"), "1")
        for _ in range(KILL_TRIES):
            left = self.pids(node, job_id)
            if not left:
                return left
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        return self.pids(node, job_id)

    def job_usage(self, node: str, job_id: int) -> tuple[float, int]:
        path = self.job_paths(node, job_id)[0]
        with open(os.path.join(path, "cpu.stat")) as handle:
            cpu_us = next(int(line.split()[1]) for line in handle if line.startswith("usage_usec"))
        return cpu_us / 1e6, int(_read(os.path.join(path, "memory.current"), "0") or 0) // 1024

    def usage(self, node: str, job_id: int, step: str) -> StepUsage:
        path = self.step_paths(node, job_id, step)[0]
        cpu = _keyed(os.path.join(path, "cpu.stat"))
        peak = int(_read(os.path.join(path, "memory.peak"), "0") or 0)
        oom = _keyed(os.path.join(path, "memory.events")).get("oom_kill", 0)
        return StepUsage(cpu.get("user_usec", 0) / 1e6, cpu.get("system_usec", 0) / 1e6, peak // 1024, oom > 0)


def open_hierarchy(plugin: str, mount: str, constrain_cores: bool, constrain_ram: bool,
                   constrain_devices: bool = False, cluster: str = "cluster") -> Hierarchy:
    """The hierarchy CgroupPlugin names (autodetect: v2 when the mount point is a cgroup2 root)."""
    if not os.path.isdir(mount):
        raise CgroupError(f"CgroupMountpoint {mount} does not exist")
    if os.geteuid() != 0:
        raise CgroupError("proctrack/cgroup and task/cgroup need the agent to run as root")
    if plugin == "autodetect":
        plugin = "cgroup/v2" if os.path.exists(os.path.join(mount, "cgroup.controllers")) else "cgroup/v1"
    kind = V2 if plugin == "cgroup/v2" else V1
    return kind(mount, constrain_cores, constrain_ram, constrain_devices, cluster)


class JobCgroups:
    """The agent's use of the hierarchy: each job's limits from its allocation (cgroup.conf's
    rules), the files its launches join, its steps' usage, and its end (every process killed,
    the folders removed)."""

    def __init__(self, config, nodes: dict):
        self.config, self.nodes = config, nodes
        self.constrain_cores = config.constrain_cores and "task/cgroup" in config.task_plugin
        self.constrain_ram = config.constrain_ram_space and "task/cgroup" in config.task_plugin
        self.constrain_devices = config.gpus_hidden
        self.hierarchy = open_hierarchy(config.cgroup_plugin, config.cgroup_mountpoint, self.constrain_cores,
                                        self.constrain_ram, self.constrain_devices, config.cluster_name)

    def denied_devices(self, node: str, gpu_ids: list[int]) -> tuple[str, ...]:
        """devices.deny lines for the node's GPUs that are not the job's (ConstrainDevices). The
        device files are the admin's gres.conf's, read as root: no user names them."""
        if not self.constrain_devices:
            return ()
        lines = []
        for device in self.nodes[node].gpus:
            if device.index in gpu_ids or not device.file:
                continue
            try:
                info = os.stat(device.file)
            except OSError as exc:
                raise CgroupError(f"GPU device {device.file} of {node}: {exc.strerror}") from exc
            if not stat.S_ISCHR(info.st_mode):
                raise CgroupError(f"GPU device {device.file} of {node} is not a character device")
            lines.append(f"c {os.major(info.st_rdev)}:{os.minor(info.st_rdev)} rwm")
        return tuple(lines)

    def limits(self, node: str, cpu_ids: list[int], mem_mb: int) -> Limits:
        """cgroup.conf's rules: the request x AllowedRAMSpace %, within [MinRAMSpace, MaxRAMPercent of
        the node]; no request means the node's memory (as Slurm without DefMemPerCPU)."""
        memory = swap = None
        if self.constrain_ram:
            real_mb = self.nodes[node].real_memory_mb
            asked = mem_mb * self.config.allowed_ram_space / 100 if mem_mb else real_mb
            top = real_mb * self.config.max_ram_percent / 100
            memory = int(max(self.config.min_ram_space_mb, min(asked, top)) * MIB)
            if self.config.constrain_swap_space:
                swap = int((mem_mb or real_mb) * self.config.allowed_swap_space / 100 * MIB)
        return Limits(tuple(cpu_ids) if self.constrain_cores else None, memory, swap,
                      pids=self.config.max_pids_per_job or None)

    def setup(self, node: str, job_id: int, step: str, cpu_ids: list[int], mem_mb: int,
              gpu_ids: Sequence[int] = ()) -> list[str]:
        """The job's and step's cgroups, made with their limits; the files the step's processes join."""
        limits = replace(self.limits(node, cpu_ids, mem_mb), denied_devices=self.denied_devices(node, list(gpu_ids)))
        return self.hierarchy.create(node, job_id, step, limits)

    def usage(self, node: str, job_id: int, step: str) -> StepUsage | None:
        try:
            return self.hierarchy.usage(node, job_id, step)
        except (OSError, ValueError):
            return None

    def pids(self, node: str, job_id: int) -> set[int]:
        return self.hierarchy.pids(node, job_id)

    def freeze(self, node: str, job_id: int, frozen: bool) -> None:
        self.hierarchy.freeze(node, job_id, frozen)

    def job_usage(self, node: str, job_id: int) -> tuple[float, int] | None:
        """CPU seconds and resident memory (KiB) of all the job's processes on the node, from its
        cgroup (None while it has none): what the energy split and sstat use."""
        try:
            return self.hierarchy.job_usage(node, job_id)
        except (OSError, ValueError):
            return None

    def jobs(self, node: str) -> list[int]:
        """The jobs that have a cgroup on the node (left by an agent that was stopped, say)."""
        folder = os.path.dirname(self.hierarchy.job_paths(node, 0)[0])
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        return sorted(int(n[4:]) for n in names if n.startswith("job_") and n[4:].isdigit())

    def end(self, node: str, job_id: int) -> bool:
        """Kill whatever of the job is left on the node and remove its cgroups; True when done."""
        left = self.hierarchy.kill(node, job_id)
        if left:
            log.error("job processes survive SIGKILL", extra={"job": job_id, "node": node,
                                                              "pids": ",".join(map(str, sorted(left)))})
            return False
        return self.hierarchy.remove(node, job_id)

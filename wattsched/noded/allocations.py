"""The jobs allocated on an agent's nodes: their CPUs, CPU frequency and power profile.

When a job starts, every agent hosting one of its nodes gets its allocation. For each node the
agent picks the job's CPUs (the lowest free ones; with task/cgroup and ConstrainCores they are the
job's cpuset, else only the agent's bookkeeping), sets their frequency as ``--cpu-freq`` (or CpuFreqDef, or the
frequency the controller fitted to the power cap) asks, and opens the node's profile file when
``--profile`` asks for one. The CPUs' previous cpufreq settings are written to the spool
*before* they change, so that when the job ends on the node (batch end, cancel, time limit,
node clean-up) they are restored, and an agent that crashed restores them after its restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from wattsched import cpufreq, energypolicy, powermodel
from wattsched.api import JobAllocation
from wattsched.config import Config, NodeConf
from wattsched.noded.cpufreq import CpuFreqSysfs, layout_tree
from wattsched.profiles import h5profile

log = logging.getLogger("wattsched.noded")


@dataclass
class NodeJob:
    job_id: int
    node: str
    uid: int
    user: str
    start: float
    cpus: int
    cpu_ids: list[int]
    cpu_freq: str = ""
    mem_mb: int = 0
    saved: dict[str, dict[str, str]] = field(default_factory=dict)  # cpu id -> previous cpufreq settings
    profile: list[str] = field(default_factory=list)
    energy_s: int = 0
    task_s: int = 0
    joules_at_start: float | None = None
    gpu_ids: list[int] = field(default_factory=list)  # its GPUs' numbers on the node
    # its energy policy (noded.policies): as the controller sent it, the ceiling, the latest choice
    energy_policy: str = "monitoring"
    energy_setting: float = 0.0
    energy_start_khz: int = 0
    app_model: list[list[float]] = field(default_factory=list)  # its application model on a virtual node
    memory_bound: float = 0.0  # the model's share now
    top_khz: int = 0  # the highest frequency it may run at (its CPUs' top, CpuFreqDef, the power cap)
    policy_khz: int = 0
    decided_bound: float = 0.0  # the memory-bound share of the signature its policy decided on
    time_factor: float = 0.0
    energy_factor: float = 0.0


class Allocations:
    def __init__(self, config: Config, nodes: dict[str, NodeConf], spool: str):
        self.config, self.nodes, self.spool = config, nodes, spool
        self.jobs: dict[tuple[str, int], NodeJob] = {}
        self.sysfs = {name: self._sysfs(node) for name, node in nodes.items()}  # laid out on first use
        self.profiles: dict[tuple[str, int], h5profile.NodeProfile] = {}
        self._warned = False
        self.power_limit: Callable[[str], float | None] | None = None  # a virtual node's limit (watts)

    def _sysfs(self, node: NodeConf) -> CpuFreqSysfs:
        if self.config.emulated_nodes:
            return CpuFreqSysfs(os.path.join(self.spool, node.name, "sysfs"), emulated=True)
        return CpuFreqSysfs(self.config.cpu_freq_sysfs_root or "/")

    def _ladder(self, node: str) -> list[int]:
        return cpufreq.ladder(self.nodes[node].cpu_freq_watts)

    def tree(self, node: str) -> CpuFreqSysfs:
        """The node's cpufreq tree; a virtual node's is laid out the first time it is needed."""
        sysfs = self.sysfs[node]
        if sysfs.emulated and not sysfs.present():
            layout_tree(sysfs.root, self.nodes[node].cpus, self._ladder(node))
        return sysfs

    def _record(self, job: NodeJob) -> str:
        return os.path.join(self.spool, job.node, "alloc", f"{job.job_id}.json")

    def _save(self, job: NodeJob) -> None:
        path = self._record(job)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as handle:
            json.dump(asdict(job), handle)
        os.replace(path + ".tmp", path)

    # --- start and end -------------------------------------------------------------------------

    def add(self, alloc: JobAllocation) -> list[NodeJob]:
        """Take a job's allocation on our nodes (again: nothing changes)."""
        added = []
        for node, cpus in alloc.nodes.items():
            if node not in self.nodes or (node, alloc.job_id) in self.jobs:
                continue
            job = NodeJob(alloc.job_id, node, alloc.uid, alloc.user, alloc.start_time, cpus,
                          self._free_cpus(node, cpus), alloc.cpu_freq or self.config.cpu_freq_def, alloc.mem_mb,
                          profile=list(alloc.profile), energy_s=alloc.profile_energy_s, task_s=alloc.profile_task_s,
                          gpu_ids=list(alloc.gpus.get(node, [])), energy_policy=alloc.energy_policy,
                          energy_setting=alloc.energy_setting, energy_start_khz=alloc.energy_start_khz,
                          app_model=[list(p) for p in alloc.app_model],
                          memory_bound=energypolicy.share_at(alloc.app_model, 0.0))
            self.jobs[(node, job.job_id)] = job
            self._apply_freq(job)
            job.top_khz = self.freq_of(job)[0]
            self._open_profile(job)
            added.append(job)
        return added

    def _free_cpus(self, node: str, count: int) -> list[int]:
        taken = {c for (n, _j), job in self.jobs.items() if n == node for c in job.cpu_ids}
        total = self.nodes[node].cpus
        free = [c for c in range(total) if c not in taken]
        return (free or list(range(total)))[:max(1, count)]

    def _apply_freq(self, job: NodeJob) -> None:
        request = cpufreq.parse(job.cpu_freq) if job.cpu_freq else None
        if request is None:
            self._save(job)
            return
        sysfs = self.tree(job.node)
        if not sysfs.present():
            if not self._warned:
                log.warning("no cpufreq sysfs: --cpu-freq is not applied", extra={"root": sysfs.base})
                self._warned = True
            self._save(job)
            return
        try:
            setting = cpufreq.resolve(request, sysfs.available(job.cpu_ids[0]))
            if not job.saved:  # what the CPUs had before the job (not what a change while it ran left)
                job.saved = {str(c): sysfs.settings(c) for c in job.cpu_ids}
            self._save(job)  # the originals are on disk before anything changes
            sysfs.apply(job.cpu_ids, setting)
        except (OSError, cpufreq.FreqError) as exc:
            log.warning("cpu frequency not set", extra={"job": job.job_id, "node": job.node, "error": str(exc)})
            self._restore(job)

    def set_freq(self, job: NodeJob, khz: int | None) -> None:
        """A running job's CPUs to ``khz``, or back to what they had before it (None)."""
        if khz is None:
            job.cpu_freq = ""
            self._restore(job)
            job.saved = {}
            self._save(job)
        else:
            job.cpu_freq = str(khz)
            self._apply_freq(job)

    def _restore(self, job: NodeJob) -> None:
        if job.saved:
            try:
                self.sysfs[job.node].restore({int(c): v for c, v in job.saved.items()})
            except OSError as exc:
                log.error("cpu frequency not restored", extra={"job": job.job_id, "node": job.node,
                                                               "error": str(exc)})

    def _open_profile(self, job: NodeJob) -> None:
        if not job.profile or self.config.acct_gather_profile_type != "acct_gather_profile/hdf5":
            return
        series = [s.capitalize() for s in job.profile] + (["Signature"] if "energy" in job.profile else [])
        try:
            self.profiles[(job.node, job.job_id)] = h5profile.NodeProfile(
                self.config.profile_dir, job.job_id, job.node, job.user, job.start, series,
                {"CPUFreqRequest": job.cpu_freq})
        except (OSError, ValueError) as exc:
            log.warning("profile not written", extra={"job": job.job_id, "node": job.node, "error": str(exc)})

    def remove(self, node: str, job_id: int) -> None:
        """The job is over on ``node``: restore its CPUs and close its profile."""
        job = self.jobs.pop((node, job_id), None)
        if job is None:
            return
        profile = self.profiles.pop((node, job_id), None)
        if profile is not None:
            profile.close()
        self._restore(job)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._record(job))

    def recover(self) -> None:
        """After a restart: the allocations of jobs that may still run, with their saved originals
        (restored when the controller says the job is over here)."""
        for node in self.nodes:
            folder = os.path.join(self.spool, node, "alloc")
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                try:
                    with open(os.path.join(folder, name)) as handle:
                        job = NodeJob(**json.load(handle))
                except (OSError, ValueError, TypeError):
                    continue
                self.jobs[(node, job.job_id)] = job
                job.top_khz = job.top_khz or self.freq_of(job)[0]  # saved before it was known: as it runs now
                self._open_profile(job)

    # --- what the meter, the profiler and the throttle need ----------------------------------

    def freq_of(self, job: NodeJob) -> tuple[int, int]:
        """(current kHz, highest kHz) of the job's CPUs; (0, 0) without cpufreq."""
        sysfs = self.sysfs[job.node]
        if sysfs.emulated and not sysfs.present():
            top = max(self._ladder(job.node))  # untouched: the performance governor's top speed
            return top, top
        try:
            return sysfs.current_khz(job.cpu_ids[0]), sysfs.max_khz(job.cpu_ids[0])
        except (OSError, ValueError, IndexError):
            return 0, 0

    def running_freq(self, job: NodeJob) -> tuple[int, int]:
        """(kHz, highest kHz) the job's CPUs run at: as set, or on a virtual node whose power is
        limited, as slow as the limit makes them (noded.powerlimits), counted as if they were
        fully busy (RAPL's own loop would let a job that waits on memory run faster)."""
        khz, f_max = self.freq_of(job)
        limit = self.power_limit(job.node) if self.power_limit is not None else None
        return powermodel.limited_khz(self.nodes[job.node], khz, f_max, limit), f_max

    def on_node(self, node: str) -> list[NodeJob]:
        return [job for (n, _j), job in self.jobs.items() if n == node]

"""The agent: the nodes it hosts, the jobs and steps on them, their energy meter, and what it
does with the controller's replies (its link to the controllers, heartbeats and outbox of job
ends, is noded.ctldlink).

One agent process can host many virtual nodes (emulation) or just its own host. The jobs
allocated on its nodes (noded.allocations) get their CPU frequency and power profile there;
on virtual nodes a job below its CPUs' highest frequency is slowed to match (noded.throttle).
:func:`build` sets up the host and its parts; the agent then only wires them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, replace

from wattsched import cpubind, energypolicy, gres, plugins, rlimits, switching
from wattsched.api import AgentHeartbeat, BatchLaunch, JobAllocation, JobEvent, JobUsage, NodeReport
from wattsched.config import Config, NodeConf
from wattsched.noded import chassis, gpus, policies, procs, steps
from wattsched.noded.allocations import Allocations, NodeJob
from wattsched.noded.batch import BatchRunner
from wattsched.noded.cgroup import CgroupError, JobCgroups
from wattsched.noded.ctldlink import ControllerLink, Outbox
from wattsched.noded.energymeter import EnergyMeter, JobLoad
from wattsched.noded.gpus import GpuMeter
from wattsched.noded.jobshere import JobsHere
from wattsched.noded.policies import Policies, Sample
from wattsched.noded.powerlimits import NodeLimits
from wattsched.noded.profiler import Profiler
from wattsched.noded.prologepilog import PrologEpilog
from wattsched.noded.throttle import Throttle
from wattsched.noded.virtualhost import VirtualHosts
from wattsched.plugins.acct_gather_energy.emulated import EmulatedEnergy

log = logging.getLogger("wattsched.noded")

def confinement(config: Config, nodes: dict[str, NodeConf]) -> JobCgroups | None:
    """The jobs' control groups (proctrack/cgroup, task/cgroup). A real node that cannot have them
    does not start, as slurmd does not; an emulated cluster (one command on any host, a container's
    included) tracks its jobs by process group instead, saying so: the documented fallback."""
    if not config.cgroups:
        return None
    try:
        return JobCgroups(config, nodes)
    except CgroupError as exc:
        if not config.emulated_nodes:
            raise
        log.warning("control groups unavailable here: jobs are tracked by process group (a process that "
                    "leaves its group outlives its job, and no pids limit applies)", extra={"error": str(exc)})
        return None


def for_node(config: Config, node: str) -> Config:
    """The configuration as the agent of ``node`` reads it: SlurmdSpoolDir and TmpFS take %n as
    Slurm's do, each of many slurmds on one host its own."""
    return replace(config, slurmd_spool_dir=node_path(config.slurmd_spool_dir, node),
                   tmp_fs=node_path(config.tmp_fs, node))


def node_path(path: str, node: str) -> str:
    """SlurmdLogFile's, SlurmdPidFile's, SlurmdSpoolDir's and TmpFS's %n (the node's name) and %h
    (the host's), as Slurm's."""
    return path.replace("%n", node).replace("%h", socket.gethostname().split(".")[0])


@dataclass(frozen=True)
class Host:
    """What an agent finds and sets up on its host before it runs anything (see :func:`build`)."""

    nodes: dict[str, NodeConf]  # the nodes it hosts, their GPUs detected where NVML says
    outbox: Outbox
    cgroups: JobCgroups | None
    limits: NodeLimits
    virtual: VirtualHosts
    energy_plugin: object  # AcctGatherEnergyType's
    model: EmulatedEnergy | None  # the power model of virtual nodes (or the plugin itself)


def build(config: Config, nodes: list[NodeConf], url: str, key: bytes) -> Agent:
    """The agent of ``nodes``, reached at ``url``: the one place that touches its host before it
    runs (its GPUs detected, its spool folders made private, the jobs' control groups, the nodes'
    power limits and virtual hosts, its energy plugin loaded). CgroupError, GpuError: it cannot
    start."""
    hosted = {n.name: n for n in nodes}
    if config.gres_autodetect == "nvml" and not config.emulated_nodes:
        hosted = gpus.detect(hosted)
    spool = config.slurmd_spool_dir
    outbox = Outbox(spool)
    # users reach their jobs' scratch folders below it, and list nothing; the rest is root's alone
    os.chmod(spool, 0o711)
    # proctrack/cgroup, task/cgroup: every job and step in its own cgroup (CgroupError: no start)
    cgroups = confinement(config, hosted)
    limits = NodeLimits(hosted, spool, config.energy_sysfs_root or "/", config.emulated_nodes)
    # virtual nodes (several on this host, or emulated): each one's jobs see a host of their own
    virtual = VirtualHosts(spool, list(config.nodes), config.emulated_nodes or len(hosted) > 1)
    plugin = plugins.load(config.acct_gather_energy_type, config=config, nodes=nodes)
    model = plugin if isinstance(plugin, EmulatedEnergy) else (
        EmulatedEnergy(config, nodes) if config.emulated_nodes else None)
    host = Host(nodes=hosted, outbox=outbox, cgroups=cgroups, limits=limits, virtual=virtual, energy_plugin=plugin,
                model=model)
    return Agent(config, host, url, key)


class Agent:
    """A node agent's parts and the jobs on its nodes; built by :func:`build`."""

    def __init__(self, config: Config, host: Host, url: str, key: bytes):
        self.config, self.nodes, self.url, self.key = config, host.nodes, url, key
        self.boot_time = time.time()
        self.spool = config.slurmd_spool_dir
        self.outbox = host.outbox
        self.link = ControllerLink(config, key, self.outbox)
        self.cgroups = host.cgroups
        self.limits = host.limits
        self.virtual = host.virtual
        self.task_scripts = {k: v for k, v in (("task_prolog", config.task_prolog),
                                                ("task_epilog", config.task_epilog)) if v}
        self.batch = BatchRunner(self.spool, config.kill_wait_s, self._job_ended, self.confine_batch,
                                 self.task_scripts, self.propagated)
        # task/affinity binds tasks to CPUs on real nodes (a virtual node's CPUs are not the host's)
        self.binds = "task/affinity" in config.task_plugin and not config.emulated_nodes
        self.jobs_here = JobsHere()
        self.prolog_epilog = PrologEpilog(config, self.spool, self.jobs_here, self.link.report, self._release)
        # (job, step, node) -> stdin pipes of the step's tasks that read srun's input
        self.step_inputs: dict[tuple[int, int, str], list] = {}
        self.live_steps: dict[tuple[int, int, str], steps.LiveStep] = {}  # (job, step, node): running here
        # over the allocations, shared with the meter and profiler threads; taken before the meter's
        # own lock, never while a thread holds that one
        self.lock = threading.Lock()
        self.allocations = Allocations(config, self.nodes, self.spool)
        self.allocations.power_limit = self.limits.emulated_limit
        model = host.model
        if model is not None and config.emulated_nodes:
            # a virtual node draws its chassis' watts while off or switching (only emulated BMCs switch them)
            model.chassis_state = self._chassis_state
        self.base_interval_s = float(config.energy_ipmi_frequency_s or config.acct_gather_node_freq_s) \
            if config.acct_gather_energy_type.endswith("/ipmi") else float(config.acct_gather_node_freq_s)
        read_timeout_s = config.energy_redfish_timeout_s if config.acct_gather_energy_type.endswith("/redfish") \
            else config.energy_ipmi_timeout_s
        self.energy = EnergyMeter(host.energy_plugin, {n.name: n.cpus for n in self.nodes.values()}, self.spool,
                                  self.base_interval_s, self._job_loads, read_timeout_s=float(read_timeout_s),
                                  model=model, calc_adjustment=config.energy_ipmi_calc_adjustment
                                  and config.acct_gather_energy_type.endswith("/ipmi"),
                                  cgroup_usage=self.cgroups.job_usage if self.cgroups else None,
                                  gpus=GpuMeter(self.nodes, config.emulated_nodes, self._job_gpus,
                                                limit_of=self.limits.gpu_limit))
        self.throttle = Throttle(lambda key: self.job_pgids(*key))
        # a job's CPUs are its own (counted for its signature) when cgroups or affinity confine it to them
        confined = bool(config.cgroups and config.constrain_cores) or self.binds
        self.policies = Policies(self.nodes, config.emulated_nodes, confined)
        self.profiler = Profiler(self.allocations, self.energy, self.lock, self.policies)

    def job_pgids(self, node: str, job_id: int) -> set[int]:
        """The process groups of a job on a node: its batch script's and its step tasks'."""
        groups = set(self.jobs_here.get(node, job_id).pgids or ())
        batch = self.batch.jobs.get(job_id)
        if batch is not None and batch.node == node and (pgid := self.batch.script_pgid(batch)):
            groups.add(pgid)
        return groups

    def _job_gpus(self) -> dict[str, dict[int, list[int]]]:
        """Per node, each job's GPU numbers there."""
        result: dict[str, dict[int, list[int]]] = {}
        with self.lock:
            for (node, job_id), job in self.allocations.jobs.items():
                if job.gpu_ids:
                    result.setdefault(node, {})[job_id] = list(job.gpu_ids)
        return result

    def _job_loads(self) -> dict[str, dict[int, JobLoad]]:
        """Per node, each job's process groups, the (current, highest) kHz of its CPUs and its share
        of them (noded.policies.speed)."""
        loads: dict[str, dict[int, JobLoad]] = {name: {} for name in self.nodes}
        with self.lock:
            for (node, job_id), held in self.allocations.jobs.items():
                khz, f_max = self.allocations.running_freq(held)
                loads[node][job_id] = (self.job_pgids(node, job_id), khz, f_max, policies.speed(held, khz, f_max))
        for batch in list(self.batch.jobs.values()):  # jobs launched before their allocation arrived
            if pgid := self.batch.script_pgid(batch):
                loads.setdefault(batch.node, {}).setdefault(batch.job_id, ({pgid}, 0, 0, 1.0))
        for (node, job_id), record in list(self.jobs_here.records.items()):
            if record.pgids is not None:
                loads.setdefault(node, {}).setdefault(job_id, (set(record.pgids), 0, 0, 1.0))
        return loads

    def _throttle(self, held: NodeJob) -> None:
        """A virtual node's job gets the share of the CPU its frequency and application model give it."""
        if self.config.emulated_nodes:
            khz, f_max = self.allocations.running_freq(held)
            if khz and f_max:
                self.throttle.set((held.node, held.job_id), policies.speed(held, khz, f_max))

    def _apply_policies(self) -> None:
        """After a poll of the meter: each job's signature, and the frequency its policy chooses."""
        busy, watts = self.energy.busy_and_watts()
        node_busy: dict[str, float] = {}
        for (node, _job_id), share in busy.items():
            node_busy[node] = node_busy.get(node, 0.0) + share
        now = time.time()
        with self.lock:
            for key, held in list(self.allocations.jobs.items()):
                if self.config.emulated_nodes and held.app_model:  # a virtual job's model moves to its next phase
                    bound = energypolicy.share_at(held.app_model, now - held.start)
                    if bound != held.memory_bound:
                        held.memory_bound = bound
                        self._throttle(held)
                if key not in busy:
                    continue
                khz, f_max = self.allocations.freq_of(held)
                decision = self.policies.decide(held, Sample(khz, f_max, busy[key], node_busy[held.node],
                                                             watts.get(held.node, 0.0)))
                if decision is not None and decision.khz != khz:
                    log.info("energy policy sets the frequency", extra={
                        "job": held.job_id, "node": held.node, "policy": held.energy_policy, "khz": decision.khz,
                        "time_factor": round(decision.time_factor, 3),
                        "energy_factor": round(decision.energy_factor, 3)})
                    self.allocations.set_freq(held, decision.khz)
                    self._throttle(held)

    @staticmethod
    def _usage(node: str, usage: list[JobUsage], signed: dict[tuple[str, int], dict[str, float | int]]
               ) -> list[JobUsage]:
        """The node's jobs' usage, with the signatures and policies' choices of those ``signed``."""
        return [u.model_copy(update=fields) if (fields := signed.get((node, u.job_id))) else u for u in usage]

    def reconfigure(self, config: Config) -> None:
        """scontrol reconfigure: what the agent reads job by job takes the file's new values at once
        (Prolog, Epilog and their timeout, TaskProlog, TaskEpilog); its nodes, port, spool,
        confinement and meters change at its next start, as Slurm's slurmd needs a restart for them."""
        self.config = self.prolog_epilog.config = for_node(config, next(iter(self.nodes)))
        self.task_scripts.clear()  # (the batch runner holds this very dict)
        self.task_scripts.update({k: v for k, v in (("task_prolog", config.task_prolog),
                                                    ("task_epilog", config.task_epilog)) if v})

    def allocate(self, alloc: JobAllocation) -> None:
        """A job starts on some of our nodes: its CPUs, frequency and profile there; under the
        moving budget, its nodes' limits first (the cap counted them at those)."""
        for node in alloc.nodes:
            self.jobs_here.again(node, alloc.job_id)  # a requeued job runs here again
        for node, watts in alloc.power_limits.items():
            if node in self.nodes and node in alloc.nodes:
                self.limits.order(node, watts, None, time.time(), alloc.gpus.get(node, ()))
        with self.lock:
            added = self.allocations.add(alloc)
            for job in added:
                record = self.jobs_here.make(job.node, job.job_id)
                record.alloc, waiter, record.arrival = alloc, record.arrival, None
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
                if self.config.epilog:  # an Epilog owed survives a restart of the agent
                    self.prolog_epilog.owe_epilog(job.node, alloc)
                if self.config.prolog:
                    self.prolog_epilog.start_prolog(job.node, alloc)
                first = self.policies.first_khz(job, job.top_khz) if job.top_khz else 0
                if first and first != job.top_khz:  # min_time starts lower
                    self.allocations.set_freq(job, first)
                self.policies.started(job, self.allocations.freq_of(job)[0])
                self._throttle(job)
            self._sampling_interval()

    # --- batch scripts and steps -------------------------------------------------------------------

    def launch_batch(self, req: BatchLaunch) -> None:
        """Start a batch script once its node's Prolog has succeeded."""
        future = self.jobs_here.get(req.node, req.job_id).prolog
        if future is None or future.done():
            if future is None or future.result():
                self.batch.launch(req)
            return

        async def after_prolog() -> None:
            if await self.prolog_epilog.prolog_ok(req.node, req.job_id):
                self.batch.launch(req)

        asyncio.get_running_loop().create_task(after_prolog())

    def join_step(self, node: str, job_id: int, step: str) -> list[str]:
        """The cgroup files a step's processes write their pid into (none without cgroups): the
        job's and step's cgroups are made with the limits of its allocation on the node."""
        if self.cgroups is None:
            return []
        with self.lock:
            job = self.allocations.jobs.get((node, job_id))
            cpu_ids, mem_mb, gpu_ids = (list(job.cpu_ids), job.mem_mb, list(job.gpu_ids)) if job else ([], 0, [])
        return self.cgroups.setup(node, job_id, step, cpu_ids, mem_mb, gpu_ids)

    def gpu_environment(self, node: str, job_id: int) -> dict[str, str]:
        """The job's GPUs on the node as its tasks are told (wattsched.gres.environment)."""
        with self.lock:
            job = self.allocations.jobs.get((node, job_id))
            indices = list(job.gpu_ids) if job else []
        return gres.environment(indices, self.cgroups is not None and self.config.gpus_hidden)

    def propagated(self, limits: dict[str, int]) -> dict[str, int]:
        """Of a job's or srun's soft limits, those PropagateResourceLimits(Except) propagates."""
        return rlimits.chosen(limits, self.config.propagate_resource_limits,
                              self.config.propagate_resource_limits_except)

    def confine_batch(self, node: str, job_id: int, uid: int, gid: int) -> dict:
        """What the batch script's process does before it becomes the user: join the job's cgroups,
        take a virtual node's identity and (task/affinity) bind itself to the job's CPUs on the node."""
        extra: dict = {"cgroup_procs": self.join_step(node, job_id, "batch"),
                       **self.virtual.identity(node, job_id, uid, gid)}
        if self.binds:
            with self.lock:
                job = self.allocations.jobs.get((node, job_id))
                extra["cpu_bind"] = list(job.cpu_ids) if job else []
        return extra

    def task_binding(self, node: str, job_id: int, text: str, tasks: int) -> cpubind.TaskBinding:
        """The CPUs each of a step's local tasks is bound to (``--cpu-bind``, else TaskPluginParam's
        type), the SLURM_CPU_BIND* variables and whether tasks report their binding; nothing
        without task/affinity. ValueError: a bad request, or CPUs outside the job's allocation."""
        if not self.binds:
            return cpubind.unbound(tasks)
        bind = cpubind.parse(text)
        if not bind.kind:
            default = next((p.lower() for p in self.config.task_plugin_param if p in ("Cores", "Sockets", "Threads")),
                           "none")
            bind = cpubind.CpuBind(default, "Verbose" in self.config.task_plugin_param or bind.verbose)
        with self.lock:
            job = self.allocations.jobs.get((node, job_id))
            cpus = list(job.cpu_ids) if job else []
        conf = self.nodes[node]
        sets = cpubind.task_cpus(bind, cpus, tasks, conf.cores_per_socket * conf.threads_per_core)
        if any(not set(s) <= set(cpus) for s in sets):
            raise ValueError(f"--cpu-bind names CPUs outside the job's allocation on {node} "
                             f"({cpubind.mask(cpus)})")
        env = cpubind.environment(bind, [cpubind.mask(s) for s in sets])
        return cpubind.TaskBinding([list(s) if bind.kind != "none" else [] for s in sets], env, bind.verbose)

    def _cgroup_usage(self, event: JobEvent) -> JobEvent:
        """A step's end with its cgroup's figures: CPU time and peak memory of all its processes
        (descendants that outlived the task too), and whether its memory limit killed one."""
        if self.cgroups is None:
            return event
        usage = self.cgroups.usage(event.node, event.job_id, event.step_id)
        if usage is None:
            return event
        tasks = [t.model_copy(update={"user_cpu_s": max(t.user_cpu_s, usage.user_cpu_s),
                                      "system_cpu_s": max(t.system_cpu_s, usage.system_cpu_s),
                                      "max_rss_kb": max(t.max_rss_kb, usage.max_rss_kb)}) if i == 0 else t
                 for i, t in enumerate(event.tasks)]
        return event.model_copy(update={"tasks": tasks, "oom_killed": usage.oom_killed})

    def _end_cgroups(self, node: str, job_id: int) -> None:
        """The job is over on the node: nothing of it may outlive it (double forks, setsid)."""
        if self.cgroups is not None:
            try:
                self.cgroups.end(node, job_id)
            except OSError as exc:
                log.error("job cgroup not removed", extra={"job": job_id, "node": node, "error": str(exc)})

    async def runs_job(self, node: str, job_id: int) -> bool:
        """Whether ``job_id`` holds an allocation on ``node`` here: a step credential is good only while
        its job runs on the node. A step may arrive just before the job's allocation does (both are
        sent when it starts), so an unknown job is waited for, until its allocation arrives or a
        MessageTimeout at most; one that ended here is refused at once."""
        key = (node, job_id)
        if not self.jobs_here.is_over(node, job_id) and not self._allocated(key):
            record = self.jobs_here.make(node, job_id)
            waiter = record.arrival
            if waiter is None:
                waiter = record.arrival = asyncio.get_running_loop().create_future()
            try:  # (shielded: a step that gives up leaves the wait of another step of the job alone)
                await asyncio.wait_for(asyncio.shield(waiter), self.config.message_timeout_s)
            except TimeoutError:
                record = self.jobs_here.get(node, job_id)
                if record.arrival is waiter:
                    record.arrival = None
                    self.jobs_here.tidy(node, job_id)
        if self.jobs_here.is_over(node, job_id) or not self._allocated(key):
            return False
        return await self.prolog_epilog.prolog_ok(node, job_id)

    def _allocated(self, key: tuple[str, int]) -> bool:
        with self.lock:
            return key in self.allocations.jobs

    def _release(self, node: str, job_id: int) -> None:
        """The job is over on ``node``: its CPUs get their frequency back, its profile is closed."""
        self.jobs_here.over(node, job_id)
        with self.lock:
            self.throttle.release((node, job_id))
            self.allocations.remove(node, job_id)
            self.policies.forget(node, job_id)
            self._sampling_interval()
        self.virtual.release(node, job_id)
        record = self.jobs_here.get(node, job_id)
        alloc, record.alloc, record.prolog = record.alloc, None, None
        if alloc is not None and self.config.epilog and record.epilog is None:
            with contextlib.suppress(RuntimeError):  # no running loop: its saved record runs it at restart
                self.prolog_epilog.start_epilog(node, alloc)
        self.jobs_here.tidy(node, job_id)

    def _sampling_interval(self) -> None:
        """The meter polls at least as often as the shortest profile interval asks."""
        asked = [interval for j in self.allocations.jobs.values()
                 for series, interval in (("energy", j.energy_s), ("task", j.task_s))
                 if series in j.profile and interval]
        self.energy.interval_s = min([self.base_interval_s, *asked])

    # --- job ends ----------------------------------------------------------------------------

    def _job_ended(self, event: JobEvent) -> None:
        # the batch host gets no terminate from the controller: its allocation ends here, before
        # the end is reported (so the profile is closed when the controller merges it)
        event = self._cgroup_usage(event)
        with self.lock:
            held = self.allocations.jobs.get((event.node, event.job_id))
            chosen = self.policies.policy_fields(held) if held is not None else {}
        if chosen:
            event = event.model_copy(update={"policy": JobUsage(job_id=event.job_id, **chosen)})
        self._release(event.node, event.job_id)
        self.link.report(event)
        # steps still running die with their job: SIGTERM first (their step daemons outlive it to
        # report the tasks' usage), SIGKILL after KillWait, as Slurm does; then whatever is left
        # in the job's cgroup
        node, job_id = event.node, event.job_id
        pgids = self.jobs_here.drop_step_groups(node, job_id)
        for pgid in pgids:
            procs.killpg(pgid, signal.SIGTERM)
        if not pgids:
            self._end_cgroups(node, job_id)
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the SIGTERM must do
            asyncio.get_running_loop().call_later(self.config.kill_wait_s, self._kill_rest, node, job_id, pgids)

    def _kill_rest(self, node: str, job_id: int, pgids: set[int]) -> None:
        for pgid in pgids:
            procs.kill_tasks(pgid)  # their step daemons report them, then end (or are killed next)
        asyncio.get_running_loop().call_later(steps.STEPD_GRACE_S, self._kill_daemons, node, job_id, pgids)

    def _kill_daemons(self, node: str, job_id: int, pgids: set[int]) -> None:
        for pgid in pgids:
            procs.killpg(pgid, signal.SIGKILL)
        self._end_cgroups(node, job_id)

    def step_ended(self, event: JobEvent) -> None:
        """An srun step's tasks on one node ended: their usage goes to the controller like a job end."""
        self.link.report(self._cgroup_usage(event))

    def _acknowledged(self, events: list[JobEvent], acked: list[int]) -> None:
        done = set(acked)
        for event in events:
            if event.job_id in done:
                self.outbox.remove(event)
                if event.step_id == "batch":
                    self.batch.forget(event)

    # --- signals ---------------------------------------------------------------------------------

    def signal_job(self, job_id: int, nodes: list[str], sig: int, batch_only: bool, terminate: bool,
                   full: bool = False, step_id: int | None = None) -> list[str]:
        """Signal or terminate a job on some of our nodes: its steps, or with ``batch_only`` its batch
        shell, or with ``full`` both (``step_id``: only that step's tasks, which are running or
        already gone); returns the nodes now clean of it."""
        if step_id is not None:
            for node in nodes:
                step = self.live_steps.get((job_id, step_id, node))
                if step is not None:
                    step.signal(sig)
            return []
        clean = []
        for node in nodes:
            if node not in self.nodes:
                continue
            pgids = self.jobs_here.get(node, job_id).pgids or set()
            on_node = job_id in self.batch.jobs and self.batch.jobs[job_id].node == node
            if terminate:
                for (live_job, _step, live_node), live in list(self.live_steps.items()):
                    if live_job == job_id and live_node == node:
                        live.aborted()
                self.throttle.release((node, job_id))  # a stopped process cannot act on SIGTERM
                for pgid in pgids:
                    procs.killpg(pgid, signal.SIGTERM)
                if pgids:
                    asyncio.get_running_loop().call_later(self.config.kill_wait_s, self._kill_steps, node, job_id)
                if not on_node or self.batch.terminate(job_id):
                    self._release(node, job_id)
                    if self.jobs_here.get(node, job_id).epilog is None:  # else clean once its Epilog is done
                        clean.append(node)
                    self.energy.wake()
                    if not pgids:  # (with steps, after their KillWait)
                        self.jobs_here.drop_step_groups(node, job_id)
                        self._end_cgroups(node, job_id)
            else:
                if not batch_only:
                    for pgid in pgids:
                        procs.killpg(pgid, sig)
                if on_node and (batch_only or full):
                    self.batch.signal(job_id, sig, batch_only)
        return clean

    def freeze_job(self, job_id: int, nodes: list[str], frozen: bool) -> list[str]:
        """scontrol suspend / resume on some of our nodes: the job's cgroup frozen or thawed, or
        without cgroups its process groups stopped or continued. Returns the nodes done."""
        done = []
        for node in nodes:
            if node not in self.nodes:
                continue
            if frozen:
                self.throttle.release((node, job_id))  # the frequency throttle must not wake it
            if not self._freeze_cgroup(node, job_id, frozen):
                for pgid in self.job_pgids(node, job_id):
                    procs.killpg(pgid, signal.SIGSTOP if frozen else signal.SIGCONT)
            if not frozen:
                with self.lock:
                    if (job := self.allocations.jobs.get((node, job_id))) is not None:
                        self._throttle(job)
            done.append(node)
        return done

    def set_job_freq(self, job_id: int, nodes: list[str], khz: int | None) -> list[str]:
        """A running job's CPUs to ``khz`` (None: back to what they had before the job), on some
        of our nodes; a virtual node's throttle follows. Returns the nodes done."""
        done = []
        for node in nodes:
            with self.lock:
                job = self.allocations.jobs.get((node, job_id))
                if job is None:
                    continue
                self.allocations.set_freq(job, khz)
                # the power cap moved its ceiling: its policy decides again below it
                job.top_khz, job.policy_khz = self.allocations.freq_of(job)[0], 0
                self._throttle(job)
            done.append(node)
        return done

    def _freeze_cgroup(self, node: str, job_id: int, frozen: bool) -> bool:
        """Freeze or thaw the job's cgroup; False without cgroups (or without one for the job yet)."""
        if self.cgroups is None:
            return False
        try:
            self.cgroups.freeze(node, job_id, frozen)
        except OSError:
            return False
        return True

    def _kill_steps(self, node: str, job_id: int) -> None:
        pgids = set(self.jobs_here.get(node, job_id).pgids or ())
        for pgid in pgids:
            procs.kill_tasks(pgid)  # their step daemons report them, then end (or are killed next)
        asyncio.get_running_loop().call_later(steps.STEPD_GRACE_S, self._kill_step_daemons, node, job_id, pgids)

    def _kill_step_daemons(self, node: str, job_id: int, pgids: set[int]) -> None:
        for pgid in pgids:
            procs.killpg(pgid, signal.SIGKILL)
        if not (job_id in self.batch.jobs and self.batch.jobs[job_id].node == node):
            if self.jobs_here.is_over(node, job_id):  # (not if it runs here again, requeued)
                self.jobs_here.drop_step_groups(node, job_id)  # (a batch host's go with its script's end)
            self._end_cgroups(node, job_id)

    # --- talking to the controller ----------------------------------------------------------------

    def report(self, with_events: bool = True, with_nodes: bool = True) -> AgentHeartbeat:
        energy = self.energy.samples() if with_nodes else {}
        failing = self.energy.errors() if with_nodes else {}
        now = time.time()
        # each walk over the jobs once for all the nodes, not once per node: an agent may host a
        # thousand nodes and their jobs
        signed, running = {}, {}
        usage = self.energy.usage() if with_nodes else {}
        if with_nodes:
            with self.lock:
                signed = {key: fields for key, held in self.allocations.jobs.items()
                          if (fields := self.policies.usage_fields(held))}
                running = self._running()
        nodes = [NodeReport(name=n.name, cpus=n.cpus, real_memory_mb=n.real_memory_mb,
                            running_jobs=sorted(running.get(n.name, ())), energy=energy.get(n.name),
                            jobs=self._usage(n.name, usage.get(n.name, []), signed),
                            energy_error=failing.get(n.name, ""), power_limit_w=self.limits.held(n.name),
                            power_limit_error=self.limits.errors.get(n.name, ""), **self._power(n, now))
                 for n in self.nodes.values()] if with_nodes else []
        return AgentHeartbeat(agent_url=self.url, boot_time=self.boot_time, nodes=nodes,
                              events=self.outbox.pending() if with_events else [])

    def _power(self, node: NodeConf, now: float) -> dict:
        """A virtual node is as its emulated chassis says (up once a switch-on has finished); a
        real node that runs its agent is on, and has been since the agent started."""
        if not self.config.emulated_nodes:
            return {"power": switching.ON, "up_since": self.boot_time}
        record = chassis.read(self.spool, node.name)
        return {"power": record.state(now, node.switching),
                "up_since": max(0.0, record.settles_at(node.switching)) if record.target == switching.ON else 0.0}

    def _chassis_state(self, node: str, now: float) -> str:
        return chassis.read(self.spool, node).state(now, self.nodes[node].switching)

    def _running(self) -> dict[str, set[int]]:
        """Per node, the jobs allocated or running there (the caller holds the lock)."""
        running: dict[str, set[int]] = {}
        for node, job_id in self.allocations.jobs:
            running.setdefault(node, set()).add(job_id)
        for batch in list(self.batch.jobs.values()):
            running.setdefault(batch.node, set()).add(batch.job_id)
        return running

    def _obey(self, hb: AgentHeartbeat, body: dict) -> None:
        """The controller's reply to a heartbeat: the ends it recorded, jobs it no longer knows
        here, the nodes' power limits."""
        acked = body.get("acknowledged", [])
        self._acknowledged(hb.events, acked)
        if acked:
            self.energy.wake()  # the controller has recorded these ends: a reading past them settles their energy
        for node, job_ids in (body.get("cancel") or {}).items():
            if node in self.nodes:
                for job_id in job_ids:
                    self.signal_job(job_id, [node], signal.SIGKILL, False, True)
        self._power_limits(body.get("power_limits") or {})

    def _power_limits(self, ordered: dict) -> None:
        """Hold each node at the limit the controller orders (None: the site's own settings), again
        at every reply, so that a real node's packages follow what the rest of it draws."""
        if not ordered:
            return
        watts = {name: sample.watts for name, sample in self.energy.samples().items() if not sample.stale}
        held_gpus = self._job_gpus()
        meter = self.energy.gpus
        now = time.time()
        for node, limit in ordered.items():
            if node in self.nodes and (limit is None or isinstance(limit, int | float)):
                before = self.limits.held(node)
                busy = {index for indexes in held_gpus.get(node, {}).values() for index in indexes}
                self.limits.order(node, None if limit is None else float(limit), watts.get(node), now, busy,
                                  meter.watts(node) if meter is not None else 0.0)
                if self.limits.held(node) != before:
                    log.info("power limit", extra={"node": node, "watts": self.limits.held(node)})
                    with self.lock:  # a virtual node's jobs now run at what the limit lets them
                        for held in self.allocations.on_node(node):
                            self._throttle(held)

    async def run(self) -> None:
        """Heartbeats every few seconds; job ends as soon as they happen (in small batches)."""
        for node in self.limits.recover():
            log.warning("power limit left by a stopped agent lifted", extra={"node": node})
        self.batch.recover(list(self.nodes))
        for job in list(self.batch.jobs.values()):
            if pgid := self.batch.script_pgid(job):
                procs.killpg(pgid, signal.SIGCONT)  # in case we died while it was throttled
        with self.lock:
            self.allocations.recover()
        if self.config.epilog:
            self.prolog_epilog.recover(self.nodes, lambda node, job_id: (node, job_id) in self.allocations.jobs)
        with self.lock:
            known = {(n, j) for n, j in self.allocations.jobs} | {(j.node, j.job_id) for j in self.batch.jobs.values()}
        if self.cgroups is not None:  # what a stopped agent's jobs left, and no record here claims
            for node in self.nodes:
                for job_id in self.cgroups.jobs(node):
                    if (node, job_id) not in known:
                        self._end_cgroups(node, job_id)
        with self.lock:
            for held in self.allocations.jobs.values():
                self._throttle(held)
            self._sampling_interval()
        loop = asyncio.get_running_loop()
        self.energy.on_poll = lambda: loop.call_soon_threadsafe(self.link.energy_read)
        self.energy.after_poll = self._apply_policies
        self.energy.start()
        self.profiler.start()
        await self.link.beat(self.batch.poll_adopted, lambda full: self.report(with_nodes=full), self._obey)

    async def close(self) -> None:
        self.throttle.stop()
        self.profiler.stop()
        self.energy.stop()
        await self.link.close()

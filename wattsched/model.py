"""The controller's records: jobs (with their steps), nodes, partitions and reservations.

These are plain mutable dataclasses owned by the controller's state; policies never see
them directly but read the immutable snapshots of :mod:`wattsched.scheduling`.
Every record converts to and from a JSON-able dict for the state store. A job keeps what it asked
for, what it was given, its energy and what the power cap did to it in parts of their own
(Request, Allocation, EnergyRecord, Capping); its dict has them in one level, as the store, the
accounting and the views have always read it, so a part's field names are keys of their own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from wattsched import gres, nodestates, states
from wattsched.gres import Device, Inventory
from wattsched.nodestates import NodeBase, PowerFlag, PowerState


@dataclass(slots=True)
class Step:
    """A job step: the batch script (``batch``), an interactive allocation (``extern``) or an srun."""

    step_id: str
    name: str
    state: str = states.RUNNING
    nodes: list[str] = field(default_factory=list)
    ntasks: int = 1
    cpus: int = 1
    start_time: float = 0.0
    end_time: float = 0.0
    exit_code: int = 0
    term_signal: int = 0
    tasks: list[dict[str, Any]] = field(default_factory=list)  # TaskUsage records (wattsched.usage)
    ended_nodes: list[str] = field(default_factory=list)  # nodes whose agents reported the step's end
    consumed_energy_j: float | None = None
    oom_killed: bool = False  # its memory limit ended a process of it on some node (OUT_OF_MEMORY)
    cancelled: bool = False  # scancel JOB.STEP ended it (CANCELLED)
    # the job's CPUs it holds on each node while it runs (its tasks x their CPUs), none with --overlap
    node_cpus: dict[str, int] = field(default_factory=dict)
    layout: dict[str, list[int]] = field(default_factory=dict)  # srun's steps: each node's tasks (sattach)


class JobScript(NamedTuple):
    """A job's batch script (None for an allocation: salloc, srun) and the environment it was
    submitted with (the secrets the commands carry taken out)."""

    script: str | None
    environment: dict[str, str]


@dataclass(slots=True, frozen=True)
class Request:
    """What a job asked for (slurmctld's job_details): its command, its size and shape, where its
    output goes, how it is signalled and mailed, its frequency and its GPUs and licenses. Frozen
    (a change is a new Request, dataclasses.replace), so that the pending tasks of an array share
    one, as Slurm keeps a pending array as one record; its lists are never changed in place."""

    # its batch script and environment are not here: the state store keeps them (JobScript) from
    # its submission to its purge, read at its launch only
    argv: list[str] = field(default_factory=list)
    command: str = ""
    work_dir: str = "/"
    nodes_min: int = 1
    nodes_max: int = 0
    ntasks: int = 1
    ntasks_set: bool = False
    ntasks_per_node: int = 0
    cpus_per_task: int = 1
    mem_per_node_mb: int = 0
    mem_per_cpu_mb: int = 0
    min_cpus_per_node: int = 0  # --mincpus: CPUs a node gives it at least
    tmp_mb: int = 0  # --tmp: the temporary storage (TmpDisk) a node must have
    rlimits: dict[str, int] = field(default_factory=dict)  # the submitting shell's soft limits
    begin_time: float = 0.0
    dependency: str = ""
    exclusive: bool = False
    overcommit: bool = False  # -O: CPUs allocated as for one task per node (Slurm's --overcommit)
    req_nodes: list[str] = field(default_factory=list)
    exc_nodes: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    std_out: str = ""
    std_err: str = ""
    std_in: str = "/dev/null"
    open_mode: str = "truncate"
    kill_signal: int = 0
    kill_signal_secs: int = 0
    kill_signal_batch_only: bool = False
    requeue: bool = True
    no_kill: bool = False  # -k: a failed node leaves the job, which runs on without it (Slurm's --no-kill)
    mail_type: tuple[str, ...] = ()  # --mail-type's events (wattsched.mailtypes), mailed to mail_user
    mail_user: str = ""  # --mail-user ("": the job's user)
    interactive: bool = False
    cpu_freq: str = ""  # --cpu-freq as given (the user pinned the frequency)
    power_fit: bool = False  # --power-fit: may run at a lower frequency to fit under the power cap
    deadline: float = 0.0  # --deadline: removed (DEADLINE) once it can no longer end before it (0: none)
    profile: tuple[str, ...] = ()  # --profile series: energy, task
    acctg_freq: tuple[tuple[str, int], ...] = ()  # --acctg-freq: (type, seconds)
    # GPUs asked for (wattsched.gres): at most one of per node, per task, per job; "" for any type
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    gpus_per_job: int = 0
    gpu_type: str = ""
    tres_bind: str = ""  # how tasks are bound to their GPUs, as given (wattsched.tresbind)
    licenses: str = ""  # -L: the cluster's licenses it takes, as Slurm shows them (name:count,...)


@dataclass(slots=True)
class Allocation:
    """What a job was given when it started (Slurm's job_resources): its CPUs, memory and GPUs on
    each node, and the nodes still cleaning up after it."""

    alloc_cpus: dict[str, int] = field(default_factory=dict)
    nodes_expr: str = ""
    alloc_mem_mb: int = 0
    tasks_per_node: dict[str, int] = field(default_factory=dict)
    alloc_gpus: dict[str, list[int]] = field(default_factory=dict)  # node -> its GPUs' numbers there
    batch_host: str = ""
    completing_nodes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class EnergyRecord:
    """A job's energy and its energy policy: the policy asked for and run under, its nodes' readings, the
    expectations its earlier runs gave (wattsched.prediction) and the policy's choice."""

    # --energy-policy as asked; from its launch, the policy it runs under (wattsched.energypolicy)
    energy_policy: str = ""
    # the application model its environment declared (energypolicy.app_model), for emulated nodes
    app_model: list[list[float]] = field(default_factory=list)
    consumed_energy_j: float | None = None  # filled by the node agents' energy plugins
    co2e_g: float = 0.0  # its emissions: its energy at the grid's carbon intensity over its run (wattsched.carbon)
    # the same job's earlier runs (wattsched.prediction): its key, and what they let expect of it
    history_key: str = ""
    exp_elapsed_s: float = 0.0
    exp_energy_j: float = 0.0
    exp_watts: float = 0.0
    ave_cpu_freq_khz: int = 0  # mean frequency of the job's CPUs, as its nodes reported it
    freq_reports: int = 0
    # its energy policy's choice and the signature it chose from, as its nodes reported them
    policy_freq_khz: int = 0
    pred_time_factor: float = 0.0  # the model's T(chosen) / T(ceiling)
    pred_energy_factor: float = 0.0  # the model's E(chosen) / E(ceiling)
    sig_cpi: float = 0.0
    sig_gbs: float = 0.0
    sig_memory_bound: float = 0.0  # the share of its time waiting for memory at the highest frequency
    sig_reports: int = 0


@dataclass(slots=True)
class Capping:
    """What the power cap chose for a job and took from it (wattsched.capadmission,
    wattsched.capshed and the moving budget of wattsched.powerbalance)."""

    cpu_freq_khz: int | None = None  # the frequency the controller chose to fit the power cap
    # under the moving budget: the frequency whose watts its nodes were held to when it started,
    # what the cap counts them at until their hardware reports a limit (wattsched.scheduling.ledgers)
    start_limit_khz: int | None = None
    # the most its nodes may draw under their power limits (its CPUs' share of each; a node without
    # one at its MaxWatts), None while none of them is limited; and the lowest that has been
    cap_watts: float | None = None
    min_cap_watts: float | None = None
    admit_watts: float = 0.0  # PowerCapAdmission=predicted: the watts a node it was started at (0: MaxWatts)
    # what the power cap's shedding took (wattsched.capshed), to give back when there is room
    cap_slowed: bool = False  # its frequency was lowered; cap_freq_before is what it had
    cap_freq_before: int | None = None
    cap_suspended: bool = False


@dataclass(slots=True)
class Job:
    """A job as the controller tracks it, from submission to purge."""

    # who, where and under what names
    job_id: int
    name: str
    uid: int
    user: str
    gid: int = 0
    group: str = ""
    account: str = ""
    qos: str = ""  # its QOS (wattsched.limits): as asked, else its association's default
    partition: str = ""
    submit_host: str = ""
    submit_line: str = ""
    time_limit_min: int | None = None
    comment: str = ""
    admin_comment: str = ""
    wckey: str = ""
    nice: int = 0
    reservation: str = ""
    submit_key: str = ""  # the submission's own key (JobSubmit.submit_key): a retry finds the job by it
    array_job_id: int = 0
    array_task_id: int | None = None
    array_task_count: int = 0
    array_task_min: int = 0
    array_task_max: int = 0
    array_throttle: int = 0
    # life cycle
    state: str = states.PENDING
    reason: str = states.R_NONE
    hold: str = ""
    priority: int = 0
    admin_priority: int | None = None
    expected_start: float = 0.0
    submit_time: float = 0.0
    eligible_time: float = 0.0
    start_time: float = 0.0
    end_time: float = 0.0
    exit_code: int = 0
    term_signal: int = 0
    final_state: str = ""
    cancelled_by: int | None = None
    timed_out: bool = False
    preempted: str = ""  # preempted this run: CANCEL or REQUEUE (wattsched.preemption)
    preempt_deadline: float = 0.0  # its GraceTime ends then: killed, or requeued
    preempt_suspended: bool = False  # suspended by a preemptor: its CPUs went to it, its memory stays
    suspend_released: bool = False  # scontrol suspend gave its CPUs back (Slurm's), its memory stays
    # the job that preempted it: a suspended victim resumes, a requeued one may start again, only
    # once that job no longer waits for what it took
    preempted_by: int = 0
    warn_signal_sent: bool = False
    mail_sent: tuple[str, ...] = ()  # the once-a-run events already mailed (time limits, invalid dependency)
    restart_count: int = 0
    launched: bool = False
    configuring: bool = False  # allocated nodes still powering up: launched once they are all up
    prolog_slurmctld: bool = False  # PrologSlurmctld runs: the job stays CONFIGURING until it succeeds
    suspended_at: float = 0.0  # when scontrol suspend froze it (0: not suspended)
    stopped: bool = False  # sent SIGSTOP as a whole (scancel -s STOP), not yet SIGCONT: STOPPED
    suspended_s: float = 0.0  # time spent suspended, which neither its run time nor its time limit counts
    energy_pending: bool = False  # ended, its nodes' readings do not reach its end yet: still COMPLETING
    # its parts, which its dict (the state store's row and the views) flattens into one level
    request: Request = field(default_factory=Request)
    alloc: Allocation = field(default_factory=Allocation)
    energy: EnergyRecord = field(default_factory=EnergyRecord)
    capping: Capping = field(default_factory=Capping)
    steps: list[Step] = field(default_factory=list)
    next_step_id: int = 0

    @property
    def node_list(self) -> list[str]:
        return list(self.alloc.alloc_cpus)

    @property
    def shown_state(self) -> str:
        """The state squeue and sacct show: CONFIGURING, SUSPENDED and STOPPED are RUNNING jobs, as in
        Slurm."""
        if self.state == states.RUNNING:
            if self.configuring:
                return states.CONFIGURING
            if self.suspended_at:
                return states.SUSPENDED
            if self.stopped:
                return states.STOPPED
        return self.state

    def suspended_until(self, now: float) -> float:
        """Seconds spent suspended up to ``now``."""
        return self.suspended_s + (now - self.suspended_at if self.suspended_at else 0.0)

    @property
    def holds_nodes(self) -> bool:
        """Running, or ending with processes perhaps still on its nodes. A COMPLETING job whose
        nodes are all clean holds nothing: it only awaits its energy readings."""
        return self.state == states.RUNNING or (self.state == states.COMPLETING and bool(self.alloc.completing_nodes))

    @property
    def script_id(self) -> int:
        """The key of its script and environment in the state store: an array's tasks share one."""
        return self.job_id if self.array_task_id is None else self.array_job_id

    @property
    def num_cpus(self) -> int:
        return sum(self.alloc.alloc_cpus.values())

    @property
    def gpu_request(self) -> gres.GpuRequest:
        asked = self.request
        return gres.GpuRequest(asked.gpus_per_node, asked.gpus_per_task, asked.gpus_per_job, asked.gpu_type)

    @property
    def num_gpus(self) -> int:
        return sum(len(indices) for indices in self.alloc.alloc_gpus.values())

    @property
    def display_id(self) -> str:
        """The id as squeue and sacct print it: ``12`` or ``12_3`` for an array task."""
        if self.array_task_id is None:
            return str(self.job_id)
        return f"{self.array_job_id}_{self.array_task_id}"

    def find_step(self, step_id: str) -> Step | None:
        for step in self.steps:
            if step.step_id == step_id:
                return step
        return None

    def to_dict(self) -> dict[str, Any]:
        """The job in one level: its own fields and its parts' side by side (the parts' names are
        not keys), as the state store, the accounting and the views have it."""
        data = dict(zip(_FLAT_NAMES, _flat_values(self), strict=True))
        data["steps"] = [{f.name: getattr(s, f.name) for f in _STEP_FIELDS} for s in self.steps]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        """A job from its one-level dict (to_dict's); keys of no field are left out."""
        values: dict[str, Any] = {k: v for k, v in data.items() if k in _OWN_NAMES}
        for part, names, record, items in _PART_READERS:
            try:  # a whole record (to_dict's) at C speed: a restart reads every job through here
                values[part] = record(*items(data))
            except KeyError:
                values[part] = record(**{k: data[k] for k in names if k in data})
        values["steps"] = [Step(**s) for s in data.get("steps", [])]
        return cls(**values)


_PARTS: dict[str, type[Request | Allocation | EnergyRecord | Capping]] = {
    "request": Request, "alloc": Allocation, "energy": EnergyRecord, "capping": Capping}
_OWN_FIELDS = tuple(f.name for f in fields(Job) if f.name not in _PARTS and f.name != "steps")
_OWN_NAMES = frozenset(_OWN_FIELDS)
_PART_FIELDS = tuple((part, tuple(f.name for f in fields(record))) for part, record in _PARTS.items())
# the keys of a job's dict, and where each is kept: "alloc.batch_host" for a part's field
JOB_FIELD_PATHS = {name: name for name in _OWN_FIELDS} | {
    name: f"{part}.{name}" for part, names in _PART_FIELDS for name in names}
JOB_FIELD_NAMES = frozenset(JOB_FIELD_PATHS)
_PART_READERS = tuple((part, names, _PARTS[part], itemgetter(*names)) for part, names in _PART_FIELDS)
_FLAT_NAMES = tuple(JOB_FIELD_PATHS)
_flat_values = attrgetter(*JOB_FIELD_PATHS.values())  # every field in one call, the parts' by their paths
_STEP_FIELDS = list(fields(Step))
# the strings that many jobs share (a few users, accounts and scripts to a whole queue)
_SHARED_OWN = ("user", "group", "account", "qos", "partition", "name", "submit_host", "submit_line", "wckey")


def share_strings(job: Job) -> None:
    """Keep each of the job's often repeated strings once for all jobs (sys.intern). Parsed from a
    request or a saved state, every job held copies of its own: about 400 bytes a queued job."""
    shared = sys.intern
    for name in _SHARED_OWN:
        setattr(job, name, shared(getattr(job, name)))
    asked = job.request
    job.request = replace(asked, command=shared(asked.command), work_dir=shared(asked.work_dir),
                          std_out=shared(asked.std_out), std_err=shared(asked.std_err), std_in=shared(asked.std_in),
                          mail_user=shared(asked.mail_user))
    job.energy.history_key = shared(job.energy.history_key)


@dataclass(slots=True)
class Node:
    """A node's configured size and its live state as the controller sees it."""

    name: str
    cpus: int
    real_memory_mb: int
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    weight: int = 1
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    tmp_disk_mb: int = 0
    # NodeAddr, NodeHostname and Port as configured (Slurm's defaults: the host name is the node's
    # name, the address its host name; no port: SlurmdPort)
    address: str = ""
    hostname: str = ""
    port: int = 0
    base_state: NodeBase = NodeBase.UNKNOWN
    drain: bool = False
    not_responding: bool = True
    reason: str = ""
    reason_time: float = 0.0
    reason_uid: int = 0
    # a cloud node's instance, as an admin (or its resume program) records it: scontrol update
    instance_id: str = ""
    instance_type: str = ""
    alloc_cpus: int = 0
    alloc_mem_mb: int = 0
    agent_url: str = ""
    last_seen: float = 0.0
    boot_time: float = 0.0
    registered: bool = False
    idle_watts: int | None = None
    max_watts: int | None = None
    power_save_watts: int | None = None
    down_watts: int | None = None
    power_cap_priority: int | None = None
    cpu_freq_watts: tuple[tuple[int, int], ...] = ()
    gres: Inventory = ()  # GPUs by type, as configured
    gpus: tuple[Device, ...] = ()  # each GPU: its number, type and device file
    alloc_gpus: dict[int, int] = field(default_factory=dict)  # GPU number -> the job holding it
    # power saving: its flag, since when, and since when idle
    power: PowerFlag = PowerFlag.NONE
    power_since: float = 0.0
    power_job: int = 0  # the job a resume was for (its added waiting time is reported)
    idle_since: float = 0.0
    # energy: the agent's counter samples (time, joules), kept for an hour; first and latest reading
    energy_samples: list[tuple[float, float]] = field(default_factory=list)
    job_cpu_samples: list[dict[int, float]] = field(default_factory=list)  # per sample: job -> CPU seconds
    job_gpu_samples: list[dict[int, float]] = field(default_factory=list)  # per sample: job -> its GPUs' joules
    energy_first: tuple[float, float] | None = None
    current_watts: float = 0.0
    energy_error: str = ""  # why its sensor's last read failed: its power is unknown until one succeeds
    # its power limit (noded.powerlimits): the administrator's (scontrol update CapWatts=) and the
    # moving budget's (controller.budgetcontrol), None where there is none; what its hardware
    # reports holding (None: the site's own settings), and why not the one ordered
    cap_watts: float | None = None
    balance_watts: float | None = None
    limit_watts: float | None = None
    limit_error: str = ""

    def add_energy_sample(self, when: float, joules: float, watts: float,
                          job_cpu: dict[int, float] | None = None, job_gpu: dict[int, float] | None = None) -> None:
        if self.energy_samples and when <= self.energy_samples[-1][0]:
            return
        self.energy_samples.append((when, joules))
        self.job_cpu_samples.append(job_cpu or {})
        self.job_gpu_samples.append(job_gpu or {})
        if self.energy_first is None:
            self.energy_first = (when, joules)
        self.current_watts = watts
        if len(self.energy_samples) > 64 and when - self.energy_samples[0][0] > 3600:
            cut = len(self.energy_samples) // 4
            del self.energy_samples[:cut]
            del self.job_cpu_samples[:cut]
            del self.job_gpu_samples[:cut]

    @property
    def ordered_limit(self) -> float | None:
        """The limit its hardware is to hold it to: the lower of the administrator's and the budget's."""
        given = [w for w in (self.cap_watts, self.balance_watts) if w is not None]
        return min(given) if given else None

    @property
    def counted_limit(self) -> float | None:
        """The most the cap may count the node at: while its hardware moves from the limit it
        reports holding to another ordered, the higher of the two (None: no limit it can count on)."""
        ordered = self.ordered_limit
        if ordered is None or self.limit_watts is None:
            return None
        return max(ordered, self.limit_watts)

    @property
    def held_limit(self) -> float | None:
        """The limit the cap may count on: the one ordered, once the hardware reports holding it."""
        ordered = self.ordered_limit
        if ordered is None or self.limit_watts is None or abs(self.limit_watts - ordered) > 0.5:
            return None
        return ordered

    @property
    def consumed_joules(self) -> float:
        return self.energy_samples[-1][1] if self.energy_samples else 0.0

    @property
    def ave_watts(self) -> float:
        if not self.energy_samples or self.energy_first is None or self.energy_samples[-1][0] <= self.energy_first[0]:
            return self.current_watts
        (t0, j0), (t1, j1) = self.energy_first, self.energy_samples[-1]
        return (j1 - j0) / (t1 - t0)

    @property
    def power_state(self) -> PowerState:
        return nodestates.power_state(self.power, self.base_state, self.not_responding, self.alloc_cpus > 0)

    def refresh_base_state(self) -> None:
        """Derive IDLE / MIXED / ALLOCATED from the allocation of a node that is up."""
        if self.base_state in (NodeBase.DOWN, NodeBase.UNKNOWN, NodeBase.FUTURE):
            return
        if self.alloc_cpus == 0:
            self.base_state = NodeBase.IDLE
        elif self.alloc_cpus >= self.cpus:
            self.base_state = NodeBase.ALLOCATED
        else:
            self.base_state = NodeBase.MIXED

    def free_gpus(self) -> Inventory:
        """Its GPUs no job holds, by type in its order."""
        if not self.gpus:
            return ()
        free: dict[str, int] = dict.fromkeys((kind for kind, _count in self.gres), 0)
        for device in self.gpus:
            if device.index not in self.alloc_gpus:
                free[device.kind] = free.get(device.kind, 0) + 1
        return tuple(free.items())

    @property
    def schedulable(self) -> bool:
        return nodestates.schedulable(self.power, self.base_state, self.drain, self.not_responding)


@dataclass(slots=True)
class Reservation:
    """An advanced reservation: nodes set aside over [start_time, end_time) for some users or
    accounts. Recurring ones (HOURLY, DAILY, WEEKDAY, WEEKEND, WEEKLY) move on to their next window
    when they end."""

    resv_id: int
    name: str
    start_time: float
    end_time: float
    nodes: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    partition: str = ""
    flags: list[str] = field(default_factory=list)
    watts: int | None = None
    features: str = ""  # the node features its NodeCnt nodes must have (``a&b``, ``a|b``)
    purge_comp_s: int = 0  # PURGE_COMP: deleted once without a job for so long
    idle_since: float = 0.0  # (when it last had a job waiting or running in it; 0: never)
    created: float = 0.0
    deleted: bool = False

    def active(self, now: float) -> bool:
        return self.start_time <= now < self.end_time

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reservation:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

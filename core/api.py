"""The HTTP API's messages (v1), shared by the controller, the node agents and the tests.

The CLI sends plain JSON that these models validate on arrival; the OpenAPI schema the
controller serves is generated from them and is the API's contract.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = "v1"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobSubmit(Strict):
    """A batch job (``script`` set) or an interactive allocation (``interactive``)."""

    name: str = Field("", max_length=1024)
    script: str | None = Field(None, max_length=4 * 1024 * 1024)
    argv: list[str] = []
    command: str = ""
    work_dir: str = Field(min_length=1)
    environment: dict[str, str] = {}
    submit_host: str = ""
    submit_line: str = ""
    account: str = ""
    partition: str = ""
    nodes_min: int = Field(1, ge=1)
    nodes_max: int = Field(0, ge=0)
    ntasks: int | None = Field(None, ge=1)
    ntasks_per_node: int = Field(0, ge=0)
    cpus_per_task: int = Field(1, ge=1)
    mem_per_node_mb: int = Field(0, ge=0)
    mem_per_cpu_mb: int = Field(0, ge=0)
    time_limit: str | None = None
    begin: str | None = None
    dependency: str = ""
    array: str = ""
    hold: bool = False
    exclusive: bool = False
    nodelist: str = ""
    exclude: str = ""
    constraint: str = ""
    output: str = ""
    error: str = ""
    input: str = "/dev/null"
    open_mode: Literal["truncate", "append"] = "truncate"
    signal: str = ""
    comment: str = ""
    wckey: str = ""
    requeue: bool | None = None
    interactive: bool = False
    immediate: bool = False
    nice: int = Field(0, ge=-2147483645, le=2147483645)
    reservation: str = Field("", max_length=256)
    cpu_freq: str = Field("", max_length=64)
    power_fit: bool = False
    profile: str = Field("", max_length=64)
    acctg_freq: str = Field("", max_length=128)


class SubmitReply(BaseModel):
    job_id: int
    array_task_ids: list[int] = []


class JobUpdate(Strict):
    """``scontrol update job``: only the fields given change."""

    hold: Literal["user", "admin"] | None = None
    release: bool = False
    time_limit: str | None = None
    priority: int | None = Field(None, ge=0)
    nice: int | None = None
    name: str | None = None
    comment: str | None = None
    partition: str | None = None


class ReservationSpec(Strict):
    """``scontrol create|update reservation``: Slurm's keys; on update only the given ones change.
    Times and durations are Slurm's strings (``now+20minutes``, ``2-12:00:00``), parsed by the
    controller against its own clock."""

    name: str = Field("", max_length=256, pattern=r"^[A-Za-z0-9_.\-]*$")
    start_time: str = ""
    end_time: str = ""
    duration: str = ""
    nodes: str = ""
    node_cnt: int | None = Field(None, ge=1)
    users: str = ""
    accounts: str = ""
    partition: str = ""
    flags: str = ""
    watts: int | None = Field(None, ge=0)


class PowerCapUpdate(Strict):
    """``scontrol update powercap=<watts>|INFINITE``."""

    power_cap: str = Field(min_length=1, max_length=32)


class AssocRequest(Strict):
    """sacctmgr add|modify|delete cluster|account|user NAMES [where K=V...] [set K=V...].
    Keys are sacctmgr's, lower case (parent, fairshare, description, organization, account,
    defaultaccount, adminlevel)."""

    action: Literal["add", "modify", "delete"]
    entity: Literal["cluster", "account", "user"]
    names: list[str] = Field(min_length=1)
    where: dict[str, str] = {}
    values: dict[str, str] = {}


class CancelRequest(Strict):
    """scancel: signal (default: cancel) the named jobs."""

    job_ids: list[str] = Field(min_length=1)
    signal: int | None = Field(None, ge=1, le=64)
    batch_only: bool = False


class NodeUpdate(Strict):
    state: Literal["drain", "resume", "down", "idle", "undrain", "power_down", "power_down_asap", "power_up"]
    reason: str = ""


class StepCreate(Strict):
    """srun inside an allocation: lay out a step's tasks over the job's nodes."""

    name: str = ""
    ntasks: int | None = Field(None, ge=1)
    nodes: int | None = Field(None, ge=1)
    ntasks_per_node: int = Field(0, ge=0)
    cpus_per_task: int = Field(1, ge=1)


class StepPlacement(BaseModel):
    node: str
    agent_url: str
    node_index: int
    task_ids: list[int]


class StepReply(BaseModel):
    job_id: int
    step_id: int
    ntasks: int
    nodes: list[str]
    placements: list[StepPlacement]
    credential: str
    job_environment: dict[str, str] = {}


class StepComplete(Strict):
    exit_code: int = 0
    term_signal: int = 0
    total_cpu_s: float = 0.0
    max_rss_kb: int = 0


class AllocationComplete(Strict):
    exit_code: int = 0
    term_signal: int = 0


# --- node agents --------------------------------------------------------------------------------

class EnergySample(Strict):
    """A node's energy counter (joules since it was first metered) and power at ``time``."""

    time: float
    joules: float
    watts: float
    stale: bool = False


class JobUsage(Strict):
    """A job's processes on one node: CPU seconds so far and the frequency of its CPUs."""

    job_id: int
    cpu_s: float = 0.0
    cpu_freq_khz: int = 0
    rss_kb: int = 0


class NodeReport(Strict):
    name: str
    cpus: int
    real_memory_mb: int
    running_jobs: list[int] = []
    energy: EnergySample | None = None
    jobs: list[JobUsage] = []
    # on, off, switching_on or switching_off (wattsched.switching), and since when it has been up
    power: str = "on"
    up_since: float = 0.0


class JobEvent(Strict):
    """A batch script that ended on a node (kept by the agent until the controller acknowledges)."""

    job_id: int
    node: str
    run: int = 0  # the job's restart count when it was launched
    exit_code: int = 0
    term_signal: int = 0
    end_time: float
    total_cpu_s: float = 0.0
    max_rss_kb: int = 0


class AgentHeartbeat(Strict):
    agent_url: str
    boot_time: float
    nodes: list[NodeReport]
    events: list[JobEvent] = []


class HeartbeatReply(BaseModel):
    acknowledged: list[int] = []
    cancel: list[int] = []


class BatchLaunch(Strict):
    """The controller asks the batch host to run a job's script."""

    job_id: int
    node: str
    run: int = 0  # the job's restart count: a requeued job's runs get their own spool and events
    uid: int
    gid: int
    user: str
    script: str
    argv: list[str] = []
    work_dir: str
    environment: dict[str, str]
    std_out: str
    std_err: str
    std_in: str = "/dev/null"
    open_mode: str = "truncate"


class JobAllocation(Strict):
    """A job's allocation, sent to every agent hosting one of its nodes when it starts: the
    agent sets the job's CPU frequency there and profiles it, until the job ends on the node."""

    job_id: int
    uid: int
    user: str
    start_time: float
    nodes: dict[str, int]  # node -> allocated CPUs
    cpu_freq: str = ""  # --cpu-freq, else CpuFreqDef, else the frequency fitted to the power cap
    profile: list[Literal["energy", "task"]] = []
    profile_energy_s: int = Field(0, ge=0)
    profile_task_s: int = Field(0, ge=0)


class LaunchBatch(Strict):
    jobs: list[BatchLaunch] = []
    allocations: list[JobAllocation] = []


class SignalJob(Strict):
    """Signal a job's processes on some nodes; ``terminate`` escalates to SIGKILL after KillWait."""

    job_id: int
    nodes: list[str]
    signal: int = 15
    batch_only: bool = False
    terminate: bool = False


class TaskLaunch(Strict):
    """srun asks one node's agent to run its share of a step's tasks."""

    job_id: int
    step_id: int
    node: str
    credential: str
    argv: list[str] = Field(min_length=1)
    environment: dict[str, str] = {}
    work_dir: str
    label: bool = False
    unbuffered: bool = False
    output: str = ""
    error: str = ""
    open_mode: str = "truncate"

"""The HTTP API's messages (v1), shared by the controller, the node agents and the tests.

The CLI sends plain JSON that these models validate on arrival; the OpenAPI schema the
controller serves is generated from them and is the API's contract.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from wattsched import multiprog, tresbind
from wattsched.usertext import check_all_text, check_label, excerpt

API_VERSION = "v1"

# Bounds on every input, checked when a message is parsed, before any work. Strings that reach the
# accounting database fit its columns on SQLite, PostgreSQL and MariaDB (accounting.models).
PATH_MAX = 4096  # Linux's PATH_MAX
NAME_MAX = 1024  # job and step names (String(1024))
ID_MAX = 64  # accounts, partitions, wckeys, users (String(64))
TEXT_MAX = 8192  # comments, submit lines, reasons: far below MariaDB's 64 KiB TEXT even in 4-byte UTF-8
SCRIPT_MAX = 4 * 1024 * 1024  # Slurm's default max_script_size
ENV_MAX = 1024 * 1024  # a job's environment and argv in bytes, each (the kernel's exec limit is 2 MiB)
LIST_MAX = 4096  # environment variables, arguments, job references, names in one message
INT32 = 2**31 - 1
COUNT_MAX = 1 << 20  # nodes, tasks and CPUs in one request: more than any cluster has
MEM_MAX_MB = 1 << 40  # a petabyte per node
BIG = 2**53  # integers kept exactly everywhere, JSON readers included


def _env_size(env: dict[str, str]) -> dict[str, str]:
    """At most ENV_MAX bytes, and names execve can pass: not empty, no "=" (nor a NUL, refused for
    every string): refused when sent, not when the job would start."""
    if sum(len(k) + len(v) + 2 for k, v in env.items()) > ENV_MAX:
        raise ValueError(f"environment larger than {ENV_MAX} bytes")
    bad = next((k for k in env if not k or "=" in k), None)
    if bad is not None:
        raise ValueError(f"invalid environment variable name {excerpt(bad)!r}: empty, or holds '='")
    return env


def _absolute(path: str) -> str:
    """A working directory: absolute, as sbatch and srun send it (a relative one means nothing to an
    agent on another host)."""
    if not path.startswith("/"):
        raise ValueError(f"working directory {excerpt(path)!r} is not an absolute path")
    return path


def _destination(path: str) -> str:
    """sbcast's destination: an absolute path to a file (sbcast resolves a relative one)."""
    if not path.startswith("/") or path.endswith("/") or "\0" in path:
        raise ValueError(f"destination {excerpt(path)!r} is not an absolute path to a file")
    return path


def _argv_size(argv: list[str]) -> list[str]:
    if sum(len(a) + 1 for a in argv) > ENV_MAX:
        raise ValueError(f"arguments larger than {ENV_MAX} bytes")
    return argv


Short = Annotated[str, Field(max_length=ID_MAX), AfterValidator(check_label)]  # accounts, partitions, wckeys
Name = Annotated[str, Field(max_length=NAME_MAX), AfterValidator(check_label)]  # job and step names
Comment = Annotated[str, Field(max_length=TEXT_MAX), AfterValidator(check_label)]  # comments, reasons
Path = Annotated[str, Field(max_length=PATH_MAX)]
WorkDir = Annotated[str, Field(min_length=1, max_length=PATH_MAX), AfterValidator(_absolute)]
Destination = Annotated[str, Field(min_length=2, max_length=PATH_MAX), AfterValidator(_destination)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]  # submit lines: may span lines, escaped when shown
Environment = Annotated[dict[Annotated[str, Field(max_length=PATH_MAX)], Annotated[str, Field(max_length=ENV_MAX)]],
                        Field(max_length=LIST_MAX), AfterValidator(_env_size)]
Argv = Annotated[list[Annotated[str, Field(max_length=ENV_MAX)]], Field(max_length=LIST_MAX),
                 AfterValidator(_argv_size)]
Count = Annotated[int, Field(ge=1, le=COUNT_MAX)]


# --profile series a node agent records (sh5util's Energy and Task)
ProfileSeries = Literal["energy", "task"]

class Strict(BaseModel):
    """A message this API accepts: unknown fields are refused, and every string in it, at any depth,
    must be text (wattsched.usertext.check_text), checked before the fields are."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _all_text(cls, data: Any) -> Any:
        check_all_text(data)
        return data


# the submitting shell's soft limits, by Slurm's names (wattsched.rlimits; -1: unlimited)
RLimits = Annotated[dict[Annotated[str, Field(pattern=r"^[A-Z]{2,8}$")], Annotated[int, Field(ge=-1, le=BIG)]],
                    Field(max_length=16)]


class JobSubmit(Strict):
    """A batch job (``script`` set) or an interactive allocation (``interactive``)."""

    # a submission's key, made by the command once: sent again (the controller failed over before
    # it answered), it gets the jobs the first one made rather than new ones
    submit_key: str = Field("", max_length=64, pattern=r"^[0-9a-f]*$")
    name: Name = ""
    script: str | None = Field(None, max_length=SCRIPT_MAX)
    argv: Argv = []
    command: Path = ""
    work_dir: WorkDir
    environment: Environment = {}
    submit_host: Short = ""
    submit_line: Text = ""
    account: Short = ""
    qos: Short = ""
    partition: Short = ""
    nodes_min: Count = 1
    nodes_max: int = Field(0, ge=0, le=COUNT_MAX)
    ntasks: Count | None = None
    ntasks_per_node: int = Field(0, ge=0, le=COUNT_MAX)
    cpus_per_task: Count = 1
    mem_per_node_mb: int = Field(0, ge=0, le=MEM_MAX_MB)
    mem_per_cpu_mb: int = Field(0, ge=0, le=MEM_MAX_MB)
    min_cpus_per_node: int = Field(0, ge=0, le=COUNT_MAX)  # --mincpus
    rlimits: RLimits = {}
    tmp_mb: int = Field(0, ge=0, le=MEM_MAX_MB)  # --tmp
    time_limit: str | None = Field(None, max_length=32)
    begin: str | None = Field(None, max_length=64)
    deadline: str | None = Field(None, max_length=64)
    dependency: str = Field("", max_length=TEXT_MAX)
    array: str = Field("", max_length=TEXT_MAX)
    hold: bool = False
    exclusive: bool = False
    overcommit: bool = False  # -O: CPUs as for one task per node, the tasks sharing them
    no_kill: bool = False  # -k: a failed node leaves the job, which runs on without it
    mail_type: str = Field("", max_length=256)  # --mail-type (wattsched.mailtypes)
    mail_user: str = Field("", max_length=256)  # --mail-user
    nodelist: str = Field("", max_length=TEXT_MAX)
    exclude: str = Field("", max_length=TEXT_MAX)
    constraint: Name = ""
    output: Path = ""
    error: Path = ""
    input: Path = "/dev/null"
    open_mode: Literal["truncate", "append"] = "truncate"
    signal: str = Field("", max_length=32)
    comment: Comment = ""
    wckey: Short = ""
    requeue: bool | None = None
    interactive: bool = False
    immediate: bool = False
    test_only: bool = False  # sbatch --test-only: validate and plan, submit nothing
    nice: int = Field(0, ge=-2147483645, le=2147483645)
    reservation: Annotated[str, Field(max_length=256), AfterValidator(check_label)] = ""
    cpu_freq: str = Field("", max_length=64)
    power_fit: bool = False
    energy_policy: str = Field("", max_length=32)
    profile: str = Field("", max_length=32)
    acctg_freq: str = Field("", max_length=128)
    # GPUs (wattsched.gres): at most one of them
    gres: str = Field("", max_length=128)
    gpus: str = Field("", max_length=128)
    gpus_per_node: str = Field("", max_length=128)
    gpus_per_task: str = Field("", max_length=128)
    tres_bind: str = Field("", max_length=tresbind.MAX_LEN)  # --tres-bind, --gpu-bind
    licenses: str = Field("", max_length=TEXT_MAX)  # -L name[:count],... (wattsched.licenses)


class WillRun(BaseModel):
    """sbatch --test-only: when and where the job would start (nothing is submitted)."""

    start_time: float | None  # None: the plan has no start for it (reason says why)
    nodes: list[str] = []
    cpus: int = 0
    partition: str = ""
    reason: str = ""
    # what the same job's earlier runs let expect (wattsched.prediction; 0: no earlier run)
    expected_elapsed_s: float = 0.0
    expected_energy_j: float = 0.0
    expected_watts: float = 0.0
    expected_runs: int = 0


class SubmitReply(BaseModel):
    job_id: int
    array_task_ids: list[int] = []
    will_run: WillRun | None = None  # only for test_only
    # an interactive job (srun, salloc), placed at once if it can be: its state and reason then, so
    # that the command waits for nothing more when it runs already
    state: str = ""
    reason: str = ""


class JobUpdate(Strict):
    """``scontrol update job``: only the fields given change."""

    hold: Literal["user", "admin"] | None = None
    release: bool = False
    time_limit: str | None = Field(None, max_length=32)
    priority: int | None = Field(None, ge=0, le=INT32)
    nice: int | None = Field(None, ge=-2147483645, le=2147483645)
    name: Name | None = None
    comment: Comment | None = None
    admin_comment: Comment | None = None  # AdminComment (administrators only)
    partition: Short | None = None
    tres_bind: str | None = Field(None, max_length=tresbind.MAX_LEN)  # "": cleared
    licenses: str | None = Field(None, max_length=TEXT_MAX)  # "": cleared
    mail_type: str | None = Field(None, max_length=256)  # MailType=
    mail_user: str | None = Field(None, max_length=256)  # MailUser=


class ReservationSpec(Strict):
    """``scontrol create|update reservation``: Slurm's keys; on update only the given ones change.
    Times and durations are Slurm's strings (``now+20minutes``, ``2-12:00:00``), parsed by the
    controller against its own clock."""

    name: str = Field("", max_length=256, pattern=r"^[A-Za-z0-9_.\-]*$")
    start_time: str = Field("", max_length=64)
    end_time: str = Field("", max_length=64)
    duration: str = Field("", max_length=64)
    nodes: str = Field("", max_length=TEXT_MAX)
    node_cnt: Count | None = None
    users: Comment = ""
    accounts: Comment = ""
    partition: Short = ""
    flags: str = Field("", max_length=1024)
    watts: int | None = Field(None, ge=0, le=BIG)
    features: str | None = Field(None, max_length=1024)  # None: unchanged on update
    skip: bool = False  # update of a recurring one: on to its next occurrence (scontrol's bare "skip")


def _program(text: str) -> str:
    """A trigger's program: an absolute path, then its arguments (split at spaces, as Slurm's)."""
    if not text.startswith("/") or "\0" in text:
        raise ValueError('The --program value must start with "/"')
    return text


class TriggerSpec(Strict):
    """``strigger --set``: what to wait for, on what, and the program to run (Slurm's trigger_info)."""

    res_type: Literal["node", "job", "slurmctld", "slurmdbd", "database"]
    types: list[Annotated[str, Field(max_length=64)]] = Field(min_length=1, max_length=16)
    res_id: str = Field("*", min_length=1, max_length=TEXT_MAX)  # nodes ("*": all) or the job id
    offset: int = Field(0, ge=-32000, le=32000)
    perm: bool = False
    program: Annotated[str, Field(min_length=2, max_length=PATH_MAX), AfterValidator(_program)]


class PowerCapUpdate(Strict):
    """``scontrol update powercap=<watts>|<share>%|INFINITE``."""

    power_cap: str = Field(min_length=1, max_length=32)


class PowerCapStepSpec(Strict):
    """A step of the cap's schedule (wattsched.capschedule): ``power_cap`` is VALUE@START, the
    times Slurm's strings, parsed by the controller against its own clock."""

    power_cap: str = Field(min_length=3, max_length=96)
    end_time: str = Field("", max_length=64)
    duration: str = Field("", max_length=64)
    flags: str = Field("", max_length=16)


ACCOUNT_KEYS = frozenset({"account", "accounts", "defaultaccount", "parent"})  # sacctmgr keys naming accounts


class AssocRequest(Strict):
    """sacctmgr add|modify|delete cluster|account|user|qos NAMES [where K=V...] [set K=V...].
    Keys are sacctmgr's, lower case (parent, fairshare, description, organization, account,
    defaultaccount, adminlevel, the limits of wattsched.limits, qos, defaultqos, and a QOS's
    priority, flags, preempt...); a list's ``key+``/``key-`` adds to it or takes from it."""

    action: Literal["add", "modify", "delete"]
    entity: Literal["cluster", "account", "user", "qos"]
    names: list[Short] = Field(min_length=1, max_length=LIST_MAX)
    where: dict[Short, Text] = Field({}, max_length=64)
    values: dict[Short, Comment] = Field({}, max_length=64)

    @model_validator(mode="after")
    def _accounts_in_lower_case(self) -> AssocRequest:
        """Account names are kept in lower case, as sacctmgr and slurmctld make them (a job's
        --account=Proj is proj's): names, and every key that names an account."""
        if self.entity == "account":
            self.names = [name.lower() for name in self.names]
        for table in (self.where, self.values):
            for key in ACCOUNT_KEYS & set(table):
                table[key] = table[key].lower()
        return self


class CancelRequest(Strict):
    """scancel: signal (default: cancel) the named jobs."""

    job_ids: list[Annotated[str, Field(max_length=64)]] = Field(min_length=1, max_length=LIST_MAX)
    signal: int | None = Field(None, ge=1, le=64)
    batch_only: bool = False  # scancel -b: the batch shell alone
    full: bool = False  # scancel -f: the batch shell and every step (else, as Slurm's, the steps alone)


class FreezeJob(Strict):
    """Controller -> agent: freeze (scontrol suspend) or thaw (resume) a job's processes on some nodes."""

    job_id: int
    nodes: list[Annotated[str, Field(max_length=ID_MAX)]] = Field(max_length=COUNT_MAX)
    frozen: bool


class Order(Strict):
    """Controller -> agent: stop (scontrol shutdown), or read the configuration again (scontrol
    reconfigure); an order with nothing more to say."""


class JobFreq(Strict):
    """Controller -> agent: a running job's CPUs to another frequency (kHz; None: back to what they
    had), as the power cap's shedding decides (wattsched.capshed)."""

    job_id: int
    nodes: list[Annotated[str, Field(max_length=ID_MAX)]] = Field(max_length=COUNT_MAX)
    khz: int | None = Field(None, ge=1, le=100_000_000)


class NodeUpdate(Strict):
    state: Literal["", "drain", "resume", "down", "idle", "undrain", "power_down", "power_down_asap",
                   "power_up"] = ""
    reason: Comment = ""
    # set as given on every node named (Slurm 23.11's rule: no list of one value per node); "" clears
    instance_id: Short | None = None
    instance_type: Short | None = None
    cap_watts: Short | None = None  # watts its hardware is to hold it to, or NONE (ours)


class PartitionChange(Strict):
    """``scontrol create|update PartitionName=``: Slurm's keys and values in the order given
    (``Nodes+``, ``Nodes-`` for ``Nodes+=``, ``Nodes-=``), read by the controller as slurm.conf's."""

    name: Short = ""  # create's; an update names its partition in the path
    settings: list[tuple[Annotated[str, Field(max_length=32)], Annotated[str, Field(max_length=TEXT_MAX)]]] = \
        Field([], max_length=64)


class StepCreate(Strict):
    """srun inside an allocation: lay out a step's tasks over the job's nodes."""

    name: Name = ""
    ntasks: Count | None = None
    nodes: Count | None = None
    ntasks_per_node: int = Field(0, ge=0, le=COUNT_MAX)
    cpus_per_task: Count = 1
    nodelist: list[Annotated[str, Field(max_length=128)]] = Field([], max_length=COUNT_MAX)  # srun -w
    exclude: list[Annotated[str, Field(max_length=128)]] = Field([], max_length=COUNT_MAX)  # srun -x
    # srun -m arbitrary: each task's node, in task order (SLURM_HOSTFILE)
    arbitrary: list[Annotated[str, Field(max_length=128)]] = Field([], max_length=COUNT_MAX)
    overlap: bool = False  # srun --overlap: shares the CPUs other steps hold, and holds none


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
    array_job_id: int = 0  # the job's array, for %A and %a in the tasks' file patterns
    array_task_id: int | None = None


class NoAllocationStep(Strict):
    """srun -Z (root's): tasks on the nodes named, with no job and no allocation."""

    nodelist: list[Annotated[str, Field(max_length=128)]] = Field(min_length=1, max_length=COUNT_MAX)
    ntasks: Count | None = None  # one per node by default


class BcastRequest(Strict):
    """sbcast asks for leave to write a file to a running job's nodes (-w: some of them)."""

    nodelist: list[Annotated[str, Field(max_length=128)]] = Field([], max_length=COUNT_MAX)


class BcastNode(BaseModel):
    node: str
    agent_url: str


class BcastGrant(BaseModel):
    """The controller's leave for sbcast: the job's nodes, their agents, and a credential they check."""

    job_id: int
    nodes: list[BcastNode]
    credential: str


class BcastFile(Strict):
    """sbcast's file for the job's nodes one agent serves: this, as the request body's first line,
    then the file's bytes (zlib-compressed with -C)."""

    job_id: int = Field(ge=1, le=BIG)
    nodes: list[Annotated[str, Field(max_length=128)]] = Field(min_length=1, max_length=COUNT_MAX)
    credential: str = Field(max_length=1 << 20)
    dest: Destination
    size: int = Field(ge=0, le=1 << 44)  # what the file holds, uncompressed
    mode: int = Field(0o600, ge=0, le=0o7777)  # the source's permission bits
    times: tuple[int, int] | None = None  # -p: the source's access and modification times
    force: bool = False  # -f: replace the destination
    compress: Literal["none", "zlib"] = "none"


class StepComplete(Strict):
    """srun's word that a step ended (its usage comes from the node agents)."""

    exit_code: int = Field(0, ge=0, le=255)
    term_signal: int = Field(0, ge=0, le=64)


class AllocationComplete(Strict):
    exit_code: int = Field(0, ge=0, le=255)
    term_signal: int = Field(0, ge=0, le=64)


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
    gpu_j: float = 0.0  # the energy of its GPUs on the node while it held them
    # its signature over the last interval and its energy policy's choice (wattsched.energypolicy)
    cpi: float = Field(0.0, ge=0.0, le=1e4)
    gbs: float = Field(0.0, ge=0.0, le=1e6)
    memory_bound: float = Field(0.0, ge=0.0, le=1.0)
    policy_khz: int = Field(0, ge=0, le=INT32)
    time_factor: float = Field(0.0, ge=0.0, le=1e3)
    energy_factor: float = Field(0.0, ge=0.0, le=1e3)


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
    # why the node's energy is unknown: its sensor's last read failed ("" while readings come)
    energy_error: str = Field("", max_length=256)
    # the limit its hardware holds it to (None: the site's own settings), and why not the one ordered
    power_limit_w: float | None = Field(None, ge=0, le=1e7)
    power_limit_error: str = Field("", max_length=256)


class TaskUsage(Strict):
    """What one task (or a batch script) used, from the kernel's rusage when it was reaped."""

    task: int = Field(0, ge=0, le=COUNT_MAX)
    node: str = Field("", max_length=NAME_MAX)
    user_cpu_s: float = Field(0.0, ge=0, le=BIG)
    system_cpu_s: float = Field(0.0, ge=0, le=BIG)
    max_rss_kb: int = Field(0, ge=0, le=BIG)
    disk_read_b: int = Field(0, ge=0, le=BIG)
    disk_write_b: int = Field(0, ge=0, le=BIG)
    pages: int = Field(0, ge=0, le=BIG)  # major page faults


class TaskStat(TaskUsage):
    """sstat's view of one running task (TaskUsage's figures so far), with what only a live task has."""

    step_id: str = Field(max_length=16)
    vsize_kb: int = Field(0, ge=0, le=BIG)
    pids: list[int] = Field([], max_length=LIST_MAX)


class StatRequest(Strict):
    """sstat asks an agent for the tasks of some running steps of a job on some of its nodes, with
    the controller's leave (a credential naming the job, its steps and nodes, and its user)."""

    job_id: int = Field(ge=1, le=BIG)
    steps: list[Annotated[str, Field(max_length=16)]] = Field(min_length=1, max_length=LIST_MAX)
    nodes: list[Annotated[str, Field(max_length=128)]] = Field(min_length=1, max_length=COUNT_MAX)
    credential: str = Field(max_length=1 << 20)


class StepOnNode(Strict):
    """srun addresses one node's part of a running step, with the step's credential."""

    job_id: int = Field(ge=1, le=BIG)
    step_id: int = Field(ge=0, le=INT32)
    node: str = Field(max_length=128)
    credential: str = Field(max_length=1 << 20)


class TaskInput(StepOnNode):
    """A piece of srun's standard input for the tasks of a step on one node (base64), or its end."""

    data: str = Field("", max_length=1 << 20)
    eof: bool = False


class JobEvent(Strict):
    """A batch script, or a step's tasks on one node, that ended (kept by the agent until the
    controller acknowledges). Step ends carry their tasks' usage whether srun is still there to
    hear them or not, so cancelled and timed-out steps keep their accounting."""

    job_id: int
    node: str
    run: int = 0  # the job's restart count when it was launched
    step_id: str = Field("batch", max_length=16)  # "batch", or the srun step's number
    exit_code: int = 0
    term_signal: int = 0
    end_time: float
    tasks: list[TaskUsage] = Field([], max_length=COUNT_MAX)
    error: str = Field("", max_length=1024)  # why the script could not be started (Slurm's wording)
    oom_killed: bool = False  # the kernel's OOM killer ended a process of it (its cgroup's memory limit)
    # a batch end: its energy policy's latest choice on the node, which a heartbeat may not have
    # carried yet (the policy may decide just before the job ends)
    policy: JobUsage | None = None


class AgentHeartbeat(Strict):
    agent_url: str
    boot_time: float
    nodes: list[NodeReport]
    events: list[JobEvent] = []


EPOCH_HEADER = "X-Wattsched-Epoch"  # a controller's fencing token (StateStore.fencing_token) on its orders
_FENCING = re.compile(r"^([0-9a-f]{0,32}):(\d{1,18})$")


def fencing(token: str) -> tuple[str, int] | None:
    """A fencing token ``STORE:EPOCH`` read, or None when it is not one."""
    found = _FENCING.match(token)
    return (found.group(1), int(found.group(2))) if found else None


class HeartbeatReply(BaseModel):
    acknowledged: list[int] = []
    # per node, the jobs it runs that the controller does not hold there (ended, or a --no-kill job's
    # node it lost): killed on that node alone, for the same agent may host the job's other nodes
    cancel: dict[str, list[int]] = {}
    # per node, the limit its hardware is to hold it to (None: lift it), for the nodes limited or to be lifted
    power_limits: dict[str, float | None] = {}
    lease: str = ""  # the controller's fencing token: agents take orders from the newest lease only


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
    rlimits: RLimits = {}  # the job's submitting shell's, for the agent to choose from


class JobAllocation(Strict):
    """A job's allocation, sent to every agent hosting one of its nodes when it starts: the
    agent sets the job's CPU frequency there and profiles it, until the job ends on the node."""

    job_id: int
    uid: int
    user: str
    start_time: float
    nodes: dict[str, int]  # node -> allocated CPUs
    mem_mb: int = Field(0, ge=0, le=MEM_MAX_MB)  # memory per node (0: none asked; the cgroup limit is the node's)
    # what Prolog and Epilog are told of the job (Slurm's SLURM_JOB_* variables)
    run: int = Field(0, ge=0, le=INT32)  # the job's restart count
    gid: int = Field(0, ge=0, le=INT32)
    account: Short = ""
    partition: Short = ""
    job_name: str = Field("", max_length=NAME_MAX)
    node_list: str = Field("", max_length=TEXT_MAX)
    cpu_freq: str = ""  # --cpu-freq, else CpuFreqDef, else the frequency fitted to the power cap
    # under the moving budget: each node's power limit, held before the job runs there (watts)
    power_limits: dict[str, Annotated[float, Field(ge=0.0, le=1e6)]] = {}
    profile: list[ProfileSeries] = []
    profile_energy_s: int = Field(0, ge=0)
    profile_task_s: int = Field(0, ge=0)
    gpus: dict[str, list[Annotated[int, Field(ge=0, le=1 << 16)]]] = {}  # node -> the job's GPU numbers there
    # its energy policy (wattsched.energypolicy): name, setting, min_time's starting kHz
    energy_policy: str = "monitoring"
    energy_setting: float = Field(0.0, ge=0.0, le=1.0)
    energy_start_khz: int = Field(0, ge=0)
    # an emulated node's application model (energypolicy.app_model): (memory-bound share, seconds) phases
    app_model: list[tuple[Annotated[float, Field(ge=0.0, le=1.0)], Annotated[float, Field(ge=0.0, le=1e9)]]] = \
        Field([], max_length=16)


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
    step_id: int | None = None  # one step's tasks only (scancel JOB.STEP)
    full: bool = False  # the batch shell as well as the steps (else the steps alone)


class TaskLaunch(Strict):
    """srun asks one node's agent to run its share of a step's tasks."""

    job_id: int = Field(ge=1, le=BIG)
    step_id: int = Field(ge=0, le=INT32)
    node: str = Field(max_length=128)
    credential: str = Field(max_length=1 << 20)
    argv: Argv = Field(min_length=1)
    environment: Environment = {}
    work_dir: WorkDir
    label: bool = False
    unbuffered: bool = False
    output: Path = ""
    error: Path = ""
    input: Path = ""  # srun -i FILE: a file pattern each task opens (as its user)
    stdin_tasks: list[int] = Field([], max_length=COUNT_MAX)  # tasks fed srun's own stdin (srun -i)
    pty: bool = False  # task 0 runs in a pseudo-terminal (srun --pty)
    rows: int = Field(24, ge=1, le=4096)  # the pseudo-terminal's size, from srun's terminal
    cols: int = Field(80, ge=1, le=4096)
    open_mode: Literal["truncate", "append"] = "truncate"
    cpu_bind: str = Field("", max_length=65536)  # srun --cpu-bind (wattsched.cpubind)
    mpi: str = Field("none", pattern=r"^[a-z0-9_]{1,32}$")  # srun --mpi, resolved (wattsched.plugins.mpi)
    multi_prog: str = Field("", max_length=multiprog.MAX_BYTES)  # srun --multi-prog's file
    preserve_env: bool = False  # srun -E: SLURM_NNODES and SLURM_NTASKS as srun had them, not the step's
    job_name: Name = ""  # for %x in the tasks' file patterns, and the job's array for %A and %a
    array_job_id: int = Field(0, ge=0, le=BIG)
    array_task_id: int | None = Field(None, ge=0, le=INT32)
    rlimits: RLimits = {}  # srun's shell's, for the agent to choose from
    slurmd_debug: int = Field(2, ge=0, le=7)  # srun --slurmd-debug: the step daemon's log level (LOG_LEVELS' index)
    # srun --task-prolog/--task-epilog: the user's programs, run as the user around each task
    task_prolog: str = Field("", max_length=PATH_MAX)
    task_epilog: str = Field("", max_length=PATH_MAX)


class PmiMessage(Strict):
    """What srun relays between a step's MPI servers: a fence's union of every node's puts (PMI's
    keys and values, at PMI's maxima) or of every node's packed contribution (PMIx's, base64, by node)."""

    pmi: Literal["fence"]
    seq: int = Field(0, ge=0, le=INT32)
    kvs: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=1024)]] = Field(
        {}, max_length=COUNT_MAX)
    blobs: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=64 << 20)]] = Field(
        {}, max_length=COUNT_MAX)


class StepPmi(StepOnNode):
    """srun hands one node's MPI server of a step what the step's other nodes said."""

    message: PmiMessage


class StepTerminate(StepOnNode):
    """srun ends a step's tasks on one node for a failure elsewhere in the step: a task's bad exit
    under srun -K, or an MPI abort (SIGTERM, then SIGKILL); or sends them ``signal``: SIGKILL when
    srun -W's time is up or Ctrl-C forces the step's end, SIGINT for Ctrl-C."""

    reason: str = Field("", max_length=1024)
    signal: int = Field(0, ge=0, le=64)

"""slurmrestd's documents and requests (data_parser v0.0.40 to v0.0.45): the models the REST API's
OpenAPI document publishes, and the conversions of slurmrestd's job and node descriptions into wattsched's
own messages (what sbatch and scontrol would send for the same options).

Response models declare the fields tools rely on and let Slurm's others through (``Open``); the
request models are closed: a field wattsched does not act on is refused, naming it, rather than
silently dropped. A conversion that cannot be made raises ValueError with Slurm's wording.
"""

from __future__ import annotations

import datetime
import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wattsched import nodecount, tresbind
from wattsched.api import (
    BIG,
    COUNT_MAX,
    ID_MAX,
    INT32,
    LIST_MAX,
    MEM_MAX_MB,
    NAME_MAX,
    PATH_MAX,
    SCRIPT_MAX,
    TEXT_MAX,
    Comment,
    JobSubmit,
    JobUpdate,
    Name,
    NodeUpdate,
    Short,
    Strict,
)

# --- the documents' shapes (the OpenAPI contract) ----------------------------------------------------

class Open(BaseModel):
    """A Slurm object: the declared fields are checked, Slurm's others pass through."""

    model_config = ConfigDict(extra="allow")


class NoVal(BaseModel):
    """Slurm's optional number."""

    set: bool = True
    infinite: bool = False
    number: int = Field(0, ge=-BIG, le=BIG)


class SlurmError(Open):
    error: str
    error_number: int
    description: str = ""
    source: str = ""


class Meta(Open):
    plugin: dict[str, str]
    client: dict[str, str]
    slurm: dict[str, Any]


class Document(Open):
    meta: Meta
    errors: list[SlurmError]
    warnings: list[dict[str, Any]]


class JobInfo(Open):
    job_id: int
    name: str
    user_name: str
    account: str
    partition: str
    job_state: list[str]
    nodes: str
    state_reason: str
    submit_time: NoVal
    start_time: NoVal
    end_time: NoVal
    time_limit: NoVal
    exit_code: dict[str, Any]


class JobsDoc(Document):
    jobs: list[JobInfo]
    last_backfill: NoVal
    last_update: NoVal


class NodeInfo(Open):
    name: str
    state: list[str]
    cpus: int
    alloc_cpus: int
    real_memory: int
    partitions: list[str]
    energy: dict[str, Any]


class NodesDoc(Document):
    nodes: list[NodeInfo]
    last_update: NoVal


class PartitionInfo(Open):
    name: str
    nodes: dict[str, Any]
    cpus: dict[str, Any]


class PartitionsDoc(Document):
    partitions: list[PartitionInfo]
    last_update: NoVal


class ReservationInfo(Open):
    name: str
    node_list: str
    start_time: NoVal
    end_time: NoVal
    flags: list[str]


class ReservationsDoc(Document):
    reservations: list[ReservationInfo]
    last_update: NoVal


class LicenseInfo(Open):
    LicenseName: str
    Total: int
    Used: int
    Free: int


class LicensesDoc(Document):
    licenses: list[LicenseInfo]
    last_update: NoVal


class Ping(Open):
    hostname: str
    latency: int
    pinged: str | None = None  # up to v0.0.44; v0.0.45 says "status"
    mode: str | None = None  # up to v0.0.44; v0.0.42 and later say "primary"
    responding: bool | None = None  # from v0.0.42


class PingDoc(Document):
    pings: list[Ping]


class DiagDoc(Document):
    statistics: dict[str, Any]


class SubmitResult(Open):
    job_id: int
    step_id: str
    error_code: int
    error: str
    job_submit_user_msg: str


class SubmitDoc(Document):
    job_id: int
    step_id: str
    job_submit_user_msg: str
    result: SubmitResult | None = None  # up to v0.0.41


class DbJob(Open):
    job_id: int
    name: str
    user: str
    account: str
    state: dict[str, Any]
    time: dict[str, Any]
    tres: dict[str, Any]
    steps: list[dict[str, Any]]


class DbJobsDoc(Document):
    jobs: list[DbJob]


class AssocInfo(Open):
    account: str
    cluster: str
    user: str
    parent_account: str
    shares_raw: int


class AssociationsDoc(Document):
    associations: list[AssocInfo]


class AccountInfo(Open):
    name: str
    description: str
    organization: str


class AccountsDoc(Document):
    accounts: list[AccountInfo]


class UserInfo(Open):
    name: str
    default: dict[str, str]
    administrator_level: list[str]


class UsersDoc(Document):
    users: list[UserInfo]


# --- requests ----------------------------------------------------------------------------------------

Number = Annotated[int, Field(ge=0, le=BIG)] | NoVal
Names = Annotated[list[Annotated[str, Field(max_length=ID_MAX)]], Field(max_length=LIST_MAX)]
Flags = Annotated[list[Annotated[str, Field(max_length=32)]], Field(max_length=16)]


class JobDesc(Strict):
    """slurmrestd's job_desc_msg: the fields wattsched acts on (others are refused, naming them,
    rather than silently dropped)."""

    script: str | None = Field(None, max_length=SCRIPT_MAX)
    name: Name | None = None
    account: Short | None = None
    partition: Short | None = None
    qos: Short | None = None
    wckey: Short | None = None
    comment: Comment | None = None
    admin_comment: Comment | None = None
    current_working_directory: str | None = Field(None, max_length=PATH_MAX)
    environment: Annotated[list[Annotated[str, Field(max_length=1 << 20)]], Field(max_length=LIST_MAX)] | None = None
    argv: Annotated[list[Annotated[str, Field(max_length=1 << 20)]], Field(max_length=LIST_MAX)] | None = None
    standard_input: str | None = Field(None, max_length=PATH_MAX)
    standard_output: str | None = Field(None, max_length=PATH_MAX)
    standard_error: str | None = Field(None, max_length=PATH_MAX)
    open_mode: Flags | None = None
    nodes: str | None = Field(None, max_length=32)
    minimum_nodes: int | None = Field(None, ge=1, le=COUNT_MAX)
    maximum_nodes: int | None = Field(None, ge=0, le=COUNT_MAX)
    tasks: int | None = Field(None, ge=1, le=COUNT_MAX)
    tasks_per_node: int | None = Field(None, ge=0, le=COUNT_MAX)
    cpus_per_task: int | None = Field(None, ge=1, le=COUNT_MAX)
    memory_per_node: Number | None = None
    memory_per_cpu: Number | None = None
    time_limit: Number | None = None
    begin_time: Number | None = None
    priority: Number | None = None
    nice: int | None = Field(None, ge=-2147483645, le=2147483645)
    dependency: str | None = Field(None, max_length=TEXT_MAX)
    array: str | None = Field(None, max_length=TEXT_MAX)
    reservation: str | None = Field(None, max_length=256)
    constraints: str | None = Field(None, max_length=NAME_MAX)
    required_nodes: Names | None = None
    excluded_nodes: Names | None = None
    exclusive: Flags | bool | None = None
    shared: Flags | None = None
    hold: bool | None = None
    requeue: bool | None = None
    immediate: bool | None = None
    kill_on_node_fail: bool | None = None
    cpu_frequency: str | None = Field(None, max_length=64)
    profile: Flags | None = None
    tres_per_node: str | None = Field(None, max_length=128)  # "gres/gpu:2", as --gres
    tres_per_job: str | None = Field(None, max_length=128)  # as --gpus
    tres_per_task: str | None = Field(None, max_length=128)  # as --gpus-per-task
    tres_bind: str | None = Field(None, max_length=tresbind.MAX_LEN)  # as --tres-bind


class SubmitRequest(Strict):
    script: str | None = Field(None, max_length=SCRIPT_MAX)
    job: JobDesc


class NodeChange(Strict):
    state: Flags = Field(min_length=1)
    reason: Comment = ""


# --- conversions ---------------------------------------------------------------------------------------

def _number(value: int | NoVal | None) -> float | None:
    """A given number (math.inf for infinite), or None when absent or unset."""
    if value is None:
        return None
    if isinstance(value, NoVal):
        return math.inf if value.infinite else (value.number if value.set else None)
    return float(value)


def _node_range(desc: JobDesc) -> tuple[int, int]:
    if desc.nodes:
        return nodecount.parse(desc.nodes[:64])
    return desc.minimum_nodes or 1, desc.maximum_nodes or 0


def job_submit(desc: JobDesc, script: str | None) -> JobSubmit:
    """A job_desc_msg as the submission sbatch would make from the same options."""
    script = script or desc.script
    if not script:
        raise ValueError("Batch job script is required: give 'script'")
    if not desc.current_working_directory:
        raise ValueError("Field 'current_working_directory' is required")
    environment = {}
    for item in desc.environment or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"Invalid environment entry (expected NAME=VALUE): {item[:64]}")
        environment[key] = value
    limit, begin = _number(desc.time_limit), _number(desc.begin_time)
    nodes_min, nodes_max = _node_range(desc)
    if isinstance(desc.exclusive, bool):
        exclusive = desc.exclusive
    else:
        exclusive = bool({f.lower() for f in desc.exclusive or ()} & {"true", "user", "mcs", "exclusive"})
    fields: dict[str, Any] = {
        "name": desc.name or "", "script": script, "argv": desc.argv or [], "work_dir": desc.current_working_directory,
        "environment": environment, "submit_line": "slurmrestd job/submit", "account": desc.account or "",
        "qos": desc.qos or "", "partition": desc.partition or "", "nodes_min": nodes_min, "nodes_max": nodes_max,
        "ntasks": desc.tasks,
        "ntasks_per_node": desc.tasks_per_node or 0, "cpus_per_task": desc.cpus_per_task or 1,
        "mem_per_node_mb": int(min(_number(desc.memory_per_node) or 0, MEM_MAX_MB + 1)),
        "mem_per_cpu_mb": int(min(_number(desc.memory_per_cpu) or 0, MEM_MAX_MB + 1)),
        "time_limit": None if limit is None else "UNLIMITED" if math.isinf(limit) else str(int(limit)),
        "begin": None if not begin or math.isinf(begin) else
        datetime.datetime.fromtimestamp(min(begin, 253402214400)).strftime("%Y-%m-%dT%H:%M:%S"),
        "dependency": desc.dependency or "", "array": desc.array or "", "hold": bool(desc.hold),
        "exclusive": exclusive or "none" in (desc.shared or ()), "nodelist": ",".join(desc.required_nodes or ()),
        "exclude": ",".join(desc.excluded_nodes or ()), "constraint": desc.constraints or "",
        "output": desc.standard_output or "", "error": desc.standard_error or "",
        "input": desc.standard_input or "/dev/null",
        "open_mode": "append" if "APPEND" in [f.upper() for f in desc.open_mode or ()] else "truncate",
        "comment": desc.comment or "", "wckey": desc.wckey or "", "requeue": desc.requeue,
        "immediate": bool(desc.immediate), "nice": desc.nice or 0, "reservation": desc.reservation or "",
        "no_kill": desc.kill_on_node_fail is False, "cpu_freq": desc.cpu_frequency or "",
        "profile": ",".join(desc.profile or ()),
        "gres": desc.tres_per_node or "", "gpus": (desc.tres_per_job or "").removeprefix("gres/"),
        "gpus_per_task": (desc.tres_per_task or "").removeprefix("gres/"), "tres_bind": desc.tres_bind or "",
    }
    try:
        return JobSubmit(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"Invalid job description: {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def job_update(desc: JobDesc) -> JobUpdate:
    limit, priority = _number(desc.time_limit), _number(desc.priority)
    unsupported = desc.model_fields_set - {"time_limit", "priority", "nice", "name", "comment", "admin_comment",
                                           "partition", "hold", "tres_bind"}
    if unsupported:
        raise ValueError(f"Cannot update {', '.join(sorted(unsupported))} through this API")
    try:
        return JobUpdate(
            hold="user" if desc.hold else None, release=desc.hold is False,
            time_limit=None if limit is None else "UNLIMITED" if math.isinf(limit) else str(int(limit)),
            priority=None if priority is None else int(min(priority, INT32)), nice=desc.nice, name=desc.name,
            comment=desc.comment, admin_comment=desc.admin_comment, partition=desc.partition,
            tres_bind=desc.tres_bind)
    except ValidationError as exc:
        raise ValueError(f"Invalid job update: {exc.errors()[0]['msg']}") from exc


def node_update(change: NodeChange) -> NodeUpdate:
    words = {s.upper() for s in change.state}
    for flag in ("RESUME", "UNDRAIN", "DRAIN", "DOWN", "IDLE", "POWER_DOWN", "POWER_UP"):
        if flag in words:  # (NodeUpdate checks the word against its own list)
            return NodeUpdate.model_validate({"state": flag.lower(), "reason": change.reason})
    raise ValueError(f"Invalid node state: {','.join(sorted(words))[:64]}")



"""QOS and association limits, as Slurm's accounting policy (acct_policy): the records (QOS,
associations' limits, use, active and pending jobs as the limits count them), TRES, Slurm's
pending reasons, the settings sacctmgr takes and the use recorded in a period. The verdicts,
which job may start and which submission is refused, are :mod:`wattsched.ledger`'s.

Pure: the controller and the simulator build these records with the same code.

- TRES are counted as Slurm counts them: ``cpu``, ``mem`` (MB), ``node``, ``gres/gpu``, ``billing``
  (a CPU each: wattsched has no TRESBillingWeights) and ``energy`` (joules). ``power`` (watts) is
  ours: a job draws its CPUs' share of its nodes' MaxWatts, so ``GrpTRES=power=30000`` keeps a
  QOS or an account under 30 kW whatever its jobs' sizes.
- ``*TRESMins`` limits count TRES-minutes of use, decayed by PriorityDecayHalfLife and reset at
  each PriorityUsageResetPeriod, each job's use multiplied by its QOS's UsageFactor; ``energy``
  counts joules there (energy is already an integral over time), so ``GrpTRESMins=energy=1.44e11``
  is an energy budget of 40 MWh per period. Running jobs count with what they used so far.
- Group limits (``Grp*``) hold for an association and all below it, and for everything in a QOS;
  a ``Max*`` limit of an association is inherited from the nearest ancestor that sets it (user,
  then account, parent, ..., root), as in Slurm. A QOS's limits are checked before the
  association's, as Slurm's, and the first one a job would exceed is its pending reason.
- ``safe`` (AccountingStorageEnforce): a job starts against a TRES-minutes budget only if its
  worst case (its TRES, or its power, for its whole time limit) fits what remains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from wattsched import gres, timefmt
from wattsched.fairshare import ROOT, decayed_seconds

# The TRES a limit may name, in Slurm's order (energy and billing as Slurm has them; power is ours).
TRES = ("cpu", "mem", "energy", "node", "billing", "gres/gpu", "power")
# where a TRES means something: power is drawn at a moment, energy is used over time
_NOT_AT_ONCE = {"energy"}  # GrpTRES, MaxTRESPer*: energy is counted by *TRESMins
_NOT_OVER_TIME = {"power"}  # *TRESMins: power has no meaning over a period (energy does)
_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
UNLIMITED = -1  # sacctmgr's way of clearing a limit (Slurm's INFINITE)

Tres = Mapping[str, int]
_EMPTY: Mapping[str, int] = MappingProxyType({})


class LimitError(ValueError):
    """A limit or QOS setting that cannot be taken; the message says why."""


def parse_tres(text: str, over_time: bool = False) -> dict[str, int]:
    """``cpu=10,mem=20G,energy=5000,gres/gpu=2``: counts by TRES; ``-1`` clears one (kept as -1,
    the caller drops it). ``over_time``: for a TRES-minutes limit (power has none)."""
    result: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if name == "gres/gpu" or name.startswith("gres/gpu:"):
            name = "gres/gpu"
        if not sep or name not in TRES:
            raise LimitError(f"Invalid TRES '{item}': give name=count with name one of {', '.join(TRES)}")
        if over_time and name in _NOT_OVER_TIME:
            raise LimitError("power has no TRES-minutes: limit energy instead (joules)")
        if not over_time and name in _NOT_AT_ONCE:
            raise LimitError("energy is counted over time: limit it with GrpTRESMins, GrpTRESRunMins or "
                             "MaxTRESMinsPerJob (joules), or limit power (watts)")
        result[name] = _count(value.strip(), name)
    return result


def _count(value: str, name: str) -> int:
    if value == "-1":
        return UNLIMITED
    match = re.fullmatch(r"(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)([KMGTP]?)", value, re.IGNORECASE)
    if match is None or (match.group(2) and name != "mem"):
        raise LimitError(f"Invalid count for {name}: {value!r}")
    number = float(match.group(1)) * (_UNITS[match.group(2).upper()] if match.group(2) else 1)
    if number > 2 ** 62:
        raise LimitError(f"Count for {name} is too large: {value}")
    return int(number)


def format_tres(tres: Tres) -> str:
    """As sacctmgr shows it: Slurm's TRES order, memory with a unit."""
    items = []
    for name in TRES:
        if name in tres:
            value = tres[name]
            if name == "mem":
                items.append(f"mem={_mem(value)}")
            else:
                items.append(f"{name}={value}")
    return ",".join(items)


def _mem(mb: int) -> str:
    for unit, size in (("P", 1024 ** 3), ("T", 1024 ** 2), ("G", 1024)):
        if mb >= size and mb % size == 0:
            return f"{mb // size}{unit}"
    return f"{mb}M"


def parse_minutes(text: str) -> int:
    """A wall-clock limit as sacctmgr takes it: minutes, or [days-]hours:minutes:seconds;
    -1 clears it."""
    text = text.strip()
    if text == "-1":
        return UNLIMITED
    try:
        minutes = timefmt.parse_duration_min(text)
    except timefmt.TimeFormatError as exc:
        raise LimitError(f"Invalid time: {text!r}") from exc
    if minutes is None or minutes < 0:
        raise LimitError(f"Invalid time: {text!r}")
    return minutes


def format_minutes(minutes: int) -> str:
    """As sacctmgr shows a wall limit: [days-]hours:minutes:seconds."""
    days, rest = divmod(minutes * 60, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# --- the records --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits an association or a QOS may set (None / empty: not set). The names are
    sacctmgr's, in snake case; ``max_jobs`` and ``max_submit`` are an association's MaxJobs and
    MaxSubmitJobs, or a QOS's MaxJobsPerUser and MaxSubmitJobsPerUser."""

    grp_tres: Tres = field(default_factory=lambda: _EMPTY)
    grp_tres_mins: Tres = field(default_factory=lambda: _EMPTY)
    grp_tres_run_mins: Tres = field(default_factory=lambda: _EMPTY)
    grp_jobs: int | None = None
    grp_submit: int | None = None
    grp_wall: int | None = None  # minutes
    max_jobs: int | None = None
    max_submit: int | None = None
    max_wall: int | None = None  # minutes, per job
    max_tres_per_job: Tres = field(default_factory=lambda: _EMPTY)
    max_tres_mins_per_job: Tres = field(default_factory=lambda: _EMPTY)
    # a QOS's alone
    max_tres_per_node: Tres = field(default_factory=lambda: _EMPTY)
    max_tres_per_user: Tres = field(default_factory=lambda: _EMPTY)
    max_tres_per_account: Tres = field(default_factory=lambda: _EMPTY)
    max_jobs_per_account: int | None = None
    max_submit_per_account: int | None = None
    min_tres_per_job: Tres = field(default_factory=lambda: _EMPTY)

    def to_json(self) -> dict[str, Any]:
        """The limits that are set, for the database and the API (the key names are the fields')."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != {}:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Limits:
        if not data:
            return NO_LIMITS
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: (MappingProxyType(dict(v)) if isinstance(v, Mapping) else v)
                                  for k, v in data.items() if k in known}
        return cls(**values)

    def changed(self, updates: Mapping[str, Any]) -> Limits:
        """These limits with ``updates`` applied: a count of -1 (UNLIMITED) clears a limit, a TRES
        given as -1 leaves the TRES out."""
        data = self.to_json()
        for key, value in updates.items():
            if isinstance(value, Mapping):
                merged = {**data.get(key, {}), **value}
                data[key] = {k: v for k, v in merged.items() if v != UNLIMITED}
            elif value == UNLIMITED or value is None:
                data.pop(key, None)
            else:
                data[key] = value
        return Limits.from_json(data)


NO_LIMITS = Limits()

QOS_FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
             "PartitionMinNodes", "PartitionTimeLimit", "RequiresReservation", "UsageFactorSafe")


@dataclass(frozen=True, slots=True)
class Qos:
    """A QOS as sacctmgr keeps it."""

    name: str
    id: int = 0
    description: str = ""
    priority: int = 0
    flags: frozenset[str] = frozenset()
    usage_factor: float = 1.0
    usage_threshold: float | None = None
    preempt: frozenset[str] = frozenset()  # the QOS this one may preempt
    preempt_mode: str = "cluster"  # Slurm shows "cluster" when the cluster's PreemptMode applies
    preempt_exempt_time: int | None = None  # minutes
    grace_time: int = 0  # seconds
    limits: Limits = NO_LIMITS
    energy_policy: str = ""  # ours: the energy policy of its jobs ("": the partition's, the cluster's)


@dataclass(frozen=True, slots=True)
class AssocLimits:
    """An association's place in the tree, its limits and its QOS (empty: its parent's)."""

    account: str
    user: str = ""
    parent: str = ROOT
    limits: Limits = NO_LIMITS
    qos: frozenset[str] = frozenset()
    default_qos: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.account, self.user


@dataclass(frozen=True, slots=True)
class Use:
    """Recorded use of an association (with all below it) or of a QOS since the period began,
    decayed: TRES-minutes by TRES (energy in joules) and wall minutes."""

    tres_mins: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    wall_mins: float = 0.0


NO_USE = Use()


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """A running (or suspended) job as the limits count it: its TRES, its power, and when its time
    limit ends (None: never)."""

    job_id: int
    user: str
    account: str
    qos: str
    tres: Tres
    end_time: float | None
    partition: str = ""


@dataclass(frozen=True, slots=True)
class AccountsSnap:
    """What the limits read: the QOS, the associations by (account, user), the recorded use, the
    active jobs, and how strictly AccountingStorageEnforce asks to apply them."""

    qos: Mapping[str, Qos]
    assocs: Mapping[tuple[str, str], AssocLimits]
    assoc_use: Mapping[tuple[str, str], Use] = field(default_factory=dict)
    qos_use: Mapping[str, Use] = field(default_factory=dict)
    active: tuple[ActiveJob, ...] = ()
    enforce: frozenset[str] = frozenset()  # AccountingStorageEnforce: limits, qos, safe, ...
    # per partition, the most watts a CPU of its nodes draws (MaxWatts / CPUs): a pending job's power
    watts_per_cpu: Mapping[str, float] = field(default_factory=dict)
    # per partition, its QOS (PartitionName ... QOS=): its limits hold every job of the partition
    partition_qos: Mapping[str, str] = field(default_factory=dict)

    def qos_of(self, qos: str, partition: str) -> tuple[str, ...]:
        """The QOS whose limits hold a job: its own and its partition's (one QOS, counted once)."""
        own = self.partition_qos.get(partition, "")
        return (qos, own) if own and own != qos and own in self.qos else (qos,)

    @property
    def limits_on(self) -> bool:
        return bool({"limits", "safe"} & self.enforce)

    def chain(self, account: str, user: str) -> list[AssocLimits]:
        """The job's association and its ancestors, up to root (unknown ones are skipped)."""
        result: list[AssocLimits] = []
        assoc = self.assocs.get((account, user))
        if assoc is not None:
            result.append(assoc)
        name, seen = account, set()
        while name and name not in seen:
            seen.add(name)
            node = self.assocs.get((name, ""))
            if node is None:
                break
            result.append(node)
            name = node.parent
        return result

    def allowed_qos(self, account: str, user: str) -> frozenset[str]:
        """The QOS the association may use: its own list, else the nearest ancestor's; root's
        default is ``normal``, as in Slurm."""
        for assoc in self.chain(account, user):
            if assoc.qos:
                return assoc.qos
        return frozenset({"normal"}) if "normal" in self.qos else frozenset()

    def default_qos(self, account: str, user: str) -> str:
        """The QOS a job gets when it names none: the association's DefaultQOS (inherited), else
        ``normal`` when allowed, else the only one allowed."""
        for assoc in self.chain(account, user):
            if assoc.default_qos:
                return assoc.default_qos
        allowed = self.allowed_qos(account, user)
        if "normal" in allowed or not allowed:
            return "normal" if "normal" in self.qos else ""
        return min(allowed) if len(allowed) == 1 else ""

    def max_wall(self, account: str, user: str, qos: str) -> int | None:
        """The wall-clock limit a job without one gets: the QOS's MaxWall, else its association's."""
        found = self.qos.get(qos)
        if found is not None and found.limits.max_wall is not None:
            return found.limits.max_wall
        return inherited(self.chain(account, user), "max_wall")


def inherited(chain: list[AssocLimits], name: str) -> Any:
    for assoc in chain:
        value = getattr(assoc.limits, name)
        if value is not None and value != {}:
            return value
    return None


def inherited_tres(chain: list[AssocLimits], name: str) -> dict[str, int]:
    """A Max TRES limit per TRES from the nearest association that sets that TRES."""
    result: dict[str, int] = {}
    for assoc in reversed(chain):
        result.update(getattr(assoc.limits, name))
    return result


# --- a job's TRES -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """What a pending job would hold, as the limits count it: its TRES (power included), its
    largest per-node share, and its time limit in minutes (None: unlimited)."""

    user: str
    account: str
    qos: str
    tres: Tres
    per_node: Tres
    minutes: int | None
    partition: str = ""


def job_tres(cpus: int, nodes: int, mem_mb: int, gpus: int, watts: float) -> dict[str, int]:
    """A job's TRES as the limits count them."""
    tres = {"cpu": cpus, "mem": mem_mb, "node": nodes, "billing": cpus}
    if gpus:
        tres["gres/gpu"] = gpus
    if watts:
        tres["power"] = math.ceil(watts)
    return tres


def request_tres(ntasks: int, cpus_per_task: int, nodes_min: int, mem_per_node_mb: int, mem_per_cpu_mb: int,
                 gpus: gres.GpuRequest, watts_per_cpu: float) -> tuple[dict[str, int], dict[str, int]]:
    """A pending job's TRES and its per-node share (the request's, before it has nodes: its power
    at the highest watts per CPU of its partition, the worst case)."""
    cpus = ntasks * max(1, cpus_per_task)
    nodes = max(1, nodes_min)
    mem = mem_per_node_mb * nodes if mem_per_node_mb else mem_per_cpu_mb * cpus
    gpu_count = gpus.per_job or gpus.per_node * nodes or gpus.per_task * ntasks
    total = job_tres(cpus, nodes, mem, gpu_count, cpus * watts_per_cpu)
    per_node = {k: -(-v // nodes) for k, v in total.items()}
    return total, per_node


# --- the reasons --------------------------------------------------------------------------------

_WORD = {"cpu": "Cpu", "mem": "Mem", "node": "Node", "energy": "Energy", "gres/gpu": "GRES", "billing": "Billing",
         "power": "Power"}


def reason(owner: str, kind: str, tres: str = "") -> str:
    """Slurm's pending reason for a job over a TRES limit: ``owner`` "Assoc" or "QOS"; ``kind`` one
    of grp, grp_mins, grp_run_mins, per_job, mins_per_job, per_node, per_user, per_account,
    min_per_job. (Slurm names the CPU, node and memory ones irregularly; this follows it.)"""
    word = _WORD[tres]
    long_word = "Memory" if tres == "mem" and owner == "QOS" else word
    limit = "Limit" if tres in ("cpu", "node") else ""
    if kind == "grp":
        return f"{owner}Grp{word}{'Limit' if tres in ('cpu', 'node', 'mem') else ''}"
    if kind == "grp_mins":
        return f"{owner}GrpCPUMinutesLimit" if tres == "cpu" else f"{owner}Grp{long_word}Minutes"
    if kind == "grp_run_mins":
        return f"{owner}GrpCPURunMinutesLimit" if tres == "cpu" else f"{owner}Grp{long_word}RunMinutes"
    if kind == "per_job":
        return f"{owner}Max{long_word}PerJob{limit}"
    if kind == "mins_per_job":
        return f"{owner}MaxCpuMinutesPerJobLimit" if tres == "cpu" else f"{owner}Max{long_word}MinutesPerJob"
    if kind == "per_node":
        return f"{owner}Max{long_word}PerNode"
    if kind == "per_user":
        return f"QOSMax{long_word}PerUser{limit}"
    if kind == "per_account":
        return f"Max{long_word}PerAccount"
    if kind == "min_per_job":
        return "QOSMinCpuNotSatisfied" if tres == "cpu" else f"QOSMin{long_word}"
    raise ValueError(kind)


R_INVALID_QOS = "InvalidQOS"
R_QOS_THRESHOLD = "QOSUsageThreshold"
JOB_REASONS = {  # (owner, limit) -> Slurm's reason
    ("QOS", "grp_jobs"): "QOSGrpJobsLimit", ("QOS", "max_jobs"): "QOSMaxJobsPerUserLimit",
    ("QOS", "max_jobs_per_account"): "MaxJobsPerAccount", ("QOS", "grp_wall"): "QOSGrpWallLimit",
    ("QOS", "max_wall"): "QOSMaxWallDurationPerJobLimit", ("Assoc", "grp_jobs"): "AssocGrpJobsLimit",
    ("Assoc", "max_jobs"): "AssocMaxJobsLimit", ("Assoc", "grp_wall"): "AssocGrpWallLimit",
    ("Assoc", "max_wall"): "AssocMaxWallDurationPerJobLimit",
}
SUBMIT_REFUSED = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
INVALID_QOS = "Invalid qos specification"


# --- recorded use -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UseRecord:
    """One job's use, as the limits count it: its TRES from ``start`` to ``end`` (None: running)
    and its energy (joules) so far."""

    user: str
    account: str
    qos: str
    tres: Tres
    start: float
    end: float | None
    energy_j: float = 0.0


def recorded_use(records: Iterable[UseRecord], assocs: Mapping[tuple[str, str], AssocLimits],
                 qos: Mapping[str, Qos], now: float, since: float, half_life_s: float) \
        -> tuple[dict[tuple[str, str], Use], dict[str, Use]]:
    """Decayed use since ``since`` per association (each with all below it) and per QOS, each job's
    use multiplied by its QOS's UsageFactor (NoDecay QOS: not decayed)."""
    snap = AccountsSnap(qos, assocs)
    by_assoc: dict[tuple[str, str], _Accrued] = {}
    by_qos: dict[str, _Accrued] = {}
    chains: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for rec in records:
        end = now if rec.end is None else min(rec.end, now)
        start = max(rec.start, since)
        if end <= start:
            continue
        found = qos.get(rec.qos)
        factor = found.usage_factor if found is not None else 1.0
        no_decay = found is not None and "NoDecay" in found.flags
        seconds = decayed_seconds(start, end, now, 0.0 if no_decay else half_life_s)
        full = (now if rec.end is None else rec.end) - rec.start
        minutes = seconds / 60.0 * factor
        energy = rec.energy_j * seconds / full * factor if full > 0 else 0.0
        keys = chains.get((rec.account, rec.user))
        if keys is None:
            keys = chains[(rec.account, rec.user)] = [a.key for a in snap.chain(rec.account, rec.user)]
        for key in keys:
            by_assoc.setdefault(key, _Accrued()).add(rec.tres, minutes, energy)
        by_qos.setdefault(rec.qos, _Accrued()).add(rec.tres, minutes, energy)
    return ({k: a.use() for k, a in by_assoc.items()}, {k: a.use() for k, a in by_qos.items()})


@dataclass(slots=True)
class _Accrued:
    """One association's or QOS's use, as :func:`recorded_use` adds it up."""

    tres_mins: dict[str, float] = field(default_factory=dict)
    wall_mins: float = 0.0

    def add(self, tres: Tres, minutes: float, energy: float) -> None:
        for name, count in tres.items():
            if name != "power":  # watts over time: that is energy, counted from the meters
                self.tres_mins[name] = self.tres_mins.get(name, 0.0) + count * minutes
        if energy:
            self.tres_mins["energy"] = self.tres_mins.get("energy", 0.0) + energy
        self.wall_mins += minutes

    def use(self) -> Use:
        return Use(MappingProxyType(self.tres_mins), self.wall_mins)


# --- the settings sacctmgr takes ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LimitKey:
    """A limit as sacctmgr sets and shows it: its names (the first is the one shown in errors),
    the Limits field it sets, its kind (tres, tres_mins, count, wall) and its column."""

    names: tuple[str, ...]
    field: str
    kind: str
    header: str
    width: int


def _key(names: str, field_name: str, kind: str, header: str, width: int) -> LimitKey:
    return LimitKey(tuple(names.lower().split("|")), field_name, kind, header, width)


_COMMON_KEYS = (
    _key("GrpTRES", "grp_tres", "tres", "GrpTRES", 13),
    _key("GrpTRESMins", "grp_tres_mins", "tres_mins", "GrpTRESMins", 13),
    _key("GrpTRESRunMins", "grp_tres_run_mins", "tres_mins", "GrpTRESRunMins", 13),
    _key("GrpJobs", "grp_jobs", "count", "GrpJobs", 7),
    _key("GrpSubmitJobs|GrpSubmit", "grp_submit", "count", "GrpSubmit", 9),
    _key("GrpWall", "grp_wall", "wall", "GrpWall", 11),
    _key("MaxTRESPerJob|MaxTRES|MaxTRESPJ", "max_tres_per_job", "tres", "MaxTRES", 13),
    _key("MaxTRESMinsPerJob|MaxTRESMins|MaxTRESMinsPJ", "max_tres_mins_per_job", "tres_mins", "MaxTRESMins", 13),
    _key("MaxWallDurationPerJob|MaxWall", "max_wall", "wall", "MaxWall", 11),
)
ASSOC_KEYS = (*_COMMON_KEYS,
              _key("MaxJobs", "max_jobs", "count", "MaxJobs", 7),
              _key("MaxSubmitJobs|MaxSubmit", "max_submit", "count", "MaxSubmit", 9))
QOS_KEYS = (*_COMMON_KEYS,
            _key("MaxTRESPerNode|MaxTRESPN", "max_tres_per_node", "tres", "MaxTRESPerNode", 14),
            _key("MaxTRESPerUser|MaxTRESPU", "max_tres_per_user", "tres", "MaxTRESPU", 13),
            _key("MaxTRESPerAccount|MaxTRESPerAcct|MaxTRESPA", "max_tres_per_account", "tres", "MaxTRESPA", 13),
            _key("MaxJobsPerUser|MaxJobsPU", "max_jobs", "count", "MaxJobsPU", 9),
            _key("MaxJobsPerAccount|MaxJobsPerAcct|MaxJobsPA", "max_jobs_per_account", "count", "MaxJobsPA", 9),
            _key("MaxSubmitJobsPerUser|MaxSubmitJobsPU|MaxSubmitPU", "max_submit", "count", "MaxSubmitPU", 11),
            _key("MaxSubmitJobsPerAccount|MaxSubmitJobsPerAcct|MaxSubmitJobsPA|MaxSubmitPA", "max_submit_per_account",
                 "count", "MaxSubmitPA", 11),
            _key("MinTRESPerJob|MinTRES", "min_tres_per_job", "tres", "MinTRES", 13))


def find_key(keys: Iterable[LimitKey], name: str) -> LimitKey | None:
    lowered = name.lower()
    return next((k for k in keys if lowered in k.names), None)


def parse_limit(key: LimitKey, text: str) -> Any:
    """A limit's value as sacctmgr gives it; -1 clears it (UNLIMITED)."""
    if key.kind in ("tres", "tres_mins"):
        return parse_tres(text, over_time=key.kind == "tres_mins")
    if key.kind == "wall":
        return parse_minutes(text)
    try:
        value = int(text)
    except ValueError as exc:
        raise LimitError(f"Invalid value for {key.header}: {text}") from exc
    if value < UNLIMITED:
        raise LimitError(f"Invalid value for {key.header}: {text}")
    return value


def show_limit(key: LimitKey, limits: Limits) -> str:
    """A limit as sacctmgr shows it ("" when not set)."""
    value = getattr(limits, key.field)
    if value is None or value == {}:
        return ""
    if key.kind in ("tres", "tres_mins"):
        return format_tres(value)
    if key.kind == "wall":
        return format_minutes(value)
    return str(value)

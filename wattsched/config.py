"""slurm.conf-style configuration: parsed once into typed, immutable objects.

A file is a sequence of lines of ``Key=Value`` pairs; ``#`` starts a comment, keys are
case-insensitive as in Slurm, ``Include FILE`` pulls in another file. ``NodeName=`` and
``PartitionName=`` lines describe nodes and partitions (``NodeName=DEFAULT`` and
``PartitionName=DEFAULT`` set defaults for the lines that follow). Every unknown key and
every bad value is a :class:`ConfigError` naming the file, the line and the key.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wattsched import cpufreq, gres, hostlist, switching, timefmt
from wattsched.gres import Device, Inventory


class ConfigError(ValueError):
    """A configuration error, located at file:line and key."""

    def __init__(self, path: str, line: int, key: str, message: str):
        super().__init__(f"{path}:{line}: {key}: {message}")
        self.path, self.line, self.key = path, line, key


@dataclass(frozen=True, slots=True)
class NodeConf:
    """One node as configured (NodeName lines are expanded into these)."""

    name: str
    cpus: int = 1
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    real_memory_mb: int = 1
    weight: int = 1
    features: tuple[str, ...] = ()
    state: str = "UNKNOWN"
    node_addr: str | None = None
    port: int | None = None
    idle_watts: int | None = None
    max_watts: int | None = None
    power_save_watts: int | None = None
    down_watts: int | None = None
    power_cap_priority: int | None = None
    cpu_freq_watts: tuple[tuple[int, int], ...] = ()  # (kHz, watts while busy), highest frequency first
    bmc_addr: str = ""  # the node's BMC, host[:port]; %n stands for the node name
    # switching times and watts (ours; defaults from Poquet 2017), used by emulated nodes and the simulator
    switch_on_s: float = switching.DEFAULT_ON_S
    switch_off_s: float = switching.DEFAULT_OFF_S
    switch_on_watts: float = switching.DEFAULT_ON_WATTS
    switch_off_watts: float = switching.DEFAULT_OFF_WATTS
    # GPUs: Gres= (by type, in order), gres.conf's device files (type, file) and our power model of them
    gres: Inventory = ()
    gpu_files: tuple[tuple[str, str], ...] = ()
    gpu_idle_watts: int = 30
    gpu_max_watts: int = 250

    @property
    def gpus(self) -> tuple[Device, ...]:
        return gres.devices(self.gres, self.gpu_files)

    @property
    def switching(self) -> switching.Switching:
        return switching.Switching(self.switch_on_s, self.switch_off_s, self.switch_on_watts, self.switch_off_watts)


@dataclass(frozen=True, slots=True)
class PartitionConf:
    """One partition as configured."""

    name: str
    nodes: tuple[str, ...] = ()
    node_expr: str = ""
    default: bool = False
    max_time_min: int | None = None
    default_time_min: int | None = None
    state: str = "UP"
    max_nodes: int | None = None
    priority_job_factor: int = 1


CANDIDATE_ORDERS = ("first", "shortest", "longest", "most_cpus", "fewest_cpus")


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    """SchedulerParameters, with Slurm's names and defaults, plus two keys of ours.

    ``bf_reservations``: how many pending jobs get a reservation (1 = EASY; 0 = unlimited,
    i.e. conservative backfilling). ``bf_candidate``: which backfill candidate starts first:
    ``first`` (priority order, first fit) or best fit by ``shortest``/``longest`` time limit or
    ``most_cpus``/``fewest_cpus`` (the BFF and BBF variants of Mämmelä et al. 2011). ``bf_power``: under a
    PowerCap, ``plan`` puts power in the backfill timeline; ``admit`` checks it only for jobs
    starting now (the plain admission of Hautreux 2013, for comparison).
    """

    bf_interval_s: int = 30
    bf_window_min: int = 1440
    bf_resolution_s: int = 60
    bf_max_job_test: int = 500
    bf_max_job_user: int = 0
    bf_continue: bool = False
    default_queue_depth: int = 100
    bf_reservations: int = 1
    bf_candidate: str = "first"
    bf_power: str = "plan"


_SCHED_INT_KEYS = {"bf_interval": "bf_interval_s", "bf_window": "bf_window_min", "bf_resolution": "bf_resolution_s",
                   "bf_max_job_test": "bf_max_job_test", "bf_max_job_user": "bf_max_job_user",
                   "default_queue_depth": "default_queue_depth"}


def parse_scheduler_params(text: str) -> SchedulerParams:
    """``bf_interval=30,bf_window=1440,bf_continue,bf_reservations=unlimited,bf_candidate=shortest``."""
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.lower()
        if key in _SCHED_INT_KEYS:
            values[_SCHED_INT_KEYS[key]] = _int(value)
        elif key == "bf_continue" and not sep:
            values["bf_continue"] = True
        elif key == "bf_reservations":
            values["bf_reservations"] = 0 if value.lower() in ("unlimited", "infinite") else _int(value)
            if values["bf_reservations"] == 0 and value.lower() not in ("unlimited", "infinite"):
                raise ValueError("bf_reservations must be at least 1, or unlimited")
        elif key == "bf_power":
            if value.lower() not in ("plan", "admit"):
                raise ValueError(f"bf_power '{value}' is not plan or admit")
            values["bf_power"] = value.lower()
        elif key == "bf_candidate":
            if value.lower() not in CANDIDATE_ORDERS:
                raise ValueError(f"bf_candidate '{value}' is not one of {', '.join(CANDIDATE_ORDERS)}")
            values["bf_candidate"] = value.lower()
        else:
            raise ValueError(f"unknown scheduler parameter '{item}'")
    if values.get("bf_resolution_s", 1) < 1 or values.get("bf_interval_s", 1) < 1:
        raise ValueError("bf_interval and bf_resolution must be at least 1 second")
    return SchedulerParams(**values)


@dataclass(frozen=True, slots=True)
class Config:
    """The effective configuration of a cluster."""

    source: str = "(defaults)"
    files: tuple[str, ...] = ()  # every file read: the source and what it includes
    cluster_name: str = "cluster"
    slurmctld_host: str = "localhost"
    slurmctld_addr: str = "127.0.0.1"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    state_save_location: str = "/var/spool/wattsched/ctld"
    slurmd_spool_dir: str = "/var/spool/wattsched/d"
    accounting_storage_type: str = "accounting_storage/sqlalchemy"
    accounting_storage_loc: str = ""
    scheduler_type: str = "sched/backfill"
    scheduler_parameters: SchedulerParams = SchedulerParams()
    priority_type: str = "priority/basic"
    select_type: str = "select/cons_tres"
    auth_key_file: str = ""
    auth_socket: str = ""  # AuthInfo=socket=PATH; default: auth/auth.sock beside StateSaveLocation
    admin_users: tuple[str, ...] = ("root",)
    kill_wait_s: int = 30
    min_job_age_s: int = 300
    slurmd_timeout_s: int = 300
    message_timeout_s: int = 10
    scheduler_interval_s: float = 1.0
    first_job_id: int = 1
    max_array_size: int = 1001
    max_job_count: int = 10000
    def_mem_per_cpu_mb: int = 0
    job_requeue: bool = True
    return_to_service: int = 1
    emulated_agents: int = 1
    # priority/multifactor
    priority_weight_age: int = 0
    priority_weight_job_size: int = 0
    priority_weight_partition: int = 0
    priority_weight_fairshare: int = 0
    priority_weight_qos: int = 0
    priority_weight_energy: int = 0
    priority_max_age_min: int = 7 * 1440
    priority_favor_small: bool = False
    priority_decay_half_life_min: int = 7 * 1440
    priority_calc_period_s: int = 300
    priority_usage_reset_period: str = "none"
    fairshare_dampening_factor: int = 1
    priority_flags: tuple[str, ...] = ()
    accounting_storage_enforce: tuple[str, ...] = ()
    power_cap: float | None = None  # watts; math.inf for INFINITE; None: capping off
    acct_gather_energy_type: str = "acct_gather_energy/none"
    acct_gather_node_freq_s: int = 30
    energy_sysfs_root: str = ""
    energy_emulated_lag_s: float = 0.0
    energy_emulated_noise: float = 0.0
    energy_ipmi_username: str = ""
    energy_ipmi_password: str = ""
    energy_ipmi_frequency_s: int = 0  # 0: AcctGatherNodeFreq
    energy_ipmi_calc_adjustment: bool = False
    energy_ipmi_power_sensors: tuple[str, ...] = ()
    energy_ipmi_timeout_s: int = 10
    emulated_nodes: bool = False
    emulated_bmc_port: int = 16230
    cpu_freq_def: str = ""
    cpu_freq_governors: tuple[str, ...] = cpufreq.DEFAULT_GOVERNORS
    cpu_freq_sysfs_root: str = ""
    acct_gather_profile_type: str = "acct_gather_profile/none"
    profile_hdf5_dir: str = ""
    profile_hdf5_default: tuple[str, ...] = ()
    job_acct_gather_frequency: tuple[tuple[str, int], ...] = ()
    # power saving (Slurm's names, plus PowerSaveType and PowerSaveParameters of ours)
    suspend_time_s: int | None = None  # None: NONE, no idle timeout
    suspend_timeout_s: int = 30
    resume_timeout_s: int = 60
    suspend_rate: int = 60
    resume_rate: int = 300
    suspend_program: str = ""
    resume_program: str = ""
    suspend_exc_nodes: tuple[str, ...] = ()
    suspend_exc_parts: tuple[str, ...] = ()
    power_save_type: tuple[str, ...] = ()
    power_save_parameters: tuple[tuple[str, float | str], ...] = ()
    log_level: str = "info"
    # prologs and epilogs (admins' programs; Slurm's keys)
    prolog: str = ""
    epilog: str = ""
    prolog_slurmctld: str = ""
    epilog_slurmctld: str = ""
    task_prolog: str = ""
    task_epilog: str = ""
    prolog_epilog_timeout_s: int = 0  # 0: no limit
    # process tracking and confinement (Slurm's keys); cgroup.conf beside the file sets the cgroup_*
    proctrack_type: str = "proctrack/pgid"
    task_plugin: tuple[str, ...] = ("task/none",)
    task_plugin_param: tuple[str, ...] = ()
    cgroup_plugin: str = "autodetect"
    cgroup_mountpoint: str = "/sys/fs/cgroup"
    constrain_cores: bool = False
    constrain_ram_space: bool = False
    allowed_ram_space: float = 100.0
    constrain_swap_space: bool = False
    allowed_swap_space: float = 0.0
    max_ram_percent: float = 100.0
    min_ram_space_mb: int = 30
    constrain_devices: bool = False
    # GPUs (Slurm's GresTypes; gres.conf beside the file names devices, AutoDetect=nvml reads them)
    gres_types: tuple[str, ...] = ()
    gres_autodetect: str = "off"
    # metrics (Slurm 25.11's keys): served when MetricsType=metrics/openmetrics
    metrics_type: str = "metrics/none"
    metrics_auth_users: tuple[str, ...] = ()
    metrics_parameters: tuple[str, ...] = ()
    nodes: tuple[NodeConf, ...] = ()
    partitions: tuple[PartitionConf, ...] = ()

    @property
    def accounting_url(self) -> str:
        """The SQLAlchemy URL of the accounting database (SQLite in the state dir by default)."""
        if self.accounting_storage_loc:
            return self.accounting_storage_loc
        return f"sqlite:///{os.path.join(self.state_save_location, 'accounting.db')}"

    @property
    def profile_dir(self) -> str:
        """ProfileHDF5Dir, by default ``profile`` beside the agents' spool folder."""
        return self.profile_hdf5_dir or os.path.join(os.path.dirname(self.slurmd_spool_dir.rstrip("/")), "profile")

    @property
    def suspend_excluded(self) -> frozenset[str]:
        """The nodes power saving never switches: SuspendExcNodes and the nodes of SuspendExcParts."""
        return frozenset(self.suspend_exc_nodes).union(
            *(p.nodes for p in self.partitions if p.name in self.suspend_exc_parts))

    @property
    def cgroups(self) -> bool:
        """Whether jobs live in control groups (proctrack/cgroup or task/cgroup)."""
        return self.proctrack_type == "proctrack/cgroup" or "task/cgroup" in self.task_plugin

    @property
    def gpus_hidden(self) -> bool:
        """Whether a job's device cgroup hides the node's other GPUs (task/cgroup, ConstrainDevices):
        its GPU runtime then numbers its own from 0."""
        return self.constrain_devices and "task/cgroup" in self.task_plugin

    @property
    def power_saving(self) -> bool:
        """Whether anything may switch nodes off: an idle timeout or a power-saving policy."""
        return self.suspend_time_s is not None or bool(self.power_save_type)

    @property
    def emulated_bmcs(self) -> bool:
        """Whether virtual nodes need their emulated BMCs: read by acct_gather_energy/ipmi, or
        switched by the default Suspend/ResumeProgram (``wattsched power``)."""
        default_programs = self.power_saving and not (self.suspend_program and self.resume_program)
        return self.emulated_nodes and (self.acct_gather_energy_type == "acct_gather_energy/ipmi"
                                        or default_programs)

    @property
    def auth_socket_path(self) -> str:
        """The token service's socket: outside StateSaveLocation, which no user may enter."""
        return self.auth_socket or os.path.join(os.path.dirname(self.state_save_location.rstrip("/")), "auth",
                                                "auth.sock")

    @property
    def key_file(self) -> str:
        return self.auth_key_file or os.path.join(self.state_save_location, "jwt_hs256.key")

    @property
    def controller_url(self) -> str:
        return f"http://{self.slurmctld_addr}:{self.slurmctld_port}"

    def default_partition(self) -> PartitionConf | None:
        for part in self.partitions:
            if part.default:
                return part
        return self.partitions[0] if self.partitions else None

    def as_pairs(self) -> list[tuple[str, str]]:
        """The global settings as (Slurm key, value) pairs, for ``scontrol show config``."""
        keys = {**_GLOBAL_KEYS, **_CGROUP_KEYS}
        return [(key, _show(getattr(self, attr))) for key, (attr, _p) in sorted(keys.items(), key=lambda kv: kv[0])]


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "INFINITE"
    if isinstance(value, SchedulerParams):
        return ",".join(f"{k}={getattr(value, k)}" for k in value.__slots__)
    if value is None:
        return "(null)"
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, tuple):
        return ",".join(f"{v[0]}={v[1]}" if isinstance(v, tuple) else v for v in value) or "(null)"
    return str(value) if value != "" else "(null)"


# --- value parsers ---------------------------------------------------------------------------

def _non_negative(value: str, cast: Callable[[str], Any], what: str) -> Any:
    try:
        number = cast(value)
    except ValueError as exc:
        raise ValueError(f"'{value}' is not {what}") from exc
    if number < 0:
        raise ValueError(f"'{value}' must not be negative")
    return number


def _int(value: str) -> int:
    return _non_negative(value, int, "an integer")


def _opt_int(value: str) -> int | None:
    return None if value.upper() in ("UNLIMITED", "INFINITE") else _int(value)


def _float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise ValueError(f"'{value}' is not a number") from exc
    if number <= 0:
        raise ValueError(f"'{value}' must be positive")
    return number


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("yes", "true", "1", "on"):
        return True
    if lowered in ("no", "false", "0", "off"):
        return False
    raise ValueError(f"'{value}' is not YES or NO")


def _duration(value: str) -> int | None:
    try:
        return timefmt.parse_duration_min(value)
    except timefmt.TimeFormatError as exc:
        raise ValueError(str(exc)) from exc


def _mem(value: str) -> int:
    try:
        return timefmt.parse_mem_mb(value)
    except timefmt.TimeFormatError as exc:
        raise ValueError(str(exc)) from exc


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in allowed:
            raise ValueError(f"'{value}' is not one of {', '.join(allowed)}")
        return value.lower()
    return parse


def _plugin(kind: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not value.startswith(kind + "/") or len(value) <= len(kind) + 1:
            raise ValueError(f"'{value}' is not a {kind}/<name> plugin")
        return value
    return parse


def _str(value: str) -> str:
    return value


def _names(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def _minutes(value: str) -> int:
    """A Slurm duration that must be finite (PriorityMaxAge=7-0, PriorityCalcPeriod=5)."""
    minutes = _duration(value)
    if minutes is None:
        raise ValueError(f"'{value}' must be a finite duration")
    return minutes


def _period_s(value: str) -> int:
    """Minutes (``5``), or ``MM:SS`` / ``HH:MM:SS`` for shorter periods, in seconds (at least 1)."""
    parts = value.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError as exc:
        raise ValueError(f"'{value}' is not a period (minutes, MM:SS or HH:MM:SS)") from exc
    if len(parts) > 3 or any(n < 0 for n in numbers):
        raise ValueError(f"'{value}' is not a period (minutes, MM:SS or HH:MM:SS)")
    seconds = numbers[0] * 60 if len(numbers) == 1 else sum(n * 60 ** i for i, n in enumerate(reversed(numbers)))
    if seconds < 1:
        raise ValueError(f"'{value}' must be at least one second")
    return seconds


def parse_freq_watts(value: str) -> tuple[tuple[int, int], ...]:
    """CpuFreqWatts (ours): ``1200000:600,1800000:780,2400000:950``, kHz:watts of a busy node."""
    pairs = []
    for item in filter(None, value.split(",")):
        khz, sep, watts = item.partition(":")
        if not sep:
            raise ValueError(f"'{item}' is not FREQUENCY_KHZ:WATTS")
        pairs.append((_int(khz), _int(watts)))
    if len({k for k, _w in pairs}) != len(pairs):
        raise ValueError("a frequency is listed twice")
    return tuple(sorted(pairs, reverse=True))


def parse_power_cap(value: str) -> float:
    """PowerCap: watts, or INFINITE (capping on, without a limit)."""
    if value.upper() in ("INFINITE", "UNLIMITED"):
        return math.inf
    watts = _int(value)
    return float(watts)


def _non_negative_float(value: str) -> float:
    return _non_negative(value, float, "a number")


def _percent(value: str) -> float:
    """A percentage, with or without '%' (AllowedRAMSpace=95, MaxRAMPercent=98.5%)."""
    number = _non_negative(value.rstrip("%"), float, "a percentage")
    if number > 100 * 1000:
        raise ValueError(f"'{value}' is not a sensible percentage")
    return number


def _positive(value: str) -> int:
    number = _int(value)
    if number < 1:
        raise ValueError(f"'{value}' must be at least 1")
    return number


def _bounded(low: int, high: int) -> Callable[[str], int]:
    """An integer within Slurm's range for the key."""

    def parse(value: str) -> int:
        number = _int(value)
        if not low <= number <= high:
            raise ValueError(f"'{value}' must be from {low} to {high}")
        return number

    return parse


def _suspend_time(value: str) -> int | None:
    """SuspendTime: seconds, or NONE / INFINITE / -1 for no idle timeout."""
    if value.upper() in ("NONE", "INFINITE", "-1"):
        return None
    return _int(value)


def _hostlist(value: str) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(value))
    except hostlist.HostlistError as exc:
        raise ValueError(str(exc)) from exc


def _power_save_types(value: str) -> tuple[str, ...]:
    names = _names(value)
    for name in names:
        _plugin("power_save")(name)
    return names


POWER_SAVE_PARAMS = {"threshold": float, "period": float, "mu_threshold": float, "inertia": str}


def parse_power_save_params(value: str) -> tuple[tuple[str, float | str], ...]:
    """PowerSaveParameters (ours): ``threshold=50,period=300,mu_threshold=500,inertia=double``."""
    pairs = []
    for item in _names(value):
        key, sep, raw = item.partition("=")
        if key not in POWER_SAVE_PARAMS or not sep:
            raise ValueError(f"'{item}' is not one of {', '.join(k + '=' for k in POWER_SAVE_PARAMS)}")
        pairs.append((key, raw if POWER_SAVE_PARAMS[key] is str else _non_negative_float(raw)))
    return tuple(pairs)


def _flag_list(*allowed: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated subset of ``allowed`` (case as in ``allowed``)."""
    lookup = {a.lower(): a for a in allowed}

    def parse(value: str) -> tuple[str, ...]:
        flags = []
        for item in filter(None, (v.strip() for v in value.split(","))):
            if item.lower() not in lookup:
                raise ValueError(f"'{item}' is not one of {', '.join(allowed)}")
            flags.append(lookup[item.lower()])
        return tuple(flags)
    return parse


def _cpu_freq_spec(value: str) -> str:
    cpufreq.parse(value)
    return value


def _governors(value: str) -> tuple[str, ...]:
    return tuple(g.lower() for g in _flag_list(*cpufreq.GOVERNORS)(value))


def parse_acctg_freq(value: str) -> tuple[tuple[str, int], ...]:
    """``task=30,energy=10`` (JobAcctGatherFrequency, --acctg-freq): seconds per data type; a bare
    number is the task interval, as in Slurm."""
    pairs = []
    for item in filter(None, value.split(",")):
        kind, sep, seconds = item.partition("=")
        if not sep:
            kind, seconds = "task", kind
        if kind.lower() not in ("task", "energy", "network", "filesystem"):
            raise ValueError(f"'{item}' is not task=N, energy=N, network=N or filesystem=N")
        pairs.append((kind.lower(), _int(seconds)))
    return tuple(pairs)


def _auth_socket(value: str) -> str:
    """AuthInfo: ``socket=PATH`` of the local token service (munge's key in Slurm)."""
    key, _, path = value.partition("=")
    if key.strip().lower() != "socket" or not path.strip() or "," in path:
        raise ValueError("expected socket=/path/to/auth.sock")
    return path.strip()


def _jwt_key(value: str) -> str:
    for item in value.split(","):
        key, _, path = item.partition("=")
        if key == "jwt_key" and path:
            return path
    raise ValueError("expected jwt_key=/path/to/key")


_GLOBAL_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "ClusterName": ("cluster_name", _str),
    "SlurmctldHost": ("slurmctld_host", _str),
    "SlurmctldPort": ("slurmctld_port", _int),
    "SlurmdPort": ("slurmd_port", _int),
    "StateSaveLocation": ("state_save_location", _str),
    "SlurmdSpoolDir": ("slurmd_spool_dir", _str),
    "AccountingStorageType": ("accounting_storage_type", _choice("accounting_storage/sqlalchemy",
                                                                  "accounting_storage/none")),
    "AccountingStorageLoc": ("accounting_storage_loc", _str),
    "SchedulerType": ("scheduler_type", _plugin("sched")),
    "SchedulerParameters": ("scheduler_parameters", parse_scheduler_params),
    "PriorityType": ("priority_type", _plugin("priority")),
    "SelectType": ("select_type", _plugin("select")),
    "AuthAltParameters": ("auth_key_file", _jwt_key),
    "AuthInfo": ("auth_socket", _auth_socket),
    "AdminUsers": ("admin_users", _names),
    "KillWait": ("kill_wait_s", _int),
    "MinJobAge": ("min_job_age_s", _int),
    "SlurmdTimeout": ("slurmd_timeout_s", _int),
    "MessageTimeout": ("message_timeout_s", _int),
    "SchedulerInterval": ("scheduler_interval_s", _float),
    "FirstJobId": ("first_job_id", _int),
    "MaxArraySize": ("max_array_size", _bounded(1, 4_000_001)),
    "MaxJobCount": ("max_job_count", _bounded(1, 4_000_000)),
    "DefMemPerCPU": ("def_mem_per_cpu_mb", _mem),
    "JobRequeue": ("job_requeue", _bool),
    "ReturnToService": ("return_to_service", _int),
    "EmulatedAgents": ("emulated_agents", _int),
    "PriorityWeightAge": ("priority_weight_age", _int),
    "PriorityWeightJobSize": ("priority_weight_job_size", _int),
    "PriorityWeightPartition": ("priority_weight_partition", _int),
    "PriorityWeightFairshare": ("priority_weight_fairshare", _int),
    "PriorityWeightQOS": ("priority_weight_qos", _int),
    "PriorityWeightEnergy": ("priority_weight_energy", _int),
    "PriorityMaxAge": ("priority_max_age_min", _minutes),
    "PriorityFavorSmall": ("priority_favor_small", _bool),
    "PriorityDecayHalfLife": ("priority_decay_half_life_min", _minutes),
    "PriorityCalcPeriod": ("priority_calc_period_s", _period_s),
    "PriorityUsageResetPeriod": ("priority_usage_reset_period", _choice(
        "none", "now", "daily", "weekly", "monthly", "quarterly", "yearly")),
    "FairShareDampeningFactor": ("fairshare_dampening_factor", _positive),
    "PriorityFlags": ("priority_flags", _flag_list("FAIR_TREE", "NO_FAIR_TREE")),
    "AccountingStorageEnforce": ("accounting_storage_enforce", _flag_list(
        "associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps")),
    "PowerCap": ("power_cap", parse_power_cap),
    "AcctGatherEnergyType": ("acct_gather_energy_type", _plugin("acct_gather_energy")),
    "AcctGatherNodeFreq": ("acct_gather_node_freq_s", _positive),
    "EnergySysfsRoot": ("energy_sysfs_root", _str),
    "EnergyEmulatedLag": ("energy_emulated_lag_s", _non_negative_float),
    "EnergyEmulatedNoise": ("energy_emulated_noise", _non_negative_float),
    "EnergyIPMIUsername": ("energy_ipmi_username", _str),
    "EnergyIPMIPassword": ("energy_ipmi_password", _str),
    "EnergyIPMIFrequency": ("energy_ipmi_frequency_s", _int),
    "EnergyIPMICalcAdjustment": ("energy_ipmi_calc_adjustment", _bool),
    "EnergyIPMIPowerSensors": ("energy_ipmi_power_sensors", _names),
    "EnergyIPMITimeout": ("energy_ipmi_timeout_s", _positive),
    "EmulatedNodes": ("emulated_nodes", _bool),
    "EmulatedBMCPort": ("emulated_bmc_port", _positive),
    "CpuFreqDef": ("cpu_freq_def", _cpu_freq_spec),
    "CpuFreqGovernors": ("cpu_freq_governors", _governors),
    "CpuFreqSysfsRoot": ("cpu_freq_sysfs_root", _str),
    "AcctGatherProfileType": ("acct_gather_profile_type", _choice("acct_gather_profile/none",
                                                                  "acct_gather_profile/hdf5")),
    "ProfileHDF5Dir": ("profile_hdf5_dir", _str),
    "ProfileHDF5Default": ("profile_hdf5_default", _flag_list("None", "All", "Energy", "Task")),
    "JobAcctGatherFrequency": ("job_acct_gather_frequency", parse_acctg_freq),
    "SuspendTime": ("suspend_time_s", _suspend_time),
    "SuspendTimeout": ("suspend_timeout_s", _positive),
    "ResumeTimeout": ("resume_timeout_s", _positive),
    "SuspendRate": ("suspend_rate", _int),
    "ResumeRate": ("resume_rate", _int),
    "SuspendProgram": ("suspend_program", _str),
    "ResumeProgram": ("resume_program", _str),
    "SuspendExcNodes": ("suspend_exc_nodes", _hostlist),
    "SuspendExcParts": ("suspend_exc_parts", _names),
    "PowerSaveType": ("power_save_type", _power_save_types),
    "PowerSaveParameters": ("power_save_parameters", parse_power_save_params),
    "Prolog": ("prolog", _str),
    "Epilog": ("epilog", _str),
    "PrologSlurmctld": ("prolog_slurmctld", _str),
    "EpilogSlurmctld": ("epilog_slurmctld", _str),
    "TaskProlog": ("task_prolog", _str),
    "TaskEpilog": ("task_epilog", _str),
    "PrologEpilogTimeout": ("prolog_epilog_timeout_s", _int),
    "ProctrackType": ("proctrack_type", _choice("proctrack/pgid", "proctrack/cgroup", "proctrack/linuxproc")),
    "TaskPlugin": ("task_plugin", _flag_list("task/none", "task/cgroup", "task/affinity")),
    "TaskPluginParam": ("task_plugin_param", _flag_list("None", "Cores", "Sockets", "Threads", "Verbose",
                                                        "Autobind=Cores", "Autobind=Sockets", "Autobind=Threads")),
    "MetricsType": ("metrics_type", _choice("metrics/openmetrics", "metrics/none")),
    "MetricsAuthUsers": ("metrics_auth_users", _names),
    "MetricsParameters": ("metrics_parameters", _flag_list("ignore_private_data")),
    "GresTypes": ("gres_types", _flag_list("gpu")),
    "SlurmctldDebug": ("log_level", _choice("quiet", "fatal", "error", "info", "verbose", "debug",
                                            "debug2", "debug3")),
}
# Keys whose value is a path resolved against the config file's folder when relative.
_PATH_ATTRS = {"state_save_location", "slurmd_spool_dir", "auth_key_file", "auth_socket", "energy_sysfs_root",
               "cpu_freq_sysfs_root", "profile_hdf5_dir", "prolog", "epilog", "prolog_slurmctld",
               "epilog_slurmctld", "task_prolog", "task_epilog"}

_NODE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "CPUs": ("cpus", _int),
    "Sockets": ("sockets", _int),
    "CoresPerSocket": ("cores_per_socket", _int),
    "ThreadsPerCore": ("threads_per_core", _int),
    "RealMemory": ("real_memory_mb", _int),
    "Weight": ("weight", _int),
    "Feature": ("features", _names),
    "Features": ("features", _names),
    "State": ("state", _choice("unknown", "idle", "down", "drain", "future", "cloud")),
    "NodeAddr": ("node_addr", _str),
    "Port": ("port", _int),
    "IdleWatts": ("idle_watts", _int),
    "MaxWatts": ("max_watts", _int),
    "PowerSaveWatts": ("power_save_watts", _int),
    "DownWatts": ("down_watts", _int),
    "PowerCapPriority": ("power_cap_priority", _int),
    "CpuFreqWatts": ("cpu_freq_watts", parse_freq_watts),
    "BmcAddr": ("bmc_addr", _str),
    "SwitchOnTime": ("switch_on_s", _non_negative_float),
    "SwitchOffTime": ("switch_off_s", _non_negative_float),
    "SwitchOnWatts": ("switch_on_watts", _non_negative_float),
    "SwitchOffWatts": ("switch_off_watts", _non_negative_float),
    "Gres": ("gres", gres.parse_node),
    "GpuIdleWatts": ("gpu_idle_watts", _int),
    "GpuMaxWatts": ("gpu_max_watts", _int),
}

_PARTITION_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "Nodes": ("node_expr", _str),
    "Default": ("default", _bool),
    "MaxTime": ("max_time_min", _duration),
    "DefaultTime": ("default_time_min", _duration),
    "State": ("state", _choice("up", "down", "drain", "inactive")),
    "MaxNodes": ("max_nodes", _opt_int),
    "PriorityJobFactor": ("priority_job_factor", _int),
}

# cgroup.conf, read from beside the main file as Slurm does
_CGROUP_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "CgroupPlugin": ("cgroup_plugin", _choice("autodetect", "cgroup/v1", "cgroup/v2")),
    "CgroupMountpoint": ("cgroup_mountpoint", _str),
    "ConstrainCores": ("constrain_cores", _bool),
    "ConstrainRAMSpace": ("constrain_ram_space", _bool),
    "AllowedRAMSpace": ("allowed_ram_space", _percent),
    "ConstrainSwapSpace": ("constrain_swap_space", _bool),
    "AllowedSwapSpace": ("allowed_swap_space", _percent),
    "MaxRAMPercent": ("max_ram_percent", _percent),
    "MinRAMSpace": ("min_ram_space_mb", _int),
    "ConstrainDevices": ("constrain_devices", _bool),
}

_LOWER_GLOBAL = {k.lower(): k for k in _GLOBAL_KEYS}
_LOWER_CGROUP = {k.lower(): k for k in _CGROUP_KEYS}
_LOWER_NODE = {k.lower(): k for k in _NODE_KEYS}
_LOWER_PART = {k.lower(): k for k in _PARTITION_KEYS}


def _pairs(text: str, path: str, lineno: int) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(text, comments=False, posix=True)
    except ValueError as exc:
        raise ConfigError(path, lineno, text.split("=")[0], f"cannot parse line: {exc}") from exc
    pairs = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            raise ConfigError(path, lineno, key, "expected Key=Value")
        pairs.append((key, value))
    return pairs


def _set(target: dict, table: dict, lower: dict, key: str, value: str, path: str, lineno: int,
         what: str) -> None:
    canonical = lower.get(key.lower())
    if canonical is None:
        raise ConfigError(path, lineno, key, f"unknown {what} key")
    attr, parser = table[canonical]
    try:
        target[attr] = parser(value)
    except ValueError as exc:
        raise ConfigError(path, lineno, canonical, str(exc)) from exc


def load(path: str | os.PathLike[str], globals_only: bool = False, switches_nodes: bool = False) -> Config:
    """Read and validate a configuration file (and the files it includes).

    ``switches_nodes``: the reader will switch nodes (the controller, not the simulator), so power
    saving must have a way to do it.

    ``globals_only`` skips node and partition lines: the CLI needs only the controller's
    address and the key, and a 5,000-node file would otherwise cost it start-up time.
    """
    path = os.path.abspath(os.fspath(path))
    globals_: dict[str, Any] = {}
    nodes: dict[str, NodeConf] = {}
    node_lines: dict[str, int] = {}
    partitions: list[tuple[dict[str, Any], str, int]] = []
    node_default: dict[str, Any] = {}
    part_default: dict[str, Any] = {}
    files: list[str] = []
    _read(path, globals_, nodes, node_lines, partitions, node_default, part_default, depth=0,
          globals_only=globals_only, files=files)

    base = os.path.dirname(path)
    if not globals_only:
        _read_cgroup_conf(os.path.join(base, "cgroup.conf"), globals_, files)
        _read_gres_conf(os.path.join(base, "gres.conf"), globals_, nodes, files)
        with_gpus = [name for name, node in nodes.items() if node.gres]
        if with_gpus and "gpu" not in globals_.get("gres_types", ()):
            raise ConfigError(path, node_lines[with_gpus[0]], "Gres",
                              f"node {with_gpus[0]} has GPUs but GresTypes does not name gpu")
    for attr in _PATH_ATTRS:
        if attr in globals_ and not os.path.isabs(globals_[attr]):
            globals_[attr] = os.path.normpath(os.path.join(base, globals_[attr]))
    host = globals_.get("slurmctld_host", "localhost")
    if "(" in host and host.endswith(")"):
        globals_["slurmctld_host"], globals_["slurmctld_addr"] = host[:-1].split("(", 1)
    elif host not in ("localhost",):
        globals_["slurmctld_addr"] = host

    part_objs: list[PartitionConf] = []
    seen_parts: set[str] = set()
    for values, ppath, lineno in partitions:
        name = values.pop("name")
        if name in seen_parts:
            raise ConfigError(ppath, lineno, "PartitionName", f"duplicate partition '{name}'")
        seen_parts.add(name)
        expr = values.get("node_expr", "")
        if expr.upper() == "ALL":
            members = tuple(nodes)
        else:
            try:
                members = tuple(hostlist.expand(expr))
            except hostlist.HostlistError as exc:
                raise ConfigError(ppath, lineno, "Nodes", str(exc)) from exc
            unknown = [n for n in members if n not in nodes]
            if unknown:
                raise ConfigError(ppath, lineno, "Nodes",
                                  f"node {unknown[0]} is not defined by a NodeName line")
        values["state"] = values.get("state", "up").upper()
        part_objs.append(PartitionConf(name=name, nodes=members, **values))
    where: dict[str, tuple[str, int]] = globals_.pop("_where", {})
    for key, attr, known in (("SuspendExcNodes", "suspend_exc_nodes", nodes),
                             ("SuspendExcParts", "suspend_exc_parts", seen_parts)):
        unknown = [n for n in globals_.get(attr, ()) if n not in known]
        if unknown and not globals_only:
            raise ConfigError(*where[key], key, f"'{unknown[0]}' is not a configured "
                              f"{'node' if known is nodes else 'partition'}")
    defaults = [p for p in part_objs if p.default]
    if len(defaults) > 1:
        values, ppath, lineno = partitions[part_objs.index(defaults[1])]
        raise ConfigError(ppath, lineno, "Default", "more than one partition has Default=YES")
    config = Config(source=path, files=tuple(files), nodes=tuple(nodes.values()), partitions=tuple(part_objs),
                    **globals_)
    if switches_nodes:
        _check_power_programs(config, where)
    if config.constrain_cores and config.emulated_nodes and not globals_only:
        raise ConfigError(*where.get("EmulatedNodes", (path, 0)), "EmulatedNodes",
                          "ConstrainCores (cgroup.conf) needs real nodes: virtual nodes' CPUs are not the host's")
    return config


def _read_cgroup_conf(path: str, globals_: dict, files: list[str]) -> None:
    """cgroup.conf: ``Key=Value`` lines, beside the main file (absent: Slurm's defaults)."""
    if not os.path.exists(path):
        return
    for lineno, line in _lines(path, files):
        for key, value in _pairs(line, path, lineno):
            _set(globals_, _CGROUP_KEYS, _LOWER_CGROUP, key, value, path, lineno, "cgroup.conf")


_GRES_CONF_KEYS = {"nodename", "name", "type", "file", "count", "cores", "autodetect", "links", "flags"}


def _read_gres_conf(path: str, globals_: dict, nodes: dict[str, NodeConf], files: list[str]) -> None:
    """gres.conf beside the main file: ``[NodeName=...] Name=gpu [Type=...] File=/dev/nvidia[0-3]``
    lines give the GPUs of Gres= their device files (type by type, in order); ``AutoDetect=nvml``
    has the agent read them from NVML instead. Counts must agree with each node's Gres=."""
    if not os.path.exists(path):
        return
    found: dict[str, list[tuple[str, str]]] = {}
    last_line: dict[tuple[str, str], int] = {}  # (node, type) -> the last line that named its files
    for lineno, line in _lines(path, files):
        values = {}
        for key, value in _pairs(line, path, lineno):
            if key.lower() not in _GRES_CONF_KEYS:
                raise ConfigError(path, lineno, key, "unknown gres.conf key")
            values[key.lower()] = value
        if "autodetect" in values:
            mode = values["autodetect"].lower()
            if mode not in ("nvml", "off"):
                raise ConfigError(path, lineno, "AutoDetect", "expected nvml or off")
            if "name" not in values:
                globals_["gres_autodetect"] = mode
                continue
        if values.get("name", "").lower() != "gpu":
            raise ConfigError(path, lineno, "Name", "only Name=gpu is supported")
        try:
            targets = hostlist.expand(values["nodename"]) if "nodename" in values else \
                [n for n, node in nodes.items() if node.gres]
            paths = hostlist.expand(values["file"]) if "file" in values else []
        except hostlist.HostlistError as exc:
            raise ConfigError(path, lineno, "NodeName" if "nodename" in values else "File", str(exc)) from exc
        kind = values.get("type", "")
        if "count" in values and paths and int(values["count"] or 0) != len(paths):
            raise ConfigError(path, lineno, "Count", f"{values['count']} GPUs but {len(paths)} files")
        for name in targets:
            if name not in nodes:
                raise ConfigError(path, lineno, "NodeName", f"node {name} is not defined by a NodeName line")
            if not any(k == kind for k, _c in nodes[name].gres):
                raise ConfigError(path, lineno, "Type", f"node {name} has no Gres=gpu{':' + kind if kind else ''}")
            found.setdefault(name, []).extend((kind, p) for p in paths)
            last_line[(name, kind)] = lineno
    for name, listed in found.items():
        for kind, count in nodes[name].gres:
            given = sum(1 for k, _p in listed if k == kind)
            if given and given != count:
                raise ConfigError(path, last_line[(name, kind)], "File", f"node {name}: {given} files for "
                                  f"{count} GPUs of type '{kind or '(none)'}'")
        nodes[name] = replace(nodes[name], gpu_files=tuple(listed))


def _lines(path: str, files: list[str]) -> list[tuple[int, str]]:
    """A configuration file's lines with their numbers, comments and blank lines left out."""
    files.append(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(path, 0, "(file)", f"cannot read configuration: {exc.strerror}") from exc
    return [(lineno, line) for lineno, raw in enumerate(text.splitlines(), start=1)
            if (line := raw.split("#", 1)[0].strip())]


def _check_power_programs(config: Config, where: dict[str, tuple[str, int]]) -> None:
    """Real nodes switched by power saving need a way to be switched: Suspend/ResumeProgram, or
    (the default programs, IPMI chassis control) a BmcAddr each. Virtual nodes have their
    emulated BMCs. Found at start-up rather than as a node that never comes back."""
    if not config.power_saving or config.emulated_nodes or (config.suspend_program and config.resume_program):
        return
    excluded = config.suspend_excluded
    missing = [n.name for n in config.nodes if not n.bmc_addr and n.name not in excluded]
    if missing:
        key = "SuspendTime" if "SuspendTime" in where else "PowerSaveType"
        raise ConfigError(*where.get(key, (config.source, 0)), key,
                          "power saving needs SuspendProgram and ResumeProgram, or a BmcAddr for every node it "
                          f"may switch (the default programs use IPMI); none for {hostlist.compress(missing)}")


def _read(path: str, globals_: dict, nodes: dict, node_lines: dict, partitions: list,
          node_default: dict, part_default: dict, depth: int, globals_only: bool, files: list[str]) -> None:
    if depth > 8:
        raise ConfigError(path, 0, "Include", "includes nested too deeply")
    for lineno, line in _lines(path, files):
        if line.lower().startswith("include "):
            target = line.split(None, 1)[1].strip()
            target = target if os.path.isabs(target) else os.path.join(os.path.dirname(path), target)
            _read(target, globals_, nodes, node_lines, partitions, node_default, part_default, depth + 1,
                  globals_only, files)
            continue
        if globals_only and line[:9].lower() in ("nodename=", "partition"):
            continue
        pairs = _pairs(line, path, lineno)
        head_key, head_value = pairs[0]
        if head_key.lower() == "nodename":
            values: dict[str, Any] = dict(node_default)
            for key, value in pairs[1:]:
                _set(values, _NODE_KEYS, _LOWER_NODE, key, value, path, lineno, "NodeName")
            if head_value.upper() == "DEFAULT":
                node_default.clear()
                node_default.update(values)
                continue
            _add_nodes(head_value, values, nodes, node_lines, path, lineno, pairs)
        elif head_key.lower() == "partitionname":
            values = dict(part_default)
            for key, value in pairs[1:]:
                _set(values, _PARTITION_KEYS, _LOWER_PART, key, value, path, lineno, "PartitionName")
            if head_value.upper() == "DEFAULT":
                part_default.clear()
                part_default.update(values)
                continue
            values["name"] = head_value
            partitions.append((values, path, lineno))
        else:
            for key, value in pairs:
                _set(globals_, _GLOBAL_KEYS, _LOWER_GLOBAL, key, value, path, lineno, "configuration")
                globals_.setdefault("_where", {})[_LOWER_GLOBAL.get(key.lower(), key)] = (path, lineno)


def _add_nodes(expr: str, values: dict, nodes: dict, node_lines: dict, path: str, lineno: int,
               pairs: list[tuple[str, str]]) -> None:
    try:
        names = hostlist.expand(expr)
    except hostlist.HostlistError as exc:
        raise ConfigError(path, lineno, "NodeName", str(exc)) from exc
    given = {key.lower() for key, _ in pairs}
    if "cpus" not in given:
        values["cpus"] = values.get("sockets", 1) * values.get("cores_per_socket", 1) * \
            values.get("threads_per_core", 1)
    values["state"] = values.get("state", "unknown").upper()
    if values["cpus"] < 1:
        raise ConfigError(path, lineno, "CPUs", "a node needs at least one CPU")
    for name in names:
        if name in nodes:
            raise ConfigError(path, lineno, "NodeName", f"node {name} defined twice "
                              f"(first at line {node_lines[name]})")
        nodes[name] = NodeConf(name=name, **values)
        node_lines[name] = lineno


def with_overrides(config: Config, **changes: Any) -> Config:
    """A copy of ``config`` with some settings replaced (used by tests and emulation)."""
    return replace(config, **changes)


__all__ = ["Config", "ConfigError", "NodeConf", "PartitionConf", "SchedulerParams", "load", "parse_scheduler_params",
           "with_overrides"]

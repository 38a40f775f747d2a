"""The value parsers of the configuration's keys (slurm.conf, cgroup.conf, NodeName and
PartitionName lines) and SchedulerParameters: each takes the text after ``Key=`` and returns the
typed value or raises ValueError saying what was expected (the loader adds file, line and key).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wattsched import cpufreq, energypolicy, hostlist, licenses, timefmt

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
    # Slurm's sched_interval: seconds between the periodic passes that test every pending job
    # (math.inf: -1, none; passes still follow submissions and job ends); None: SchedulerInterval's
    sched_interval_s: float | None = None


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
            values[_SCHED_INT_KEYS[key]] = integer(value)
        elif key == "sched_interval":
            values["sched_interval_s"] = math.inf if value.strip() == "-1" else integer(value)
        elif key == "bf_continue" and not sep:
            values["bf_continue"] = True
        elif key == "bf_reservations":
            values["bf_reservations"] = 0 if value.lower() in ("unlimited", "infinite") else integer(value)
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


def _non_negative(value: str, cast: Callable[[str], Any], what: str) -> Any:
    try:
        number = cast(value)
    except ValueError as exc:
        raise ValueError(f"'{value}' is not {what}") from exc
    if number < 0:
        raise ValueError(f"'{value}' must not be negative")
    return number


def integer(value: str) -> int:
    return _non_negative(value, int, "an integer")


def opt_integer(value: str) -> int | None:
    return None if value.upper() in ("UNLIMITED", "INFINITE") else integer(value)


def positive_number(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise ValueError(f"'{value}' is not a number") from exc
    if number <= 0:
        raise ValueError(f"'{value}' must be positive")
    return number


def yes_no(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("yes", "true", "1", "on"):
        return True
    if lowered in ("no", "false", "0", "off"):
        return False
    raise ValueError(f"'{value}' is not YES or NO")


def duration(value: str) -> int | None:
    try:
        return timefmt.parse_duration_min(value)
    except timefmt.TimeFormatError as exc:
        raise ValueError(str(exc)) from exc


def memory(value: str) -> int:
    try:
        return timefmt.parse_mem_mb(value)
    except timefmt.TimeFormatError as exc:
        raise ValueError(str(exc)) from exc


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in allowed:
            raise ValueError(f"'{value}' is not one of {', '.join(allowed)}")
        return value.lower()
    return parse


def plugin(kind: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not value.startswith(kind + "/") or len(value) <= len(kind) + 1:
            raise ValueError(f"'{value}' is not a {kind}/<name> plugin")
        return value
    return parse


def plugin_list(kind: str, *allowed: str) -> Callable[[str], tuple[str, ...]]:
    """Slurm's comma-separated plugin names, with or without their ``kind/`` (JobSubmitPlugins=lua,
    TaskPlugin=affinity), whole; of ``allowed`` alone where given."""
    whole = [f"{kind}/{name}" for name in allowed]

    def parse(value: str) -> tuple[str, ...]:
        found = []
        for name in filter(None, (v.strip() for v in value.split(","))):
            full = plugin(kind)(name if name.startswith(kind + "/") else f"{kind}/{name}")
            if whole and full.lower() not in whole:
                raise ValueError(f"'{name}' is not one of {', '.join(whole)}")
            found.append(full.lower() if whole else full)
        return tuple(found)
    return parse


def text(value: str) -> str:
    return value


def names(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def minutes(value: str) -> int:
    """A Slurm duration that must be finite (PriorityMaxAge=7-0, PriorityCalcPeriod=5)."""
    minutes = duration(value)
    if minutes is None:
        raise ValueError(f"'{value}' must be a finite duration")
    return minutes


def period_s(value: str) -> int:
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
        pairs.append((integer(khz), integer(watts)))
    if len({k for k, _w in pairs}) != len(pairs):
        raise ValueError("a frequency is listed twice")
    return tuple(sorted(pairs, reverse=True))


def over_time_limit(value: str) -> float:
    """OverTimeLimit: the minutes a job may run past its time limit before it is cancelled (Slurm's
    range, up to 65,533), or UNLIMITED (math.inf: never)."""
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return math.inf
    return bounded(0, 65533)(value)


def parse_power_cap(value: str) -> float:
    """PowerCap: watts, or INFINITE (capping on, without a limit)."""
    if value.upper() in ("INFINITE", "UNLIMITED"):
        return math.inf
    watts = integer(value)
    return float(watts)


def non_negative_number(value: str) -> float:
    return _non_negative(value, float, "a number")


def fraction(value: str) -> float:
    """A share from 0 to 1 (EnergyPolicyPenalty=0.1)."""
    number = _non_negative(value, float, "a number")
    if number > 1:
        raise ValueError(f"'{value}' must be from 0 to 1")
    return number


def energy_policy(value: str) -> str:
    try:
        return energypolicy.check(value)
    except energypolicy.PolicyError as exc:
        raise ValueError(str(exc)) from exc


def percent(value: str) -> float:
    """A percentage, with or without '%' (AllowedRAMSpace=95, MaxRAMPercent=98.5%)."""
    number = _non_negative(value.rstrip("%"), float, "a percentage")
    if number > 100 * 1000:
        raise ValueError(f"'{value}' is not a sensible percentage")
    return number


def positive(value: str) -> int:
    number = integer(value)
    if number < 1:
        raise ValueError(f"'{value}' must be at least 1")
    return number


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An integer within Slurm's range for the key."""

    def parse(value: str) -> int:
        number = integer(value)
        if not low <= number <= high:
            raise ValueError(f"'{value}' must be from {low} to {high}")
        return number

    return parse


def suspend_time(value: str) -> int | None:
    """SuspendTime: seconds, or NONE / INFINITE / -1 for no idle timeout."""
    if value.upper() in ("NONE", "INFINITE", "-1"):
        return None
    return integer(value)


def hosts(value: str) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(value))
    except hostlist.HostlistError as exc:
        raise ValueError(str(exc)) from exc


def power_save_types(value: str) -> tuple[str, ...]:
    listed = names(value)
    for name in listed:
        plugin("power_save")(name)
    return listed


POWER_SAVE_PARAMS = {"threshold": float, "period": float, "mu_threshold": float, "inertia": str}


def parse_power_save_params(value: str) -> tuple[tuple[str, float | str], ...]:
    """PowerSaveParameters (ours): ``threshold=50,period=300,mu_threshold=500,inertia=double``."""
    pairs = []
    for item in names(value):
        key, sep, raw = item.partition("=")
        if key not in POWER_SAVE_PARAMS or not sep:
            raise ValueError(f"'{item}' is not one of {', '.join(k + '=' for k in POWER_SAVE_PARAMS)}")
        pairs.append((key, raw if POWER_SAVE_PARAMS[key] is str else non_negative_number(raw)))
    return tuple(pairs)


def mpi_type(value: str) -> str:
    """MpiDefault: an MPI plugin's type (srun --mpi=list names them); ``openmpi`` is Slurm's old
    name of ``none``. Whether a plugin provides it is asked where a step uses it."""
    name = value.strip().lower()
    if not 0 < len(name) <= 32 or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
        raise ValueError(f"'{value}' is not an MPI type (see srun --mpi=list)")
    return "none" if name == "openmpi" else name


def mpi_params(value: str) -> tuple[int, int] | None:
    """MpiParams (Slurm's): ``ports=12000-12999``, the range Slurm's steps reserve ports in. Checked
    and kept; no step reserves ports here yet (srun --resv-ports is accepted and ignored)."""
    ports = None
    for item in names(value):
        key, _, raw = item.partition("=")
        first, dash, last = raw.partition("-")
        if key.lower() != "ports" or not dash or not first.isdigit() or not last.isdigit() \
                or not 0 < int(first) <= int(last) <= 65535:
            raise ValueError(f"'{item}' is not ports=FIRST-LAST")
        ports = (int(first), int(last))
    return ports


def flags(*allowed: str) -> Callable[[str], tuple[str, ...]]:
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


def over_subscribe(value: str) -> str:
    """A partition's OverSubscribe: NO (jobs share nodes, never CPUs) or EXCLUSIVE (whole nodes to
    each job). Slurm's YES[:N] and FORCE[:N] put several jobs on the same CPUs; this scheduler
    counts each CPU once, so they are refused rather than read as NO."""
    upper = value.upper()
    if upper in ("NO", "EXCLUSIVE"):
        return upper
    if upper.split(":")[0] in ("YES", "FORCE"):
        raise ValueError(f"'{value}': CPUs shared by several jobs (YES, FORCE) are not supported here; "
                         "NO or EXCLUSIVE")
    raise ValueError(f"'{value}' is not NO, EXCLUSIVE, YES[:N] or FORCE[:N]")


def license_list(value: str) -> str:
    """Licenses=name[:count],... (wattsched.licenses), kept as written: Slurm shows it so."""
    try:
        licenses.parse(value)
    except licenses.LicenseError as exc:
        raise ValueError(f"'{exc}' is not a license name[:count]") from exc
    return value


def tres_names(*allowed: str) -> Callable[[str], tuple[str, ...]]:
    """As :func:`flags`, and ``license/NAME`` besides: a license's TRES."""
    known = flags(*allowed)

    def parse(value: str) -> tuple[str, ...]:
        items = [v.strip() for v in value.split(",") if v.strip()]
        ours = [v for v in items if not v.lower().startswith("license/")]
        if any(not v[len("license/"):] for v in items if v not in ours):
            raise ValueError("license/ without a license name")
        return known(",".join(ours)) + tuple(v for v in items if v not in ours)
    return parse


def port_range(value: str) -> tuple[int, int]:
    """``LOW-HIGH``: ports, LOW not above HIGH."""
    low, sep, high = value.partition("-")
    if not (sep and low.isdigit() and high.isdigit() and 0 < int(low) <= int(high) <= 65535):
        raise ValueError(f"'{value}' is not a range of ports LOW-HIGH")
    return int(low), int(high)


def cpu_freq_spec(value: str) -> str:
    cpufreq.parse(value)
    return value


def governors(value: str) -> tuple[str, ...]:
    return tuple(g.lower() for g in flags(*cpufreq.GOVERNORS)(value))


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
        pairs.append((kind.lower(), integer(seconds)))
    return tuple(pairs)


def auth_socket(value: str) -> str:
    """AuthInfo: ``socket=PATH`` of the local token service (munge's key in Slurm)."""
    key, _, path = value.partition("=")
    if key.strip().lower() != "socket" or not path.strip() or "," in path:
        raise ValueError("expected socket=/path/to/auth.sock")
    return path.strip()


@dataclass(frozen=True, slots=True)
class AuthAltParams:
    """AuthAltParameters, as Slurm's auth/jwt reads them: where the cluster key is, and the longest
    token a user may be given (``scontrol token lifespan=``; ours defaults to a day, where Slurm sets
    no bound: a token that leaks should not work for a year). Root (and the controller) are not
    bounded, as SlurmUser is not in Slurm. ``disable_token_creation`` refuses ``scontrol token`` to users."""

    jwt_key: str = ""
    max_token_lifespan_s: int = 86400
    disable_token_creation: bool = False


def parse_auth_alt(value: str) -> AuthAltParams:
    """``jwt_key=/path/to/key,max_token_lifespan=3600,disable_token_creation``."""
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, sep, setting = item.partition("=")
        key = key.strip().lower()
        if key == "jwt_key" and setting.strip():
            values["jwt_key"] = setting.strip()
        elif key == "max_token_lifespan" and sep:
            values["max_token_lifespan_s"] = bounded(1, 2**31)(setting)
        elif key == "disable_token_creation" and not sep:
            values["disable_token_creation"] = True
        else:
            raise ValueError(f"'{item}': expected jwt_key=PATH, max_token_lifespan=SECONDS or disable_token_creation")
    return AuthAltParams(**values)


def preempt_mode(value: str) -> str:
    """PreemptMode: OFF, CANCEL, REQUEUE or SUSPEND, with GANG and WITHIN accepted as Slurm's
    qualifiers."""
    modes = [m.strip().upper() for m in value.split(",") if m.strip()]
    main = [m for m in modes if m not in ("GANG", "WITHIN")]
    if len(main) != 1 or main[0] not in ("OFF", "CANCEL", "REQUEUE", "SUSPEND"):
        raise ValueError(f"'{value}' is not one of OFF, CANCEL, REQUEUE, SUSPEND (optionally with GANG or WITHIN)")
    return ",".join(modes)


def duration_s(value: str) -> int:
    """A time such as PreemptExemptTime: [days-]hours:minutes:seconds, or minutes; in seconds."""
    minutes_given = duration(value)
    if minutes_given is None:
        raise ValueError(f"'{value}' is not a time")
    return minutes_given * 60

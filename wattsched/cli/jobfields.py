"""squeue's view of a job: the %-codes and -O field names, their titles and values."""

from __future__ import annotations

from wattsched import states, timefmt
from wattsched.cli import fmt

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SHORT = states.JOB_SHORT


def _reason_or_nodes(job: dict[str, Any]) -> str:
    if job["state"] == "PENDING":
        return f"({job['reason']})"
    if job["state"] in ("RUNNING", "COMPLETING"):
        return job["node_list"]
    return f"({job['reason']})" if job["reason"] != "None" else ""


def _time_left(job: dict[str, Any], now: float) -> str:
    if job["time_limit_min"] is None:
        return "UNLIMITED"
    total = job["time_limit_min"] * 60
    return timefmt.secs_to_str(max(0, total - job["run_time_s"]))


def _start(job: dict[str, Any]) -> str:
    """A started job's start, or a pending one's expected start from the backfill plan."""
    if job["state"] == "PENDING":
        return timefmt.ts_str(job["expected_start"], "N/A")
    return timefmt.ts_str(job["start_time"], "N/A")


def _end(job: dict[str, Any]) -> str:
    if job["end_time"]:
        return timefmt.ts_str(job["end_time"])
    if job["start_time"] and job["time_limit_min"] is not None:
        return timefmt.ts_str(job["start_time"] + job["time_limit_min"] * 60)
    return "N/A"


def _min_memory(job: dict[str, Any]) -> str:
    """%m: the memory request (per node, or per CPU) with its unit, e.g. 4000M; 0 when none."""
    mb = job["mem_per_node_mb"] or job["mem_per_cpu_mb"]
    return f"{mb}M" if mb else "0"


def _priority_fraction(job: dict[str, Any]) -> str:
    """%p: the priority as a fraction of the largest 32-bit value, as Slurm prints it."""
    return f"{job['priority'] / 4294967295:.8f}"


def _expected(job: dict[str, Any], value: Callable[[dict[str, Any]], str]) -> str:
    """What the job's earlier runs let expect of it (wattsched.prediction), or N/A with none."""
    return value(job) if job.get("exp_elapsed_s") else "N/A"


def _min_cpus(job: dict[str, Any]) -> str:
    per_node = job["ntasks_per_node"] * job["cpus_per_task"] if job["ntasks_per_node"] else job["cpus_per_task"]
    return str(max(1, per_node))


# code -> (title, -O name, value)
FIELDS: dict[str, tuple[str, str, Callable[[dict[str, Any], float], str]]] = {
    "i": ("JOBID", "JobID", lambda j, n: j["display_id"]),
    "A": ("JOBID", "JobArrayID", lambda j, n: str(j["job_id"])),
    "F": ("ARRAY_JOB_ID", "ArrayJobID", lambda j, n: str(j["array_job_id"] or j["job_id"])),
    "K": ("ARRAY_TASK_ID", "ArrayTaskID", lambda j, n: "N/A" if j["array_task_id"] is None else
          str(j["array_task_id"])),
    "j": ("NAME", "Name", lambda j, n: j["name"]),
    "u": ("USER", "UserName", lambda j, n: j["user"]),
    "U": ("UID", "UserID", lambda j, n: str(j["uid"])),
    "g": ("GROUP", "GroupName", lambda j, n: j["group"]),
    "a": ("ACCOUNT", "Account", lambda j, n: j["account"] or "(null)"),
    "T": ("STATE", "State", lambda j, n: j["state"]),
    "t": ("ST", "StateCompact", lambda j, n: SHORT.get(j["state"], j["state"])),
    "M": ("TIME", "TimeUsed", lambda j, n: timefmt.secs_to_str(j["run_time_s"])),
    "l": ("TIME_LIMIT", "TimeLimit", lambda j, n: timefmt.limit_str(j["time_limit_min"])),
    "L": ("TIME_LEFT", "TimeLeft", _time_left),
    "D": ("NODES", "NumNodes", lambda j, n: str(j["num_nodes"])),
    "C": ("CPUS", "NumCPUs", lambda j, n: str(j["num_cpus"])),
    "N": ("NODELIST", "NodeList", lambda j, n: j["node_list"]),
    "R": ("NODELIST(REASON)", "ReasonList", lambda j, n: _reason_or_nodes(j)),
    "r": ("REASON", "Reason", lambda j, n: j["reason"]),
    "P": ("PARTITION", "Partition", lambda j, n: j["partition"]),
    "S": ("START_TIME", "StartTime", lambda j, n: _start(j)),
    "e": ("END_TIME", "EndTime", lambda j, n: _end(j)),
    "V": ("SUBMIT_TIME", "SubmitTime", lambda j, n: timefmt.ts_str(j["submit_time"])),
    "Q": ("PRIORITY", "PriorityLong", lambda j, n: str(j["priority"])),
    "Z": ("WORK_DIR", "WorkDir", lambda j, n: j["work_dir"]),
    "o": ("COMMAND", "Command", lambda j, n: j["command"]),
    "E": ("DEPENDENCY", "Dependency", lambda j, n: j["dependency"] or "(null)"),
    "k": ("COMMENT", "Comment", lambda j, n: j["comment"] or "(null)"),
    "y": ("NICE", "Nice", lambda j, n: str(j["nice"])),
    "B": ("EXEC_HOST", "BatchHost", lambda j, n: j["batch_host"] or "n/a"),
    "q": ("QOS", "QOS", lambda j, n: j.get("qos") or "(null)"),
    "x": ("EXC_NODES", "ExcNodes", lambda j, n: ",".join(j["exc_nodes"])),
    "n": ("REQ_NODES", "ReqNodes", lambda j, n: ",".join(j["req_nodes"])),
    "w": ("WCKEY", "WCKey", lambda j, n: j["wckey"] or "(null)"),
    "v": ("RESERVATION", "Reservation", lambda j, n: j["reservation"] or "(null)"),
    "b": ("TRES_PER_NODE", "tres-per-node", lambda j, n: j.get("tres_per_node") or "N/A"),
    "c": ("MIN_CPUS", "MinCpus", lambda j, n: _min_cpus(j)),
    "d": ("MIN_TMP_DISK", "MinTmpDisk", lambda j, n: str(j["tmp_mb"])),
    "f": ("FEATURES", "Feature", lambda j, n: "&".join(j["features"]) or "(null)"),
    "G": ("GROUP", "GroupID", lambda j, n: str(j["gid"])),
    "h": ("OVER_SUBSCRIBE", "OverSubscribe", lambda j, n: "NO" if j["exclusive"] else "OK"),
    "H": ("S:C:T", "SocketsPerNode", lambda j, n: "*"),
    "I": ("S:C:T", "CoresPerSocket", lambda j, n: "*"),
    "J": ("S:C:T", "ThreadsPerCore", lambda j, n: "*"),
    "m": ("MIN_MEMORY", "MinMemory", lambda j, n: _min_memory(j)),
    "O": ("CONTIGUOUS", "Contiguous", lambda j, n: "0"),
    "p": ("PRIORITY", "Priority", lambda j, n: _priority_fraction(j)),
    "s": ("SELECT_JOB_INFO", "SelectJobInfo", lambda j, n: "N/A"),
    "W": ("LICENSES", "Licenses", lambda j, n: j.get("licenses") or "(null)"),
    "X": ("CORE_SPEC", "CoreSpec", lambda j, n: "N/A"),
    "Y": ("SCHEDNODES", "SchedNodes", lambda j, n: "(null)"),
    "z": ("S:C:T", "SCT", lambda j, n: "*:*:*"),
    # ours, by -O name only (multi-letter codes: %{exp_energy} in a format): the energy policy, and
    # what the job's earlier runs let expect of it
    "energy_policy": ("ENERGY_POLICY", "EnergyPolicy", lambda j, n: j.get("energy_policy") or "(null)"),
    "exp_elapsed": ("EXP_ELAPSED", "ExpElapsed",
                   lambda j, n: _expected(j, lambda e: timefmt.secs_to_str(round(e["exp_elapsed_s"])))),
    "exp_energy": ("EXP_ENERGY", "ExpEnergy", lambda j, n: _expected(j, lambda e: fmt.num_unit(e["exp_energy_j"]))),
    "exp_watts": ("EXP_WATTS", "ExpWatts", lambda j, n: _expected(j, lambda e: f"{e['exp_watts']:.0f}")),
}
# code -> the listing record's keys its value reads (squeue asks the controller for those alone)
KEYS: dict[str, tuple[str, ...]] = {
    "i": ("display_id",), "d": ("tmp_mb",), "A": ("job_id",), "F": ("array_job_id", "job_id"), "K": ("array_task_id",),
    "j": ("name",), "u": ("user",), "U": ("uid",), "g": ("group",), "a": ("account",), "T": ("state",),
    "t": ("state",), "M": ("run_time_s",), "l": ("time_limit_min",), "L": ("time_limit_min", "run_time_s"),
    "D": ("num_nodes",), "C": ("num_cpus",), "N": ("node_list",), "R": ("state", "reason", "node_list"),
    "r": ("reason",), "P": ("partition",), "S": ("state", "expected_start", "start_time"),
    "e": ("end_time", "start_time", "time_limit_min"), "V": ("submit_time",), "Q": ("priority",),
    "Z": ("work_dir",), "o": ("command",), "E": ("dependency",), "k": ("comment",), "y": ("nice",),
    "B": ("batch_host",), "q": ("qos",), "x": ("exc_nodes",), "n": ("req_nodes",), "w": ("wckey",),
    "v": ("reservation",), "b": ("tres_per_node",), "c": ("ntasks_per_node", "cpus_per_task"),
    "f": ("features",), "G": ("gid",), "h": ("exclusive",), "m": ("mem_per_node_mb", "mem_per_cpu_mb"),
    "p": ("priority",), "W": ("licenses",), "energy_policy": ("energy_policy",), "exp_elapsed": ("exp_elapsed_s",),
    "exp_energy": ("exp_elapsed_s", "exp_energy_j"), "exp_watts": ("exp_elapsed_s", "exp_watts"),
}
# -O names with no %-code of their own (Slurm's squeue -O table), mapped to one that shows the same
ALIASES = {"arrayjobid": "F", "arraytaskid": "K", "jobarrayid": "i", "username": "u", "userid": "U",
           "groupname": "g", "statecompact": "t", "timeused": "M", "numnodes": "D", "numcpus": "C",
           "prioritylong": "Q", "reasonlist": "R", "minmemory": "m", "cpus-per-task": "c",
           "tres-per-node": "b", "name": "j", "qos": "q"}
BY_NAME = {**ALIASES, **{name.lower(): code for code, (_title, name, _f) in FIELDS.items()}}

"""squeue --steps' view of a job step: its %-codes and -O field names, titles and values (Slurm's
step_format_* table), over a record of the step joined with its job's fields."""

from __future__ import annotations

from wattsched import timefmt

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT = "%.15i %.8j %.9P %.8u %.9M %N"


def _step_id(step: dict[str, Any]) -> str:
    """12.0, 12.batch; an array task's 7_3.0, as Slurm's squeue writes it."""
    if step["array_job_id"]:
        return f"{step['array_job_id']}_{step['array_task_id']}.{step['step_id']}"
    return f"{step['job_id']}.{step['step_id']}"


def _nodes(step: dict[str, Any]) -> int:
    from wattsched import hostlist

    return len(hostlist.expand(step["nodes"])) if step["nodes"] else 0


# code: (title, -O name, value of (step record, now))
FIELDS: dict[str, tuple[str, str, Callable[[dict[str, Any], float], str]]] = {
    "i": ("STEPID", "StepId", lambda s, n: _step_id(s)),
    "j": ("NAME", "StepName", lambda s, n: s["name"]),
    "P": ("PARTITION", "Partition", lambda s, n: s["partition"]),
    "u": ("USER", "UserName", lambda s, n: s["user"]),
    "U": ("UID", "UserId", lambda s, n: str(s["uid"])),
    "M": ("TIME", "TimeUsed", lambda s, n: timefmt.secs_to_str(max(0, int(n - s["start_time"])))),
    "l": ("TIME_LIMIT", "TimeLimit", lambda s, n: timefmt.limit_str(s["time_limit_min"])),
    "S": ("START_TIME", "StartTime", lambda s, n: timefmt.ts_str(s["start_time"], "N/A")),
    "N": ("NODELIST", "NodeList", lambda s, n: s["nodes"]),
    "A": ("TASKS", "NumTasks", lambda s, n: str(s["ntasks"])),
    "b": ("TRES_PER_NODE", "Gres", lambda s, n: "N/A"),
}
# -O names Slurm's squeue takes for steps that have no %-code of their own (and its aliases)
LONG_ONLY: dict[str, tuple[str, Callable[[dict[str, Any], float], str]]] = {
    "jobid": ("JOBID", lambda s, n: str(s["job_id"])),
    "stepstate": ("STATE", lambda s, n: s["state"]),
    "numcpus": ("CPUS", lambda s, n: str(s["cpus"])),
    "cluster": ("CLUSTER", lambda s, n: s["cluster"]),
    "arrayjobid": ("ARRAY_JOB_ID", lambda s, n: str(s["array_job_id"] or s["job_id"])),
    "arraytaskid": ("ARRAY_TASK_ID", lambda s, n: "N/A" if s["array_task_id"] is None else str(s["array_task_id"])),
    "numnodes": ("NODES", lambda s, n: str(_nodes(s))),
}
BY_NAME = {name.lower(): code for code, (_, name, _) in FIELDS.items()} | {"name": "j"} | {n: n for n in LONG_ONLY}
TITLES = {code: title for code, (title, _, _) in FIELDS.items()} | {n: t for n, (t, _) in LONG_ONLY.items()}


def value_of(code: str) -> Callable[[dict[str, Any], float], str] | None:
    return FIELDS[code][2] if code in FIELDS else LONG_ONLY[code][1] if code in LONG_ONLY else None


def records(jobs: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """Each running step of ``jobs`` (batch and extern steps too) with its job's fields."""
    found = []
    for job in jobs:
        for step in job["steps"]:
            if step["state"] == "RUNNING":
                found.append({"job_id": job["job_id"], "array_job_id": job["array_job_id"],
                              "array_task_id": job["array_task_id"], "partition": job["partition"],
                              "user": job["user"], "uid": job["uid"], "time_limit_min": job["time_limit_min"],
                              "cpus": job["num_cpus"], "cluster": cluster, **step})
    return found

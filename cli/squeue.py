"""squeue: the queue, in Slurm's formats (-o %-codes, -O fields, -l, --start, --json)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list
from wattsched.cli.jobfields import BY_NAME, FIELDS

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %R"
DEFAULT_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def format_from_fields(spec: str) -> str:
    """-O/--Format ``Name[:[.]size],...`` as an equivalent %-format (default size 20, as Slurm)."""
    parts = []
    for item in spec.split(","):
        name, _, size = item.partition(":")
        code = BY_NAME.get(name.strip().lower())
        if code is None:
            raise CLIError(f"Invalid job format specification: {name}")
        right = size.startswith(".")
        width = size.lstrip(".") or "20"
        parts.append(f"%{'.' if right else ''}{width}{code}")
    return "".join(parts)


@app.command()
def squeue(
    fmt_: Annotated[str | None, typer.Option("-o", "--format", help="Output format (%-codes).")] = None,
    fields: Annotated[str | None, typer.Option("-O", "--Format", help="Output fields, comma separated.")] = None,
    noheader: Annotated[bool, typer.Option("-h", "--noheader", help="No header line.")] = False,
    users: Annotated[list[str] | None, typer.Option("-u", "--user", help="Users to show.")] = None,
    jobs: Annotated[list[str] | None, typer.Option("-j", "--jobs", help="Job ids to show.")] = None,
    states: Annotated[list[str] | None, typer.Option("-t", "--states", help="States to show (or 'all').")]
    = None,
    partitions: Annotated[list[str] | None, typer.Option("-p", "--partition", help="Partitions.")] = None,
    me: Annotated[bool, typer.Option("--me", help="Only my jobs.")] = False,
    long: Annotated[bool, typer.Option("-l", "--long", help="Long format.")] = False,
    start: Annotated[bool, typer.Option("--start", help="Expected start times of pending jobs.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    array: Annotated[bool, typer.Option("-r", "--array", help="One line per array task (always).")] = False,
) -> None:
    """Show the jobs in the queue."""
    from wattsched import states as st

    wanted_states: list[str] = []
    for item in split_list(states):
        if item.lower() == "all":
            wanted_states = list(st.JOB_STATES)
            break
        try:
            wanted_states.append(st.parse_job_state(item))
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
    if start:
        wanted_states = ["PENDING"]
    user_list = split_list(users)
    if me:
        from wattsched.auth import username

        user_list.append(username(os.getuid()))
    job_list = split_list(jobs)
    active = wanted_states or (list(st.JOB_STATES) if job_list else list(DEFAULT_STATES))
    params = {"user": user_list or None, "partition": split_list(partitions) or None, "job": job_list or None,
              "state": active, "columns": "true"}
    reply = Client().request("GET", "/v1/jobs", params=params)
    now = reply["time"]
    if "columns" in reply:
        names = reply["columns"]
        reply["jobs"] = [dict(zip(names, row, strict=True)) for row in reply["rows"]]
    rows = [j for j in reply["jobs"] if j["state"] in active]
    rows.sort(key=lambda j: (j["state"] == "PENDING", -j["priority"]
                             if j["state"] == "PENDING" else 0, j["job_id"]))
    if json_:
        print_json({"jobs": rows, "time": now})
        return
    if not array:
        rows = collapse_pending_arrays(rows)
    spec = fmt_ or (format_from_fields(fields) if fields else None) or os.environ.get("SQUEUE_FORMAT") or \
        (START if start else LONG if long else DEFAULT)
    parts = fmt.parse_format(spec)
    lines = []
    if long:
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    if not noheader:
        lines.append(fmt.render_header(parts, {code: f[0] for code, f in FIELDS.items()}))
    row = fmt.compile_row(parts, lambda code: fmt.bound(FIELDS[code][2] if code in FIELDS else None, code, now))
    lines.extend(row(job) for job in rows)
    if lines:
        print("\n".join(lines))


def collapse_pending_arrays(rows: list[dict]) -> list[dict]:
    """Pending tasks of one array show as one line, ``12_[3-15%4]``, as in Slurm (unless -r)."""
    groups: dict[int, list[dict]] = {}
    result: list[dict] = []
    for job in rows:
        if job["state"] == "PENDING" and job["array_task_id"] is not None:
            if job["array_job_id"] not in groups:
                groups[job["array_job_id"]] = []
                result.append(job)
            groups[job["array_job_id"]].append(job)
        else:
            result.append(job)
    for index, job in enumerate(result):
        tasks = groups.get(job["array_job_id"]) if job["state"] == "PENDING" else None
        if tasks and len(tasks) > 1:
            ids = _ranges(sorted(t["array_task_id"] for t in tasks))
            throttle = f"%{job['array_throttle']}" if job["array_throttle"] else ""
            result[index] = dict(job, display_id=f"{job['array_job_id']}_[{ids}{throttle}]")
    return result


def _ranges(ids: list[int]) -> str:
    parts, start = [], ids[0]
    for prev, cur in zip(ids, [*ids[1:], None], strict=True):
        if cur != prev + 1 if cur is not None else True:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ",".join(parts)


def main() -> None:
    try:
        app(prog_name="squeue")
    except CLIError as exc:
        die("squeue", str(exc) if exc.status else f"slurm_load_jobs error: {exc}")

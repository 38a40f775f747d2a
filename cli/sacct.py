"""sacct: accounting records of jobs and their steps, with Slurm's fields, widths and formats."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FIELDS = "JobID,State,ExitCode"
LONG_FIELDS = ("JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxRSS,AveRSS,AllocCPUS,NTasks,Elapsed,State,"
               "ExitCode,AveCPUFreq,ConsumedEnergyRaw")

Row = dict[str, Any]


def _ts(epoch: float) -> str:
    from wattsched import timefmt

    return timefmt.ts_str(epoch)


def _elapsed(job: Row, step: Row | None) -> int:
    rec = step or job
    start, end = rec["time_start"], rec["time_end"]
    if not start:
        return 0
    return int((end or time.time()) - start)


def _state(job: Row, step: Row | None) -> str:
    rec = step or job
    if rec["state"] == "CANCELLED" and job.get("cancelled_by") is not None:
        return f"CANCELLED by {job['cancelled_by']}"
    return rec["state"]


def _total_cpu(seconds: float) -> str:
    """TotalCPU as Slurm prints it: MM:SS.mmm under an hour, else [D-]HH:MM:SS."""
    if seconds < 3600:
        minutes, secs = divmod(seconds, 60)
        return f"{int(minutes):02d}:{secs:06.3f}"
    from wattsched import timefmt

    return timefmt.elapsed_str(seconds)


def _timelimit(job: Row, step: Row | None) -> str:
    if step is not None:
        return ""
    from wattsched import timefmt

    minutes = job["timelimit_min"]
    return "UNLIMITED" if minutes is None else timefmt.elapsed_str(minutes * 60)


def _reqmem(job: Row) -> str:
    if job["req_mem_per_cpu"]:
        return f"{job['req_mem_per_cpu']}Mc"
    return f"{job['req_mem_mb']}M" if job["req_mem_mb"] else "0"


def _job_id(job: Row, step: Row | None, raw: bool) -> str:
    base = str(job["job_id"]) if raw or job["array_task_id"] is None else \
        f"{job['array_job_id']}_{job['array_task_id']}"
    return f"{base}.{step['step_id']}" if step else base


def num_unit(value: float | None, units: str = " KMGTP") -> str:
    """A number as Slurm's convert_num_unit2 prints it (divisor 1000): 850, 12K, 1.25M; ``units``
    starts at the value's own unit (kHz frequencies start at K: 2400000 -> 2.40G)."""
    number = float(value or 0)
    index = 0
    while number >= 1000 and index < len(units) - 1:
        number, index = number / 1000, index + 1
    unit = units[index].strip()
    return f"{number:.0f}{unit}" if number == int(number) else f"{number:.2f}{unit}"


def _energy(joules: float | None) -> str:
    return num_unit(joules)


GOVERNOR_NAMES = {"userspace": "UserSpace", "ondemand": "OnDemand", "powersave": "PowerSave", "schedutil": "SchedUtil"}


def freq_text(khz: int | None) -> str:
    return num_unit(khz, "KMGT") if khz else "Unknown"


def req_freq(spec: str, chosen_khz: int | None, part: str) -> str:
    """ReqCPUFreqMin/Max/Gov of a --cpu-freq (or of the frequency fitted to a power cap)."""
    from wattsched import cpufreq

    try:
        request = cpufreq.parse(spec) if spec else (cpufreq.FreqRequest(low=str(chosen_khz)) if chosen_khz else None)
    except cpufreq.FreqError:
        request = None
    if request is None:
        return "Unknown"
    if part == "gov":
        governor = request.governor_needed
        return GOVERNOR_NAMES.get(governor, governor.capitalize() or "Unknown")
    value = request.low if part == "min" or request.high is None else request.high
    if value is None:
        return "Unknown"
    return freq_text(int(value)) if value.isdigit() else value.capitalize().replace("m1", "M1")


def tres_usage(cpu_s: float, joules: float | None, rss_kb: int) -> str:
    from wattsched import timefmt

    parts = [f"cpu={timefmt.elapsed_str(int(cpu_s))}"]
    if joules is not None:
        parts.append(f"energy={round(joules)}")
    if rss_kb:
        parts.append(f"mem={rss_kb}K")
    return ",".join(parts)


def _kb(value: int) -> str:
    return f"{value}K" if value else ""


# name -> (width, value); a negative width left-justifies, as in sacct.
FIELDS: dict[str, tuple[int, Callable[[Row, Row | None], str]]] = {
    "Account": (10, lambda j, s: j["account"]),
    "AllocCPUS": (10, lambda j, s: str((s or j)["alloc_cpus"])),
    "AllocNodes": (10, lambda j, s: str((s or j)["nnodes"])),
    "AveCPUFreq": (10, lambda j, s: freq_text(j.get("ave_cpu_freq_khz")) if j.get("ave_cpu_freq_khz") else ""),
    "ReqCPUFreq": (13, lambda j, s: j["req_cpu_freq"] or (str(j["cpu_freq_khz"]) if j["cpu_freq_khz"] else "Unknown")),
    "ReqCPUFreqMin": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "min")),
    "ReqCPUFreqMax": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "max")),
    "ReqCPUFreqGov": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "gov")),
    "TRESUsageInTot": (14, lambda j, s: tres_usage(s["total_cpu_s"] if s else sum(x["total_cpu_s"] for x in j["steps"]),
                                                   (s or j)["consumed_energy_j"], s["max_rss_kb"] if s else 0)),
    "AveRSS": (10, lambda j, s: _kb(s["max_rss_kb"]) if s else ""),
    "Cluster": (10, lambda j, s: j["cluster"]),
    "Comment": (14, lambda j, s: j["comment"] if not s else ""),
    "Constraints": (19, lambda j, s: j["constraints"]),
    "ConsumedEnergy": (14, lambda j, s: _energy((s or j)["consumed_energy_j"])),
    "ConsumedEnergyRaw": (17, lambda j, s: str((s or j)["consumed_energy_j"] or 0)),
    "CPUTime": (10, lambda j, s: _elapsed_str(_elapsed(j, s) * (s or j)["alloc_cpus"])),
    "CPUTimeRAW": (10, lambda j, s: str(_elapsed(j, s) * (s or j)["alloc_cpus"])),
    "DerivedExitCode": (15, lambda j, s: "" if s else f"{max([j['exit_code']] + [x['exit_code'] for x in j['steps']])}"
                        f":{max([j['term_signal']] + [x['term_signal'] for x in j['steps']])}"),
    "Elapsed": (10, lambda j, s: _elapsed_str(_elapsed(j, s))),
    "ElapsedRaw": (10, lambda j, s: str(_elapsed(j, s))),
    "Eligible": (19, lambda j, s: _ts(j["time_eligible"])),
    "End": (19, lambda j, s: _ts((s or j)["time_end"])),
    "ExitCode": (8, lambda j, s: f"{(s or j)['exit_code']}:{(s or j)['term_signal']}"),
    "GID": (6, lambda j, s: str(j["gid"])),
    "Group": (9, lambda j, s: j["group"]),
    "JobID": (-12, lambda j, s: _job_id(j, s, raw=False)),
    "JobIDRaw": (-12, lambda j, s: _job_id(j, s, raw=True)),
    "JobName": (10, lambda j, s: (s or j)["name"]),
    "MaxRSS": (10, lambda j, s: _kb(s["max_rss_kb"]) if s else ""),
    "MaxVMSize": (10, lambda j, s: ""),
    "NCPUS": (10, lambda j, s: str((s or j)["alloc_cpus"])),
    "NNodes": (8, lambda j, s: str((s or j)["nnodes"])),
    "NodeList": (15, lambda j, s: (s or j)["node_list"]),
    "NTasks": (8, lambda j, s: str(s["ntasks"]) if s else ""),
    "Partition": (10, lambda j, s: "" if s else j["partition"]),
    "Priority": (10, lambda j, s: "" if s else str(j["priority"])),
    "ReqCPUS": (8, lambda j, s: str(j["req_cpus"])),
    "ReqMem": (10, lambda j, s: _reqmem(j)),
    "ReqNodes": (8, lambda j, s: str(j["req_nodes"])),
    "Reservation": (20, lambda j, s: ""),
    "Start": (19, lambda j, s: _ts((s or j)["time_start"])),
    "State": (10, _state),
    "Submit": (19, lambda j, s: _ts(j["time_submit"] if not s else s["time_start"])),
    "SubmitLine": (20, lambda j, s: "" if s else j["submit_line"]),
    "Timelimit": (10, _timelimit),
    "TimelimitRaw": (10, lambda j, s: "" if s else ("UNLIMITED" if j["timelimit_min"] is None
                                                   else str(j["timelimit_min"]))),
    "TotalCPU": (10, lambda j, s: _total_cpu(s["total_cpu_s"] if s else sum(x["total_cpu_s"] for x in j["steps"]))),
    "UID": (6, lambda j, s: str(j["uid"])),
    "User": (9, lambda j, s: "" if s else j["user"]),
    "WCKey": (10, lambda j, s: j["wckey"]),
    "WorkDir": (20, lambda j, s: j["work_dir"]),
}


def _elapsed_str(seconds: int) -> str:
    from wattsched import timefmt

    return timefmt.elapsed_str(seconds)


def parse_fields(spec: str) -> list[tuple[str, int]]:
    """``--format=JobID,JobName%30,State``: field names with an optional %width."""
    try:
        return fmt.parse_fields(spec, {name: spec_[0] for name, spec_ in FIELDS.items()})
    except ValueError as exc:
        raise CLIError(str(exc)) from exc


@app.command()
def sacct(
    jobs: Annotated[list[str] | None, typer.Option("-j", "--jobs", help="Job ids.")] = None,
    users: Annotated[list[str] | None, typer.Option("-u", "--user", help="Users.")] = None,
    allusers: Annotated[bool, typer.Option("-a", "--allusers", help="All users' jobs.")] = False,
    starttime: Annotated[str | None, typer.Option("-S", "--starttime", help="Jobs active after this time.")]
    = None,
    endtime: Annotated[str | None, typer.Option("-E", "--endtime", help="Jobs active before this time.")] = None,
    state: Annotated[list[str] | None, typer.Option("-s", "--state", help="States.")] = None,
    fields: Annotated[str | None, typer.Option("-o", "--format", help="Fields, e.g. JobID,State,Elapsed%12.")]
    = None,
    parsable: Annotated[bool, typer.Option("-p", "--parsable", help="'|'-delimited, with a trailing '|'.")]
    = False,
    parsable2: Annotated[bool, typer.Option("-P", "--parsable2", help="'|'-delimited, no trailing '|'.")]
    = False,
    delimiter: Annotated[str, typer.Option("--delimiter", help="Delimiter for -p/-P.")] = "|",
    noheader: Annotated[bool, typer.Option("-n", "--noheader", help="No header.")] = False,
    allocations: Annotated[bool, typer.Option("-X", "--allocations", help="Jobs only, not steps.")] = False,
    brief: Annotated[bool, typer.Option("-b", "--brief", help="JobID, State, ExitCode only.")] = False,
    long: Annotated[bool, typer.Option("-l", "--long", help="Many fields.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    helpformat: Annotated[bool, typer.Option("-e", "--helpformat", help="List the available fields.")] = False,
) -> None:
    """Show accounting data of jobs and steps."""
    if helpformat:
        names = sorted(FIELDS, key=str.lower)
        for row in range(0, len(names), 4):
            print("".join(f"{n:<20}" for n in names[row:row + 4]).rstrip())
        return
    from wattsched import auth, timefmt
    from wattsched import states as st

    spec = fields or os.environ.get("SACCT_FORMAT") or (BRIEF_FIELDS if brief else LONG_FIELDS if long
                                                         else DEFAULT_FIELDS)
    columns = parse_fields(spec)
    now = time.time()
    job_ids = []
    for ref in split_list(jobs):
        base = ref.split(".")[0].split("_")[0]
        if not base.isdigit():
            raise CLIError(f"Invalid job id: {ref}")
        job_ids.append(int(base))
    try:
        start = timefmt.parse_time(starttime, now) if starttime else None
        end = timefmt.parse_time(endtime, now) if endtime else None
        wanted_states = [st.parse_job_state(s) for s in split_list(state)]
    except (timefmt.TimeFormatError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
    if start is None and not job_ids:
        start = timefmt.parse_time("today", now)
    user_list = split_list(users)
    if not user_list and not allusers and not job_ids and os.getuid() != 0:
        user_list = [auth.username(os.getuid())]
    params = {"job": job_ids or None, "user": user_list or None, "state": wanted_states or None,
              "start": start, "end": end}
    rows = Client().request("GET", "/v1/accounting/jobs", params=params)["jobs"]
    wanted_tasks = {r for r in split_list(jobs) if "_" in r}
    if wanted_tasks:
        rows = [r for r in rows if f"{r['array_job_id']}_{r['array_task_id']}" in wanted_tasks
                or (str(r["job_id"]) in {t.split("_")[0] for t in wanted_tasks} and r["array_task_id"] is None)]
    if json_:
        print_json({"jobs": rows})
        return
    records: list[dict[str, str]] = []
    for job in rows:
        records.append({name: FIELDS[name][1](job, None) for name, _ in columns})
        if not allocations:
            for step in sorted(job["steps"], key=_step_order):
                records.append({name: FIELDS[name][1](job, step) for name, _ in columns})
    delim = delimiter if (parsable or parsable2) else None
    for line in fmt.format_table(records, columns, delim, trailing=parsable, header=not noheader):
        print(line)


def _step_order(step: Row) -> tuple:
    sid = step["step_id"]
    return (0, 0) if sid == "batch" else (1, 0) if sid == "extern" else (2, int(sid) if sid.isdigit() else 0)


def main() -> None:
    try:
        app(prog_name="sacct")
    except CLIError as exc:
        die("sacct", str(exc))

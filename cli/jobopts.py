"""Options that sbatch and srun share, declared once, and how they become a submission."""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from typing import Annotated, Any

import typer
from wattsched.cli.common import CLIError

Nodes = Annotated[str | None, typer.Option("-N", "--nodes", help="Number of nodes: N or MIN-MAX.")]
Ntasks = Annotated[int | None, typer.Option("-n", "--ntasks", help="Number of tasks.")]
NtasksPerNode = Annotated[int | None, typer.Option("--ntasks-per-node", help="Tasks per node.")]
CpusPerTask = Annotated[int | None, typer.Option("-c", "--cpus-per-task", help="CPUs per task.")]
Mem = Annotated[str | None, typer.Option("--mem", help="Memory per node (MB, or K/M/G/T suffix).")]
MemPerCpu = Annotated[str | None, typer.Option("--mem-per-cpu", help="Memory per allocated CPU.")]
Time = Annotated[str | None, typer.Option("-t", "--time", help="Time limit (M, M:S, H:M:S, D-H, D-H:M, "
                                                               "D-H:M:S, UNLIMITED).")]
JobName = Annotated[str | None, typer.Option("-J", "--job-name", help="Job name.")]
Output = Annotated[str | None, typer.Option("-o", "--output", help="Standard output file pattern.")]
Error = Annotated[str | None, typer.Option("-e", "--error", help="Standard error file pattern.")]
Input = Annotated[str | None, typer.Option("-i", "--input", help="Standard input file pattern.")]
Partition = Annotated[str | None, typer.Option("-p", "--partition", help="Partition.")]
Account = Annotated[str | None, typer.Option("-A", "--account", help="Account to charge.")]
Chdir = Annotated[str | None, typer.Option("-D", "--chdir", help="Working directory.")]
Exclusive = Annotated[bool, typer.Option("--exclusive", help="Whole nodes, shared with no other job.")]
Export = Annotated[str | None, typer.Option("--export", help="ALL, NONE, or [ALL,]VAR[=value],...")]
Nodelist = Annotated[str | None, typer.Option("-w", "--nodelist", help="Nodes the job must use.")]
Exclude = Annotated[str | None, typer.Option("-x", "--exclude", help="Nodes the job must not use.")]
Constraint = Annotated[str | None, typer.Option("-C", "--constraint", help="Required node features.")]
OpenMode = Annotated[str | None, typer.Option("--open-mode", help="append or truncate.")]
Comment = Annotated[str | None, typer.Option("--comment", help="Comment.")]
Begin = Annotated[str | None, typer.Option("-b", "--begin", help="Earliest start time.")]
Dependency = Annotated[str | None, typer.Option("-d", "--dependency", help="Dependencies.")]
Hold = Annotated[bool, typer.Option("-H", "--hold", help="Submit held.")]
Nice = Annotated[int | None, typer.Option("--nice", help="Scheduling priority adjustment.")]
Reservation = Annotated[str | None, typer.Option("--reservation", help="Run in this advanced reservation.")]
CpuFreq = Annotated[str | None, typer.Option("--cpu-freq", help="p1[-p2[:governor]]: kHz, low, medium, high, "
                                                                "highm1, or a governor.")]
PowerFit = Annotated[bool, typer.Option("--power-fit", help="Under a power cap, may run at a lower CPU frequency "
                                                            "to start sooner (ours; not with --cpu-freq).")]
Profile = Annotated[str | None, typer.Option("--profile", help="all, none, or energy,task: record a power "
                                                                "profile (acct_gather_profile/hdf5).")]
AcctgFreq = Annotated[str | None, typer.Option("--acctg-freq", help="Sampling intervals: energy=N,task=N "
                                                                    "(seconds).")]
Signal = Annotated[str | None, typer.Option("--signal", help="[{R|B}:]SIG[@seconds]")]
Quiet = Annotated[bool, typer.Option("-Q", "--quiet", help="Quiet mode.")]
Verbose = Annotated[int, typer.Option("-v", "--verbose", count=True, help="More messages.")]


def node_range(text: str | None) -> tuple[int, int]:
    if not text:
        return 1, 0
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not match or int(match.group(1)) < 1:
        raise CLIError(f"Invalid node count specification: {text}")
    low, high = int(match.group(1)), int(match.group(2) or 0)
    if high and high < low:
        raise CLIError(f"Invalid node count specification: {text}")
    return low, high


def memory(text: str | None, flag: str) -> int:
    if not text:
        return 0
    from wattsched import timefmt

    try:
        return timefmt.parse_mem_mb(text)
    except timefmt.TimeFormatError as exc:
        raise CLIError(f"Invalid {flag} specification: {text}") from exc


def environment(export: str | None) -> dict[str, str]:
    """--export: ALL (default), NONE, or a list of names and NAME=value, with or without ALL."""
    if not export or export.upper() == "ALL":
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in export.split(","):
        if item.upper() == "ALL":
            env.update(os.environ)
        elif item.upper() == "NONE":
            continue
        elif "=" in item:
            name, value = item.split("=", 1)
            env[name] = value
        elif item in os.environ:
            env[item] = os.environ[item]
    return env


def job_environment(export: str | None) -> dict[str, str]:
    """The environment a job gets: --export's, with the submitter's umask as SLURM_UMASK (as in Slurm)
    and without credentials."""
    from wattsched.auth import SECRET_ENV

    env = environment(export)
    for name in SECRET_ENV:
        env.pop(name, None)
    mask = os.umask(0)
    os.umask(mask)
    env.setdefault("SLURM_UMASK", f"{mask:04o}")
    return env


def submission(opts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The JSON body of a submission from the shared options (unset ones are left out)."""
    nodes_min, nodes_max = node_range(opts.get("nodes"))
    mem_mb, mem_cpu_mb = memory(opts.get("mem"), "--mem"), memory(opts.get("mem_per_cpu"), "--mem-per-cpu")
    if mem_mb and mem_cpu_mb:
        raise CLIError("--mem and --mem-per-cpu are mutually exclusive.")
    open_mode = (opts.get("open_mode") or "truncate").lower()
    if open_mode not in ("append", "truncate", "a", "t"):
        raise CLIError(f"Invalid --open-mode specification: {opts.get('open_mode')}")
    work_dir = os.path.abspath(opts.get("chdir") or os.getcwd())
    body: dict[str, Any] = {
        "name": opts.get("job_name") or "",
        "work_dir": work_dir,
        "environment": job_environment(opts.get("export")),
        "submit_host": socket.gethostname().split(".")[0],
        "submit_line": " ".join(shlex.quote(a) for a in [os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "account": opts.get("account") or "",
        "partition": opts.get("partition") or "",
        "nodes_min": nodes_min, "nodes_max": nodes_max,
        "ntasks": opts.get("ntasks"),
        "ntasks_per_node": opts.get("ntasks_per_node") or 0,
        "cpus_per_task": opts.get("cpus_per_task") or 1,
        "mem_per_node_mb": mem_mb, "mem_per_cpu_mb": mem_cpu_mb,
        "time_limit": opts.get("time"),
        "begin": opts.get("begin"),
        "dependency": opts.get("dependency") or "",
        "hold": bool(opts.get("hold")),
        "exclusive": bool(opts.get("exclusive")),
        "nodelist": opts.get("nodelist") or "",
        "exclude": opts.get("exclude") or "",
        "constraint": opts.get("constraint") or "",
        "output": opts.get("output") or "",
        "error": opts.get("error") or "",
        "input": opts.get("input") or "/dev/null",
        "open_mode": "append" if open_mode.startswith("a") else "truncate",
        "signal": opts.get("signal") or "",
        "comment": opts.get("comment") or "",
        "nice": opts.get("nice") or 0,
        "reservation": opts.get("reservation") or "",
        "cpu_freq": opts.get("cpu_freq") or "",
        "power_fit": bool(opts.get("power_fit")),
        "profile": opts.get("profile") or "",
        "acctg_freq": opts.get("acctg_freq") or "",
    }
    body.update(extra)
    return body

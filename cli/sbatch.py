"""sbatch: submit a batch script, with #SBATCH directives and Slurm's options."""

from __future__ import annotations

import os
import shlex
import sys
import time
from typing import Annotated, Any

import typer
from wattsched.cli import jobopts as o
from wattsched.cli.common import Client, CLIError, die

app = typer.Typer(add_completion=False, context_settings={"allow_interspersed_args": False,
                                                          "help_option_names": ["--help"]})

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # the controller's limit on a script (JobSubmit.script)


def script_text(data: bytes) -> str:
    """A batch script's text, refused as sbatch refuses it: empty, too large, binary or not UTF-8 text."""
    if not data.strip():
        raise CLIError("Batch script is empty!")
    if len(data) > MAX_SCRIPT_BYTES:
        raise CLIError(f"Batch script is too large (over {MAX_SCRIPT_BYTES} bytes)")
    if b"\0" in data:
        raise CLIError("Batch script contains a NULL character: it is a binary file, not a script")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(f"Batch script is not UTF-8 text (invalid byte at offset {exc.start})") from exc
    if "\r\n" in text:
        raise CLIError("Batch script contains DOS line breaks (\\r\\n)\n"
                       "sbatch: error: instead of expected UNIX line breaks (\\n).")
    return text


def directives(script: str) -> list[str]:
    """Arguments from the script's #SBATCH lines (up to the first command, as Slurm reads them)."""
    args: list[str] = []
    for lineno, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if lineno == 1 and stripped.startswith("#!"):
            continue
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        body = stripped[len("#SBATCH"):].split(" #", 1)[0]
        try:
            args.extend(shlex.split(body))
        except ValueError as exc:
            raise CLIError(f"Invalid #SBATCH directive at line {lineno}: {exc}") from exc
    return args


@app.command()
def sbatch(
    ctx: typer.Context,
    script: Annotated[str | None, typer.Argument(help="Batch script (standard input if omitted).")] = None,
    script_args: Annotated[list[str] | None, typer.Argument(help="Arguments for the script.")] = None,
    nodes: o.Nodes = None, ntasks: o.Ntasks = None, ntasks_per_node: o.NtasksPerNode = None,
    cpus_per_task: o.CpusPerTask = None, mem: o.Mem = None, mem_per_cpu: o.MemPerCpu = None,
    time_: Annotated[str | None, typer.Option("-t", "--time", help="Time limit.")] = None,
    job_name: o.JobName = None, output: o.Output = None, error: o.Error = None, input_: o.Input = None,
    partition: o.Partition = None, account: o.Account = None, chdir: o.Chdir = None,
    exclusive: o.Exclusive = False, export: o.Export = None, nodelist: o.Nodelist = None,
    exclude: o.Exclude = None, constraint: o.Constraint = None, open_mode: o.OpenMode = None,
    comment: o.Comment = None, begin: o.Begin = None, dependency: o.Dependency = None, hold: o.Hold = False,
    nice: o.Nice = None, reservation: o.Reservation = None, signal: o.Signal = None, quiet: o.Quiet = False,
    cpu_freq: o.CpuFreq = None, power_fit: o.PowerFit = False, profile: o.Profile = None,
    acctg_freq: o.AcctgFreq = None,
    verbose: o.Verbose = 0,
    wrap: Annotated[str | None, typer.Option("--wrap", help="Wrap a command in a sh script.")] = None,
    parsable: Annotated[bool, typer.Option("--parsable", help="Print only the job id.")] = False,
    array: Annotated[str | None, typer.Option("-a", "--array", help="Job array indexes, e.g. 0-15%4.")] = None,
    wckey: Annotated[str | None, typer.Option("--wckey", help="Workload characterization key.")] = None,
    requeue: Annotated[bool | None, typer.Option("--requeue/--no-requeue", help="Requeue on node failure.")]
    = None,
    wait: Annotated[bool, typer.Option("-W", "--wait", help="Wait for the job to end; exit with its code.")]
    = False,
) -> None:
    """Submit a batch script to wattsched."""
    opts: dict[str, Any] = dict(ctx.params)
    opts["time"], opts["input"] = opts.pop("time_"), opts.pop("input_")
    if wrap is not None:
        if script is not None:
            raise CLIError("script argument not permitted with --wrap option")
        text = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{wrap}\n"
        default_name = "wrap"
        command = "(null)"
    elif script is None or script == "-":
        text = script_text(sys.stdin.buffer.read(MAX_SCRIPT_BYTES + 1))
        default_name = "sbatch"
        command = "(null)"
    else:
        try:
            with open(script, "rb") as handle:
                text = script_text(handle.read(MAX_SCRIPT_BYTES + 1))
        except OSError as exc:
            raise CLIError(f"Unable to open file {script}") from exc
        default_name = os.path.basename(script)
        command = os.path.abspath(script)
    _merge_directives(ctx, opts, directives(text))
    body = o.submission(opts, script=text, argv=list(opts.get("script_args") or []),
                        name=opts.get("job_name") or default_name, array=opts.get("array") or "",
                        wckey=opts.get("wckey") or "", requeue=opts.get("requeue"), command=command)
    client = Client()
    try:
        reply = client.request("POST", "/v1/jobs", body)
    except CLIError as exc:
        raise CLIError(f"Batch job submission failed: {exc}") from exc
    job_id = reply["job_id"]
    if opts.get("parsable"):
        print(job_id)
    elif not opts.get("quiet"):
        print(f"Submitted batch job {job_id}")
    if opts.get("wait"):
        raise typer.Exit(_wait(client, job_id))


def _merge_directives(ctx: typer.Context, opts: dict[str, Any], args: list[str]) -> None:
    """Command-line options win over #SBATCH directives, as in Slurm."""
    if not args:
        return
    command = ctx.command
    try:
        sub = command.make_context("sbatch", list(args), resilient_parsing=False)
    except Exception as exc:  # typer's bundled click raises its own UsageError class
        if not hasattr(exc, "format_message"):
            raise
        raise CLIError(f"Invalid #SBATCH directive: {exc.format_message()}") from exc
    if sub.params.get("script") is not None:
        raise CLIError(f"Invalid #SBATCH directive: unexpected argument '{sub.params['script']}'")
    for name, value in sub.params.items():
        if name in ("script", "script_args"):
            continue
        key = {"time_": "time", "input_": "input"}.get(name, name)
        from_cli = ctx.get_parameter_source(name)
        from_directive = sub.get_parameter_source(name)
        # typer ships its own click, so compare the sources by name
        if from_cli is not None and from_cli.name == "DEFAULT" and from_directive.name != "DEFAULT":
            opts[key] = value


def _wait(client: Client, job_id: int) -> int:
    """sbatch --wait: poll until the job (every task of an array) ends; its highest exit code."""
    while True:
        jobs = client.request("GET", "/v1/jobs", params={"job": [str(job_id)]})["jobs"]
        if jobs and all(j["state"] in TERMINAL for j in jobs):
            return max((j["exit_code"] or (1 if j["state"] != "COMPLETED" else 0)) for j in jobs)
        time.sleep(0.5)


def main() -> None:
    try:
        app(prog_name="sbatch")
    except CLIError as exc:
        die("sbatch", str(exc))

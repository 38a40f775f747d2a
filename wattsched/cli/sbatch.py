"""sbatch: submit a batch script, with #SBATCH directives and Slurm's options."""

from __future__ import annotations

import os
import sys
import time

from wattsched.cli import jobopts as o
from wattsched.cli.common import Client, CLIError
from wattsched.cli.options import Command, run

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE"}


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
        import shlex  # only for scripts with directives: shlex (with re) costs ~8 ms to import

        try:
            args.extend(shlex.split(body))
        except ValueError as exc:
            raise CLIError(f"Invalid #SBATCH directive at line {lineno}: {exc}") from exc
    return args


USAGE = "[OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]"
COMMAND = Command("sbatch", USAGE, o.job_options("sbatch"), stop_at_operand=True,
                  operand_usage="executable [args...]")


def sbatch(argv: list[str]) -> int:
    """Submit a batch script to wattsched; the exit code (of the job under --wait)."""
    opts, operands = COMMAND.parse(argv)
    script = operands[0] if operands else None
    wrap = opts.get("wrap")
    if wrap is not None:
        if script is not None:
            raise CLIError("script argument not permitted with --wrap option")
        text = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{wrap}\n"
        default_name, command = "wrap", "(null)"
    elif script is None or script == "-":
        text = script_text(sys.stdin.buffer.read(MAX_SCRIPT_BYTES + 1))
        default_name, command = "sbatch", "(null)"
    else:
        try:
            with open(script, "rb") as handle:
                text = script_text(handle.read(MAX_SCRIPT_BYTES + 1))
        except OSError as exc:
            raise CLIError(f"Unable to open file {script}") from exc
        default_name, command = os.path.basename(script), os.path.abspath(script)
    from_script: dict = {}
    found = directives(text)
    if found:
        from_script, extra = COMMAND.parse(found, context="directive")
        if extra:
            raise CLIError(f"Invalid #SBATCH directive: unexpected argument '{extra[0]}'")
    # as Slurm: the command line over the input environment variables over the #SBATCH lines
    opts = {**from_script, **COMMAND.from_environment(o.INPUT_VARIABLES["sbatch"]), **opts}
    if opts.get("verbose"):
        sys.stderr.write(COMMAND.defined_options(opts))
    client = Client.for_options(opts)
    body = o.submission(opts, script=text, argv=operands[1:], name=opts.get("job_name") or default_name,
                        array=opts.get("array") or "",
                        requeue=opts.get("requeue"), command=command)
    if opts.get("test_only"):
        return o.will_run(client, body, "sbatch")
    try:
        reply = client.request("POST", "/v1/jobs", body)
    except CLIError as exc:
        raise CLIError(f"Batch job submission failed: {exc}") from exc
    job_id = reply["job_id"]
    if opts.get("parsable"):
        print(f"{job_id};{client.config.cluster_name}" if opts.get("clusters") else job_id)
    elif not opts.get("quiet"):
        print(f"Submitted batch job {job_id}")
    return _wait(client, job_id) if opts.get("wait") else 0


def _wait(client: Client, job_id: int) -> int:
    """sbatch --wait: poll until the job (every task of an array) ends; its highest exit code."""
    while True:
        jobs = client.request("GET", "/v1/jobs", params={"job": [str(job_id)]})["jobs"]
        if jobs and all(j["state"] in TERMINAL for j in jobs):
            return max((j["exit_code"] or (1 if j["state"] != "COMPLETED" else 0)) for j in jobs)
        time.sleep(0.5)


def main() -> None:
    run("sbatch", lambda: sbatch(sys.argv[1:]))

"""salloc: obtain an allocation, run a command (by default the user's shell) with SLURM_JOB_ID and
the rest of the job's environment set, and release the allocation when it exits.

The command runs here, on the submit host, as in Slurm: ``srun`` inside it starts steps in the
allocation. If the allocation ends first (scancel, its time limit), the command's process group
gets SIGHUP, then SIGKILL after a few seconds, and salloc says the allocation was revoked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from wattsched.cli import jobopts as o
from wattsched.cli.common import Client, CLIError
from wattsched.cli.options import Command, run
from wattsched.cli.srun import allocate, request_body

COMMAND = Command("salloc", "[OPTIONS(0)...] [ : [OPTIONS(N)...]] [command(0) [args(0)...]]",
                  o.job_options("salloc"), stop_at_operand=True, operand_usage="[command [args...]]")
# what the step-side variables of the batch environment mean on a node: not set by salloc
_NODE_ONLY = {"SLURMD_NODENAME", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID",
              "SLURM_GTIDS", "SLURM_CPUS_ON_NODE"}


def default_command() -> list[str]:
    """The user's shell (Slurm's default when no SallocDefaultCommand is set)."""
    import pwd

    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    return [os.environ.get("SHELL") or shell or "/bin/sh"]


def salloc(argv: list[str]) -> int:
    """Allocate, run the command, release; the command's exit code."""
    opts, command = COMMAND.parse(argv)
    opts = {**COMMAND.from_environment(o.INPUT_VARIABLES["salloc"]), **opts}  # the command line wins
    if opts.get("verbose"):
        sys.stderr.write(COMMAND.defined_options(opts))
    quiet = bool(opts.get("quiet"))
    client = Client.for_options(opts)
    command = command or default_command()
    if opts.get("test_only"):  # the allocation's plan: none is made
        return o.will_run(client, request_body(opts, command, False), "salloc")
    job_id = allocate(client, opts, "immediate" in opts, quiet, prog="salloc", command=command)
    if opts.get("no_shell"):  # the allocation stays, for steps and scancel, until its time limit
        return 0
    env = dict(os.environ)
    try:
        slurm_env = client.request("GET", f"/v1/jobs/{job_id}/environment")["environment"]
    except CLIError:
        client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(job_id)]})
        raise
    env.update({k: v for k, v in slurm_env.items() if k not in _NODE_ONLY})
    env["SLURM_JOB_ID"] = env["SLURM_JOBID"] = str(job_id)
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        _release(client, job_id, 1, quiet)
        raise CLIError(f"Unable to exec command \"{command[0]}\": {exc.strerror}") from exc
    revoked = threading.Event()
    threading.Thread(target=_watch, args=(client, job_id, child, revoked), daemon=True).start()
    # the command owns the terminal: Ctrl-C is for it, not for salloc
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    code = status if status >= 0 else 128 - status
    if revoked.is_set():
        sys.stderr.write(f"salloc: Job allocation {job_id} has been revoked.\n")
    else:
        _release(client, job_id, code, quiet)
    return code


def _release(client: Client, job_id: int, code: int, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(f"salloc: Relinquishing job allocation {job_id}\n")
    try:
        client.request("POST", f"/v1/jobs/{job_id}/allocation/complete",
                       {"exit_code": min(max(code, 0), 255), "term_signal": 0})
    except CLIError as exc:
        sys.stderr.write(f"salloc: error: releasing allocation {job_id}: {exc}\n")


def _watch(client: Client, job_id: int, child: subprocess.Popen, revoked: threading.Event) -> None:
    """End the command when the allocation ends under it (scancel, time limit, node failure)."""
    while child.poll() is None:
        time.sleep(1.0)
        try:
            jobs = client.request("GET", "/v1/jobs", params={"job": [str(job_id)]})["jobs"]
        except CLIError:
            continue  # the controller may be restarting: the allocation is still ours
        if jobs and jobs[0]["state"] in ("RUNNING", "CONFIGURING"):
            continue
        revoked.set()
        for sig, grace in ((signal.SIGHUP, 0.0), (signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            deadline = time.monotonic() + grace
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if child.poll() is not None:
                return
            try:
                child.send_signal(sig)
            except ProcessLookupError:
                return
        return


def main() -> None:
    # Ctrl-C ends the step and gives the allocation back even where a shell started us with SIGINT
    # ignored (a background job of a script): Slurm's salloc sets its own handler too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run("salloc", lambda: salloc(sys.argv[1:]))

"""srun: run a parallel job step, inside an allocation or in a new one, streaming its output.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun asks the controller for a step,
then asks each node's agent to start that node's tasks and prints what they write, with
``-l`` labels. Outside one it first creates an allocation (an interactive job), waits for
it, runs step 0 in it and releases it with the step's exit code.
"""

from __future__ import annotations

import http.client
import json
import os
import signal as signal_mod
import sys
import threading
import time
import urllib.parse
from typing import Annotated, Any

import typer
from wattsched.cli import jobopts as o
from wattsched.cli.common import Client, CLIError, die

app = typer.Typer(add_completion=False)


class TaskStreams:
    """Collects task output from all nodes and prints it line by line, labelled with -l."""

    def __init__(self, label: bool, ntasks: int):
        self.label = label
        self.width = len(str(max(0, ntasks - 1)))
        self.lock = threading.Lock()
        self.exits: dict[int, tuple[int, int, float, int]] = {}
        self.errors: list[str] = []

    def write(self, task: int, fd_no: int, data: str) -> None:
        stream = sys.stdout if fd_no == 1 else sys.stderr
        if self.label:
            lines = data.splitlines(keepends=True)
            data = "".join(f"{task:>{self.width}}: {line}" for line in lines)
        with self.lock:
            stream.write(data)
            stream.flush()

    def pump(self, client: Client, placement: dict[str, Any], body: dict[str, Any]) -> None:
        url = urllib.parse.urlsplit(placement["agent_url"])
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=None)
        try:
            conn.request("POST", "/v1/steps/launch", json.dumps(body).encode(),
                         {"Authorization": f"Bearer {client.token()}", "Content-Type": "application/json"})
            reply = conn.getresponse()
            if reply.status != 200:
                detail = json.loads(reply.read() or b"{}").get("detail", reply.reason)
                self.errors.append(f"{placement['node']}: {detail}")
                return
            while line := reply.readline():
                msg = json.loads(line)
                if "exit" in msg:
                    self.exits[msg["task"]] = (msg["exit"], msg["signal"], msg["cpu"], msg["rss"])
                else:
                    self.write(msg["task"], msg["fd"], msg["data"])
        except (OSError, http.client.HTTPException) as exc:
            self.errors.append(f"{placement['node']}: {exc}")
        finally:
            conn.close()


@app.command(context_settings={"allow_interspersed_args": False, "help_option_names": ["--help"]})
def srun(
    ctx: typer.Context,
    command: Annotated[list[str], typer.Argument(help="Program and its arguments.")],
    nodes: o.Nodes = None, ntasks: o.Ntasks = None, ntasks_per_node: o.NtasksPerNode = None,
    cpus_per_task: o.CpusPerTask = None, mem: o.Mem = None, mem_per_cpu: o.MemPerCpu = None,
    time_: Annotated[str | None, typer.Option("-t", "--time", help="Time limit.")] = None,
    job_name: o.JobName = None, output: o.Output = None, error: o.Error = None,
    partition: o.Partition = None, account: o.Account = None, chdir: o.Chdir = None,
    exclusive: o.Exclusive = False, export: o.Export = None, nodelist: o.Nodelist = None,
    exclude: o.Exclude = None, constraint: o.Constraint = None, open_mode: o.OpenMode = None,
    comment: o.Comment = None, begin: o.Begin = None, dependency: o.Dependency = None, hold: o.Hold = False,
    nice: o.Nice = None, reservation: o.Reservation = None, signal: o.Signal = None, quiet: o.Quiet = False,
    cpu_freq: o.CpuFreq = None, power_fit: o.PowerFit = False, profile: o.Profile = None,
    acctg_freq: o.AcctgFreq = None,
    verbose: o.Verbose = 0,
    label: Annotated[bool, typer.Option("-l", "--label", help="Prefix output lines with the task id.")] = False,
    unbuffered: Annotated[bool, typer.Option("-u", "--unbuffered", help="Do not line-buffer output.")] = False,
    immediate: Annotated[bool, typer.Option("-I", "--immediate", help="Fail unless resources are free now.")]
    = False,
    jobid: Annotated[int | None, typer.Option("--jobid", help="Run in this existing allocation.")] = None,
) -> None:
    """Run a parallel job step."""
    opts: dict[str, Any] = dict(ctx.params)
    opts["time"] = opts.pop("time_")
    client = Client()
    inside = jobid or (int(os.environ["SLURM_JOB_ID"]) if os.environ.get("SLURM_JOB_ID") else None)
    own_job = None
    if inside is None:
        own_job = allocate(client, opts, immediate, quiet)
        job_id = own_job
    else:
        job_id = inside
    code = 1
    interrupted = False
    try:
        code = run_step(client, job_id, opts, command, label, unbuffered, own_job is not None)
    except KeyboardInterrupt:
        interrupted = True
        sys.stderr.write("srun: interrupted, terminating the job step\n")
        code = 128 + signal_mod.SIGINT
    finally:
        if own_job is not None:
            try:
                if interrupted:
                    client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(own_job)]})
                else:
                    client.request("POST", f"/v1/jobs/{own_job}/allocation/complete",
                                   {"exit_code": min(code, 255), "term_signal": 0})
            except CLIError as exc:
                sys.stderr.write(f"srun: error: releasing allocation {own_job}: {exc}\n")
    raise typer.Exit(code)


# what srun says before "queued and waiting" when the power cap holds a job back (seed 003)
POWER_MESSAGES = {"PowerNotAvail": "Required power not available now",
                  "PowerReserved": "Required power at least partially reserved"}


def allocate(client: Client, opts: dict[str, Any], immediate: bool, quiet: bool) -> int:
    name = opts.get("job_name") or os.path.basename(opts["command"][0])
    body = o.submission(opts, script=None, interactive=True, immediate=immediate, name=name,
                        command=" ".join(opts["command"]))
    try:
        reply = client.request("POST", "/v1/jobs", body)
    except CLIError as exc:
        raise CLIError(f"Unable to allocate resources: {exc}".replace(
            "Unable to allocate resources: Unable to allocate resources", "Unable to allocate resources")) from exc
    job_id = reply["job_id"]
    announced = False
    try:
        while True:
            job = client.request("GET", "/v1/jobs", params={"job": [str(job_id)]})["jobs"][0]
            if job["state"] == "RUNNING":
                break
            if job["state"] not in ("PENDING", "CONFIGURING"):  # CONFIGURING: its nodes are powering up
                raise CLIError(f"Job allocation {job_id} has been revoked.")
            if not announced and not quiet:
                why = POWER_MESSAGES.get(job["reason"])
                if why:
                    sys.stderr.write(f"srun: {why}\n")
                sys.stderr.write(f"srun: job {job_id} queued and waiting for resources\n")
                announced = True
            time.sleep(0.2)
    except KeyboardInterrupt:
        client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(job_id)]})
        sys.stderr.write(f"srun: Job allocation {job_id} has been revoked\n")
        raise typer.Exit(1) from None
    if announced and not quiet:
        sys.stderr.write(f"srun: job {job_id} has been allocated resources\n")
    return job_id


def run_step(client: Client, job_id: int, opts: dict[str, Any], command: list[str], label: bool,
             unbuffered: bool, new_allocation: bool) -> int:
    nodes_min, _ = o.node_range(opts.get("nodes"))
    req = {"name": opts.get("job_name") or os.path.basename(command[0]),
           "ntasks": opts.get("ntasks"), "nodes": nodes_min if opts.get("nodes") else None,
           "ntasks_per_node": opts.get("ntasks_per_node") or 0, "cpus_per_task": opts.get("cpus_per_task") or 1}
    if new_allocation:  # the allocation was sized for this step: use all of it
        req.update(ntasks=None, nodes=None, ntasks_per_node=0, cpus_per_task=1)
    step = client.request("POST", f"/v1/jobs/{job_id}/steps", req)
    env = o.job_environment(opts.get("export"))
    if new_allocation:
        env.update(step["job_environment"])
    streams = TaskStreams(label, step["ntasks"])
    work_dir = os.path.abspath(opts.get("chdir") or os.getcwd())
    threads = []
    for placement in step["placements"]:
        body = {"job_id": job_id, "step_id": step["step_id"], "node": placement["node"],
                "credential": step["credential"], "argv": command, "environment": env, "work_dir": work_dir,
                "label": label, "unbuffered": unbuffered, "output": opts.get("output") or "",
                "error": opts.get("error") or "", "open_mode": opts.get("open_mode") or "truncate"}
        thread = threading.Thread(target=streams.pump, args=(client, placement, body), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    for message in streams.errors:
        sys.stderr.write(f"srun: error: {message}\n")
    code, sig = 0, 0
    task_nodes = {t: p["node"] for p in step["placements"] for t in p["task_ids"]}
    for task, (exit_code, term_signal, _cpu, _rss) in sorted(streams.exits.items()):
        if exit_code or term_signal:
            what = f"Killed by signal {term_signal}" if term_signal else f"Exited with exit code {exit_code}"
            sys.stderr.write(f"srun: error: {task_nodes.get(task, '?')}: task {task}: {what}\n")
        code, sig = max(code, exit_code), max(sig, term_signal)
    if streams.errors or len(streams.exits) < step["ntasks"]:
        code = max(code, 1)
    done = {"exit_code": code, "term_signal": sig, "total_cpu_s": sum(e[2] for e in streams.exits.values()),
            "max_rss_kb": max((e[3] for e in streams.exits.values()), default=0)}
    client.request("POST", f"/v1/jobs/{job_id}/steps/{step['step_id']}/complete", done)
    return code if not sig else 128 + sig


def main() -> None:
    try:
        app(prog_name="srun")
    except CLIError as exc:
        die("srun", str(exc))

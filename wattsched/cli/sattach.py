"""sattach: attach to a running job step's standard I/O, as Slurm's sattach: the output its tasks
write from now on comes here (labelled with -l, one task's with the filters), what is typed here
goes to its tasks that read srun's standard input, until the step ends (Ctrl-C detaches, the step
runs on). --layout prints where the tasks run and attaches to nothing.

The controller hands the job's owner (or an administrator) the step's credential and layout; each
node's agent streams its tasks' output to whoever shows that credential.
"""

from __future__ import annotations

import base64
import os
import sys
import threading

from wattsched import hostlist, jsonwire
from wattsched.cli.common import Client, CLIError, exchange, host_port, http_request, stream
from wattsched.cli.options import NO, REQ, Command, Opt, refused, run, standard

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any

COMMAND = Command("sattach", "[options] <jobid.stepid>", [
    Opt(None, "input-filter", REQ, "send stdin to only the specified task", metavar="taskid", kind="int"),
    Opt(None, "output-filter", REQ, "only print stdout from the specified task", metavar="taskid", kind="int"),
    Opt(None, "error-filter", REQ, "only print stderr from the specified task", metavar="taskid", kind="int"),
    Opt("l", "label", NO, "prepend task number to lines of stdout & stderr"),
    Opt(None, "layout", NO, "print task layout info and exit (does not attach to tasks)"),
    Opt("Q", "quiet", NO, "quiet mode (suppress informational messages)"),
    Opt("v", "verbose", NO, "verbose mode (multiple -v's increase verbosity)", kind="count"),
    refused(None, "pty", NO, "a step's terminal is srun's (srun --pty)"),
    "Help options:",
    *standard(None),
], help_usage="[options] <jobid.stepid>")


def sattach(argv: list[str]) -> int:
    opts, operands = COMMAND.parse(argv)
    if len(operands) != 1 or "." not in operands[0]:
        raise CLIError("you must specify a job step id: <jobid.stepid>")
    job, _, step = operands[0].partition(".")
    if not (job.isdigit() and step.isdigit()):
        raise CLIError(f"Invalid job step id: {operands[0]}")
    client = Client()
    reply = client.request("GET", f"/v1/jobs/{job}/steps/{step}/attach")
    placements = reply["placements"]
    if opts.get("layout"):
        print(layout(reply))
        return 0
    filters = {1: opts.get("output_filter"), 2: opts.get("error_filter")}
    width = len(str(max(0, reply["ntasks"] - 1)))
    lock = threading.Lock()
    threads = [threading.Thread(target=_watch, args=(client, reply, p, filters, bool(opts.get("label")), width, lock),
                                daemon=True) for p in placements]
    for thread in threads:
        thread.start()
    wanted = opts.get("input_filter")
    readers = [p for p in placements if wanted is None or wanted in p["task_ids"]]
    threading.Thread(target=_feed, args=(client, reply, readers), daemon=True).start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:  # detach: the step runs on
        return 0
    return 0


def layout(reply: dict[str, Any]) -> str:
    """Slurm's --layout: the step's tasks by node."""
    nodes = [p["node"] for p in reply["placements"]]
    lines = ["Job step layout:", f"\t{reply['ntasks']} tasks, {len(nodes)} nodes ({hostlist.compress(nodes)})", ""]
    lines += [f"\tNode {i} ({p['node']}), {len(p['task_ids'])} task(s): " + "".join(f"{t} " for t in p["task_ids"])
              for i, p in enumerate(reply["placements"])]
    return "\n".join(lines)


def _watch(client: Client, reply: dict[str, Any], placement: dict[str, Any], filters: dict[int, int | None],
           label: bool, width: int, lock: threading.Lock) -> None:
    """One node's tasks' output, as it comes, until their step ends there."""
    host, port = host_port(placement["agent_url"])
    body = {"job_id": reply["job_id"], "step_id": reply["step_id"], "node": placement["node"],
            "credential": reply["credential"]}
    try:
        for line in stream(host, port, http_request("POST", host, port, "/v1/steps/attach", client.token(), body)):
            msg = jsonwire.loads(line)
            task, fd_no = msg.get("task"), msg.get("fd")
            if fd_no not in (1, 2) or filters[fd_no] not in (None, task):
                continue
            data = msg["data"]
            if label:
                data = "".join(f"{task:>{width}}: {part}" for part in data.splitlines(keepends=True))
            out = sys.stdout if fd_no == 1 else sys.stderr
            with lock:
                out.write(data)
                out.flush()
    except (CLIError, OSError, ValueError) as exc:
        with lock:
            sys.stderr.write(f"sattach: error: {placement['node']}: {exc}\n")


def _feed(client: Client, reply: dict[str, Any], placements: list[dict[str, Any]]) -> None:
    """What is typed here, to the step's tasks that read srun's standard input on those nodes (its
    end only detaches: the tasks' input stays open)."""
    while True:
        try:
            chunk = os.read(0, 65536)
        except OSError:
            return
        if not chunk:
            return
        for placement in placements:
            host, port = host_port(placement["agent_url"])
            body = {"job_id": reply["job_id"], "step_id": reply["step_id"], "node": placement["node"],
                    "credential": reply["credential"], "data": base64.b64encode(chunk).decode(), "eof": False}
            try:
                exchange(host, port, http_request("POST", host, port, "/v1/steps/stdin", client.token(), body), 60)
            except OSError as exc:
                sys.stderr.write(f"sattach: error: {placement['node']}: {exc}\n")


def main() -> None:
    run("sattach", lambda: sattach(sys.argv[1:]))

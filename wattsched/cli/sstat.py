"""sstat: what running job steps use so far, as Slurm's: each step's tasks as their nodes' agents
read them now (CPU time, resident and virtual memory, page faults, disk I/O, their pids), with the
step's energy so far and CPU frequency from the controller; Slurm's 52 fields.

As Slurm's sstat, ``-j JOB`` shows the job's first srun step, ``-a`` every step (the batch script's
too), ``-j JOB.STEP`` that one; ``-i`` lists the pids of each step's tasks by node. The controller
hands the job's user (or an administrator) the step's nodes and a short-lived credential; each
node's agent reads the tasks' processes (wattsched.noded.procstat).
"""

from __future__ import annotations

import sys

from wattsched import hostlist, jsonwire
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, exchange, host_port, http_request, print_json, split_list
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, refused, run, standard
from wattsched.cli.sacct import CONVERT, freq_text, req_freq, size_text
from wattsched.cli.sacct import FIELDS as SACCT
from wattsched.usage import summarize

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_FIELDS = ("JobID,MaxRSS,MaxRSSNode,AveCPU,NTasks,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,"
                  "ConsumedEnergy")
PID_FIELDS = "JobID,Nodelist,Pids"
Row = dict  # a step's row: the controller's figures and its tasks' summary (wattsched.usage) together


def _sacct(name: str) -> Callable[[Row], str]:
    """A usage field as sacct prints a step's (the same figures, summed the same way)."""
    show = SACCT[name][1]
    return lambda r: show(r, r)


def _req_freq(part: str) -> Callable[[Row], str]:
    return lambda r: req_freq(r["cpu_freq"], r["cpu_freq_khz"], part)


# the fields only a live step has, or that sstat prints otherwise than sacct
_OWN: dict[str, Callable[[Row], str]] = {
    "AveCPUFreq": lambda r: freq_text(r["ave_cpu_freq_khz"]) if r["ave_cpu_freq_khz"] else "0",
    "AvePages": lambda r: str(round(r["pages_total"] / max(1, r["ntasks"]))),
    "AveVMSize": lambda r: size_text(r["ave_vsize_kb"]),
    "ConsumedEnergy": lambda r: fmt.num_unit(r["consumed_energy_j"]),
    "ConsumedEnergyRaw": lambda r: str(round(r["consumed_energy_j"] or 0)),
    "JobID": lambda r: r["display_id"],
    "MaxPages": lambda r: str(r["max_pages"]),
    "MaxPagesNode": lambda r: r["max_pages_node"],
    "MaxPagesTask": lambda r: str(r["max_pages_task"]),
    "MaxVMSize": lambda r: size_text(r["max_vsize_kb"]),
    "MaxVMSizeNode": lambda r: r["max_vsize_node"],
    "MaxVMSizeTask": lambda r: str(r["max_vsize_task"]),
    "Nodelist": lambda r: r["node_list"],
    "NTasks": lambda r: str(r["ntasks"]),
    "Pids": lambda r: ",".join(map(str, r["pids"])),
    "ReqCPUFreq": _req_freq("min"), "ReqCPUFreqMin": _req_freq("min"),
    "ReqCPUFreqMax": _req_freq("max"), "ReqCPUFreqGov": _req_freq("gov"),
}
# Slurm's sstat fields in its order (sstat -e lists them so) with their widths; the rest are sacct's
_ORDER = (("AveCPU", 10), ("AveCPUFreq", 10), ("AveDiskRead", 12), ("AveDiskWrite", 12), ("AvePages", 10),
          ("AveRSS", 10), ("AveVMSize", 10), ("ConsumedEnergy", 14), ("ConsumedEnergyRaw", 17), ("JobID", -12),
          ("MaxDiskRead", 12), ("MaxDiskReadNode", 15), ("MaxDiskReadTask", 15), ("MaxDiskWrite", 12),
          ("MaxDiskWriteNode", 16), ("MaxDiskWriteTask", 16), ("MaxPages", 8), ("MaxPagesNode", 12),
          ("MaxPagesTask", 14), ("MaxRSS", 10), ("MaxRSSNode", 10), ("MaxRSSTask", 10), ("MaxVMSize", 10),
          ("MaxVMSizeNode", 14), ("MaxVMSizeTask", 14), ("MinCPU", 10), ("MinCPUNode", 10), ("MinCPUTask", 10),
          ("Nodelist", 20), ("NTasks", 8), ("Pids", 20), ("ReqCPUFreq", 10), ("ReqCPUFreqMin", 13),
          ("ReqCPUFreqMax", 13), ("ReqCPUFreqGov", 13), ("TRESUsageInAve", 14), ("TRESUsageInMax", 14),
          ("TRESUsageInMaxNode", 18), ("TRESUsageInMaxTask", 18), ("TRESUsageInMin", 14), ("TRESUsageInMinNode", 18),
          ("TRESUsageInMinTask", 18), ("TRESUsageInTot", 14), ("TRESUsageOutAve", 15), ("TRESUsageOutMax", 15),
          ("TRESUsageOutMaxNode", 19), ("TRESUsageOutMaxTask", 19), ("TRESUsageOutMin", 15),
          ("TRESUsageOutMinNode", 19), ("TRESUsageOutMinTask", 19), ("TRESUsageOutTot", 15))
FIELDS: dict[str, tuple[int, Callable[[Row], str]]] = {
    name: (width, _OWN[name] if name in _OWN else _sacct(name)) for name, width in _ORDER}

COMMAND = Command("sstat", "[options] -j <job(.stepid)>\n\tUse --help for help", [
    Opt("a", "allsteps", NO, "print all steps for the given job(s) when no step is specified"),
    Opt("e", "helpformat", NO, "Print a list of fields that can be specified with the '--format' option"),
    Opt("i", "pidformat", NO, "Predefined format to list the pids running for each job step"),
    Opt("j", "jobs", REQ, "Format is <job(.step)>. Stat this job step or comma-separated list of job steps.",
        metavar="job(.step)", kind="list"),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("n", "noheader", NO, "No header will be added to the beginning of output."),
    Opt(None, "noconvert", NO, "Don't convert units from their original type"),
    Opt("o", "format", REQ, "Comma separated list of fields.", metavar="field_list"),
    Opt(None, "fields", REQ, "Same as --format", metavar="field_list", dest="format"),
    Opt("p", "parsable", NO, "output will be '|' delimited with a '|' at the end"),
    Opt("P", "parsable2", NO, "output will be '|' delimited without a '|' at the end"),
    Opt("v", "verbose", NO, "Primarily for debugging purposes", kind="count"),
    Opt(None, "units", REQ, "Display values in specified unit type.", metavar="[KMGTP]"),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    *standard(),
], option_list=True)


def _help_fields() -> str:
    """-e: the fields in Slurm's order, four to a line, as its sstat lists them."""
    names = list(FIELDS)
    return "\n".join(" ".join(f"{name:<19}" for name in names[i:i + 4]) for i in range(0, len(names), 4))


def _tasks(client: Client, step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's tasks, as each of its nodes' agents reads them now (an agent that does not answer
    leaves its nodes' tasks out, said on standard error)."""
    by_agent: dict[str, list[str]] = {}
    for node in step["nodes"]:
        if node["agent_url"]:
            by_agent.setdefault(node["agent_url"], []).append(node["node"])
    tasks: list[dict[str, Any]] = []
    for url, nodes in by_agent.items():
        host, port = host_port(url)
        body = {"job_id": step["job_id"], "steps": [step["step_id"]], "nodes": nodes,
                "credential": step["credential"]}
        try:
            status, data = exchange(host, port, http_request("POST", host, port, "/v1/steps/stat", client.token(),
                                                              body), 30)
        except OSError as exc:
            sys.stderr.write(f"sstat: error: {','.join(nodes)}: {exc}\n")
            continue
        if status != 200:
            sys.stderr.write(f"sstat: error: {','.join(nodes)}: {data.decode(errors='replace')[:200]}\n")
            continue
        tasks.extend(jsonwire.loads(data)["tasks"])
    return tasks


def row(step: dict[str, Any], tasks: list[dict[str, Any]]) -> Row:
    """The step's row: the controller's figures, its tasks' summed as Slurm sums them (totals, averages
    over tasks, maxima and minima with their node and task), virtual memory and page faults too."""
    summary = summarize(tasks)
    top_vsize = max(tasks, key=lambda t: t["vsize_kb"], default=None)
    top_pages = max(tasks, key=lambda t: t["pages"], default=None)
    ntasks = len(tasks) or step["ntasks"]
    return {**step, **summary, "ntasks": ntasks, "node_list": hostlist.compress(n["node"] for n in step["nodes"]),
            "pids": [pid for t in tasks for pid in t["pids"]],
            "max_vsize_kb": top_vsize["vsize_kb"] if top_vsize else 0,
            "max_vsize_node": top_vsize["node"] if top_vsize else "",
            "max_vsize_task": top_vsize["task"] if top_vsize else 0,
            "ave_vsize_kb": round(sum(t["vsize_kb"] for t in tasks) / ntasks) if tasks else 0,
            "max_pages_node": top_pages["node"] if top_pages else "",
            "max_pages_task": top_pages["task"] if top_pages else 0,
            "pages_total": sum(t["pages"] for t in tasks)}


def sstat(argv: list[str]) -> int:
    """Status of running job steps: their tasks' usage so far, energy and CPU frequency."""
    opts, job_args = COMMAND.parse(argv)
    if opts.get("helpformat"):
        print(_help_fields())
        return 0
    refs = split_list(opts.get("jobs")) + list(job_args or [])
    if not refs:
        raise CLIError("You didn't give me any jobs to stat.")
    CONVERT.update(units=(opts.get("units") or "").upper()[:1] or None, noconvert=bool(opts.get("noconvert")))
    client = Client()
    rows: list[Row] = []
    for ref in refs:
        job, _, step_id = ref.partition(".")
        found = client.request("GET", f"/v1/jobs/{job}/steps/stat",
                               params={"step": step_id or None, "all_steps": "true" if opts.get("allsteps") else None}
                               )["steps"]
        if not found:  # Slurm's words, and as Slurm's sstat it goes on with the others
            sys.stderr.write(f"sstat: error: StepId={job}.{step_id} not found running.\n" if step_id else
                             f"sstat: error: No steps running for job {job}\n")
        rows.extend(row(step, _tasks(client, step)) for step in found)
    if "json" in opts:
        print_json({"steps": [{key: value for key, value in r.items() if key != "credential"} for r in rows]})
        return 0
    try:
        spec = opts.get("format") or (PID_FIELDS if opts.get("pidformat") else DEFAULT_FIELDS)
        columns = fmt.parse_fields(spec, {name: width for name, (width, _) in FIELDS.items()})
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    records = [{name: FIELDS[name][1](r) for name, _ in columns} for r in rows]
    parsable = bool(opts.get("parsable"))
    delimiter = "|" if parsable or opts.get("parsable2") else None
    for line in fmt.format_table(records, columns, delimiter, trailing=parsable, header=not opts.get("noheader")):
        print(line)
    return 0


def main() -> None:
    run("sstat", lambda: sstat(sys.argv[1:]))

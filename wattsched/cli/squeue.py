"""squeue: the queue, in Slurm's formats (-o %-codes, -O fields, -l, --start, --json)."""

from __future__ import annotations

import os
import sys
import time

from wattsched import arrayfold
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, every, json_text, split_list, wants_json
from wattsched.cli.jobfields import BY_NAME, FIELDS, KEYS
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %R"
DEFAULT_STATES = ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "STOPPED", "COMPLETING")


COMMAND = Command("squeue", "[-A account] [--clusters names] [-i seconds] [--job jobid] [-n name] [-o format] "
                  "[--only-job-state] [-p partitions] [--qos qos] [--reservation reservation] [--sort fields] "
                  "[--start] [--step step_id] [-t states] [-u user_name] [--usage] [-L licenses] [-w nodes] "
                  "[--federation] [--local] [--sibling] [--expand-patterns] [--json=data_parser] "
                  "[-ahjlrsv]", [
    Opt("A", "account", REQ, "comma separated list of accounts to view, default is all accounts",
        metavar="accounts", kind="list"),
    Opt("a", "all", NO, "display jobs in hidden partitions"),
    Opt(None, "only-job-state", NO, "only request job states (the state filter holds with -j too)"),
    Opt("r", "array", NO, "display one job array element per line"),
    Opt("h", "noheader", NO, "no headers on output"),
    Opt("i", "iterate", REQ, "specify an interation period", metavar="seconds", kind="int"),
    Opt("j", "jobs", OPT, "comma separated list of jobs IDs to view, default is all", metavar="job_id",
        kind="list", const=""),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("l", "long", NO, "long report"),
    Opt("L", "licenses", REQ, "comma separated list of license names to view", metavar="licenses",
        kind="list"),
    Opt("M", "clusters", REQ, "cluster(s) to issue commands to (this one, or all)", metavar="cluster_name"),
    Opt(None, "me", NO, "equivalent to --user=<my username>"),
    Opt("n", "name", REQ, "comma separated list of job names to view", metavar="job_name", kind="list"),
    Opt("o", "format", REQ, "format specification", metavar="format"),
    Opt("O", "Format", REQ, "format specification", metavar="format"),
    Opt("p", "partition", REQ, "comma separated list of partitions to view, default is all partitions",
        metavar="partitions", kind="list"),
    Opt("q", "qos", REQ, "comma separated list of qos's to view, default is all qos's", metavar="qos",
        kind="list"),
    Opt("R", "reservation", REQ, "reservation to view, default is all", metavar="name"),
    Opt("S", "sort", REQ, "comma separated list of fields to sort on", metavar="fields"),
    Opt(None, "start", NO, "print expected start times of pending jobs"),
    Opt("t", "states", REQ, "comma separated list of states to view, default is pending and running, "
        "'all' reports all states", metavar="states", kind="list"),
    Opt("u", "user", REQ, "comma separated list of users to view", metavar="user_name", kind="list"),
    Opt("v", "verbose", NO, "verbosity level", kind="count"),
    Opt("w", "nodelist", REQ, "list of nodes to view, default is all nodes", metavar="hostlist", kind="list"),
    ignored(None, "array-unique", NO), ignored(None, "federation", NO), ignored(None, "hide", NO),
    ignored(None, "local", NO), ignored(None, "noconvert", NO), ignored("P", "priority", NO),
    ignored(None, "sibling", NO), ignored(None, "expand-patterns", NO),
    Opt("s", "steps", OPT, "comma separated list of job steps to view, default is all", metavar="step_id",
        kind="list", const=""),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    "Help options:",
    *standard(None),
], help_usage="[OPTIONS]")

# raw values to sort on (-S) where the printed one would sort wrongly (numbers, times)
SORT_KEYS = {"i": "job_id", "A": "job_id", "F": "array_job_id", "Q": "priority", "p": "priority",
             "D": "num_nodes", "C": "num_cpus", "M": "run_time_s", "V": "submit_time", "S": "start_time",
             "e": "end_time", "U": "uid", "G": "gid", "y": "nice", "l": "time_limit_min"}


def squeue(argv: list[str]) -> int:
    """Show the jobs in the queue (every -i seconds until interrupted)."""
    opts, operands = COMMAND.parse(argv)
    for optional in ("jobs", "steps"):
        if opts.get(optional) and not any(opts[optional]) and operands:
            # -j and -s take an optional argument, so "-j 12" leaves 12 an operand: squeue takes it as the list
            opts[optional] = [operands.pop(0)]
    if operands:
        COMMAND.fail(f"unrecognized argument '{operands[0]}'")
    if "jobs" in opts and "steps" in opts:
        sys.stderr.write("squeue: error: Incompatible options --jobs and --steps\n")
        return 1
    client = Client.for_options(opts)
    shown = render_steps if "steps" in opts else render
    return every(opts.get("iterate"), lambda: shown(client, opts))


def render_steps(client: Client, opts: dict) -> str:
    """squeue -s: the running steps (a list of JOB.STEP or JOB narrows them), sorted by partition
    and step id as Slurm's default, in Slurm's step formats."""
    from wattsched.cli import stepfields

    wanted = split_list(opts.get("steps"))
    params = {"job": sorted({w.partition(".")[0] for w in wanted}) or None, "detail": "true",
              "user": split_list(opts.get("user")) or None, "partition": split_list(opts.get("partition")) or None}
    reply = client.request("GET", "/v1/jobs", params=params)
    steps = [s for s in stepfields.records(reply["jobs"], client.config.cluster_name)
             if not wanted or f"{s['job_id']}.{s['step_id']}" in wanted or str(s["job_id"]) in wanted]
    steps.sort(key=lambda s: (s["partition"], s["job_id"], _step_rank(s["step_id"])))
    fields = opts.get("Format")
    spec = opts.get("format") or (fmt.format_from_fields(fields, stepfields.BY_NAME, "job step") if fields else None) \
        or os.environ.get("SQUEUE_FORMAT") or stepfields.DEFAULT
    parts = fmt.parse_format(spec)
    now = reply["time"]
    lines = [] if opts.get("noheader") else [fmt.render_header(parts, stepfields.TITLES)]
    lines.extend(fmt.render_rows(parts, stepfields.value_of, steps, now))
    return "\n".join(lines)


def render(client: Client, opts: dict) -> str:
    from wattsched import states as st

    wanted_states: list[str] = []
    for item in split_list(opts.get("states")):
        if item.lower() == "all":
            wanted_states = list(st.JOB_STATES)
            break
        try:
            wanted_states.append(st.parse_job_state(item))
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
    if opts.get("start"):
        wanted_states = ["PENDING"]
    user_list = split_list(opts.get("user"))
    if opts.get("me"):
        from wattsched.auth import username

        user_list.append(username(os.getuid()))
    job_list = split_list(opts.get("jobs"))
    # -j shows its jobs in every state, unless only their states are asked for (Slurm 24.05's
    # --only-job-state, which keeps the default filter)
    active = wanted_states or (list(st.JOB_STATES) if job_list and not opts.get("only_job_state")
                               else list(DEFAULT_STATES))
    params = {"user": user_list or None, "partition": split_list(opts.get("partition")) or None,
              "job": job_list or None, "state": active, "columns": "true"}
    parts: list = []
    if wants_json(opts):  # the data_parser's fields need the whole record (its GPUs' numbers, say)
        params["detail"] = "true"
    else:
        fields = opts.get("Format")
        spec = opts.get("format") or (fmt.format_from_fields(fields, BY_NAME, "job") if fields else None) or \
            os.environ.get("SQUEUE_FORMAT") or (START if opts.get("start") else LONG if opts.get("long") else DEFAULT)
        parts = fmt.parse_format(spec)
        # only the record's keys this listing reads: 2,000 jobs' 54 keys were most of squeue's time
        params["key"] = sorted(_keys(parts, opts))
    selected = _selector(opts)
    # the controller folds the arrays' pending tasks where squeue would fold what it fetched in the
    # same order (100,000 pending tasks in 10 arrays: 31 records on the wire, not 100,000)
    folded = not opts.get("array") and not opts.get("sort") and selected is None and not wants_json(opts)
    if folded:
        params["fold"] = "true"
    reply = client.request("GET", "/v1/jobs", params=params)
    now = reply["time"]
    if "columns" in reply:
        names = reply["columns"]
        reply["jobs"] = [dict(zip(names, row, strict=True)) for row in reply["rows"]]
    rows = [j for j in reply["jobs"] if j["state"] in active and (selected is None or selected(j))]
    rows.sort(key=lambda j: (j["state"] == "PENDING", -j["priority"]
                             if j["state"] == "PENDING" else 0, j["job_id"]))
    if opts.get("sort"):
        rows = sort_rows(rows, opts["sort"], now)
    if wants_json(opts):
        from wattsched import dataparser

        cluster = client.config.cluster_name
        return json_text(dataparser.document("jobs", [dataparser.queue_job(j, cluster) for j in rows],
                                             ["squeue", *sys.argv[1:]], cluster,
                                             {"last_backfill": dataparser.number(None),
                                              "last_update": dataparser.number(int(now))}))
    if not opts.get("array") and not folded:
        rows = collapse_pending_arrays(rows)
    lines = []
    if opts.get("long") or opts.get("iterate"):
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    if not opts.get("noheader"):
        lines.append(fmt.render_header(parts, {code: f[0] for code, f in FIELDS.items()}))
    lines.extend(fmt.render_rows(parts, lambda code: FIELDS[code][2] if code in FIELDS else None, rows, now))
    return "\n".join(lines)


def _step_rank(step_id: str) -> int:
    """Where Slurm's numbering puts a step: srun's steps in order, then batch, then extern."""
    return int(step_id) if step_id.isdigit() else {"batch": 1 << 32}.get(step_id, (1 << 32) + 1)


# what squeue reads of every record whatever its format: to sort, filter by state and fold arrays
_ALWAYS = ("job_id", "state", "priority", "array_job_id", "array_task_id", "array_throttle", "display_id", "hold")
# the options _selected filters on, and the keys each reads
_FILTERS = {"name": "name", "account": "account", "qos": "qos", "reservation": "reservation",
            "nodelist": "node_list", "licenses": "licenses"}


def _keys(parts: list, opts: dict) -> set[str]:
    """The record keys a listing of ``parts`` with ``opts`` reads."""
    keys = set(_ALWAYS)
    for part in parts:
        if not isinstance(part, str):
            keys.update(KEYS.get(part.code, ()))
    keys.update(key for option, key in _FILTERS.items() if opts.get(option))
    for item in split_list([opts["sort"]] if opts.get("sort") else None):
        code = item.lstrip("+-")
        keys.update((SORT_KEYS[code],) if code in SORT_KEYS else KEYS.get(code, ()))
    return keys


def _selector(opts: dict) -> Callable[[dict], bool] | None:
    """The filters the controller does not apply (names, accounts, QOS, reservation, nodes,
    licenses) as one test, read from the options once; None when there are none."""
    names, accounts, qos = split_list(opts.get("name")), split_list(opts.get("account")), split_list(opts.get("qos"))
    reservation, licenses = opts.get("reservation"), set(split_list(opts.get("licenses")))
    wanted_nodes = split_list(opts.get("nodelist"))
    if not (names or accounts or qos or reservation or licenses or wanted_nodes):
        return None
    from wattsched import hostlist

    nodes_wanted = {n for expr in wanted_nodes for n in hostlist.expand(expr)}

    def selected(job: dict) -> bool:
        if (names and job["name"] not in names) or (accounts and job["account"] not in accounts) \
                or (qos and job.get("qos", "") not in qos) or (reservation and job["reservation"] != reservation):
            return False
        if licenses and licenses.isdisjoint(n.partition(":")[0] for n in job.get("licenses", "").split(",")):
            return False  # (a job asking for any of them is shown, by name, whatever its count)
        if nodes_wanted:
            return bool(nodes_wanted.intersection(hostlist.expand(job["node_list"]) if job["node_list"] else ()))
        return True

    return selected


def sort_rows(rows: list[dict], spec: str, now: float) -> list[dict]:
    """-S: %-code letters, each with an optional + (ascending, the default) or - (descending)."""
    for item in reversed(split_list([spec])):
        descending = item.startswith("-")
        code = item.lstrip("+-")
        if len(code) != 1 or code not in FIELDS:
            raise CLIError(f"Invalid sort specification: {item}")
        rows = sorted(rows, key=_sort_key(code, now), reverse=descending)
    return rows


def _sort_key(code: str, now: float) -> Callable[[dict], Any]:
    """A field's raw value where it has one (unset ones last), else its printed value."""
    key = SORT_KEYS.get(code)
    if key is not None:
        return lambda j: (j[key] is None, j[key] or 0)
    value = FIELDS[code][2]
    return lambda j: value(j, now)


def collapse_pending_arrays(rows: list[dict]) -> list[dict]:
    """Pending tasks of one array show as one line, ``12_[3-15%4]``, as in Slurm (unless -r); the
    rows come sorted: the first task of each array stands for it, in its place."""
    order = {id(job): position for position, job in enumerate(rows)}
    folded = [(order[id(job)], dict(job, display_id=arrayfold.folded_id(job["array_job_id"], ids,
                                                                         job["array_throttle"]))
               if len(ids) > 1 else job)
              for job, ids in arrayfold.fold(rows, _pending_task, lambda j: (order[id(j)],))]
    folded.sort(key=lambda pair: pair[0])
    return [job for _position, job in folded]


def _pending_task(job: dict) -> tuple[tuple[int, str], int] | None:
    if job["state"] == "PENDING" and job["array_task_id"] is not None:
        return arrayfold.group(job["array_job_id"], job["hold"]), job["array_task_id"]
    return None


def main() -> None:
    run("squeue", lambda: squeue(sys.argv[1:]),
        lambda exc: str(exc) if exc.status else f"slurm_load_jobs error: {exc}")

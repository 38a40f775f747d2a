"""sstat: what running jobs use so far: energy, CPU time, memory and CPU frequency, from the
readings their nodes' agents send (wattsched measures each allocation as a whole, so a job
shows one line, under its own id)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, print_json, split_list
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, refused, run, standard
from wattsched.cli.sacct import freq_text, req_freq, tres_usage

DEFAULT_FIELDS = ("JobID,MaxRSS,MaxRSSNode,AveCPU,NTasks,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,"
                  "ConsumedEnergy")
Row = dict[str, Any]


def _cpu(seconds: float) -> str:
    from wattsched import timefmt

    return timefmt.elapsed_str(int(seconds))


FIELDS: dict[str, tuple[int, Callable[[Row], str]]] = {
    "JobID": (-12, lambda r: r["display_id"]),
    "AveCPU": (10, lambda r: _cpu(r["total_cpu_s"] / max(1, r["ntasks"]))),
    "MinCPU": (10, lambda r: _cpu(r["total_cpu_s"] / max(1, r["ntasks"]))),
    "TotalCPU": (10, lambda r: _cpu(r["total_cpu_s"])),
    "NTasks": (8, lambda r: str(r["ntasks"])),
    "MaxRSS": (10, lambda r: f"{r['max_rss_kb']}K" if r["max_rss_kb"] else "0"),
    "MaxRSSNode": (10, lambda r: r["max_rss_node"]),
    "AveCPUFreq": (10, lambda r: freq_text(r["ave_cpu_freq_khz"]) if r["ave_cpu_freq_khz"] else "0"),
    "ReqCPUFreqMin": (13, lambda r: req_freq(r["cpu_freq"], r["cpu_freq_khz"], "min")),
    "ReqCPUFreqMax": (13, lambda r: req_freq(r["cpu_freq"], r["cpu_freq_khz"], "max")),
    "ReqCPUFreqGov": (13, lambda r: req_freq(r["cpu_freq"], r["cpu_freq_khz"], "gov")),
    "ConsumedEnergy": (14, lambda r: fmt.num_unit(r["consumed_energy_j"])),
    "ConsumedEnergyRaw": (17, lambda r: str(r["consumed_energy_j"] or 0)),
    "Nodelist": (15, lambda r: ",".join(r["nodes"])),
    "TRESUsageInTot": (14, lambda r: tres_usage(r["total_cpu_s"], r["consumed_energy_j"], r["max_rss_kb"])),
}


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


def sstat(argv: list[str]) -> None:
    """Status of running jobs: energy so far, CPU time, memory and frequency."""
    opts, job_args = COMMAND.parse(argv)
    jobs, fields, json_ = opts.get("jobs"), opts.get("format"), "json" in opts
    parsable, parsable2, noheader = bool(opts.get("parsable")), bool(opts.get("parsable2")), bool(opts.get("noheader"))
    helpformat = opts.get("helpformat")
    if helpformat:
        print(" ".join(sorted(FIELDS)))
        return
    refs = [r.split(".")[0] for r in split_list(jobs) + list(job_args or [])]
    if not refs:
        raise CLIError("No steps running for job(s); use -j JOBID")
    client = Client()
    rows: list[Row] = []
    for ref in refs:
        rows.extend(client.request("GET", f"/v1/jobs/{ref}/stat")["jobs"])
    if json_:
        print_json({"jobs": rows})
        return
    if not rows:
        raise CLIError(f"no steps running for job {','.join(refs)}")
    try:
        columns = fmt.parse_fields(fields or DEFAULT_FIELDS, {name: spec[0] for name, spec in FIELDS.items()})
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    records = [{name: FIELDS[name][1](row) for name, _ in columns} for row in rows]
    delimiter = "|" if parsable or parsable2 else None
    for line in fmt.format_table(records, columns, delimiter, trailing=parsable, header=not noheader):
        print(line)


def main() -> None:
    run("sstat", lambda: sstat(sys.argv[1:]))

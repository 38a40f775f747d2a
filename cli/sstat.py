"""sstat: what running jobs use so far: energy, CPU time, memory and CPU frequency, from the
readings their nodes' agents send (wattsched measures each allocation as a whole, so a job
shows one line, under its own id)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list
from wattsched.cli.sacct import freq_text, num_unit, req_freq, tres_usage

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

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
    "ConsumedEnergy": (14, lambda r: num_unit(r["consumed_energy_j"])),
    "ConsumedEnergyRaw": (17, lambda r: str(r["consumed_energy_j"] or 0)),
    "Nodelist": (15, lambda r: ",".join(r["nodes"])),
    "TRESUsageInTot": (14, lambda r: tres_usage(r["total_cpu_s"], r["consumed_energy_j"], r["max_rss_kb"])),
}


@app.command()
def sstat(
    jobs: Annotated[list[str] | None, typer.Option("-j", "--jobs", help="Running job ids.")] = None,
    fields: Annotated[str | None, typer.Option("-o", "--format", "--fields", help="Fields, e.g. JobID,AveCPUFreq.")]
    = None,
    parsable: Annotated[bool, typer.Option("-p", "--parsable", help="'|'-delimited, with a trailing '|'.")] = False,
    parsable2: Annotated[bool, typer.Option("-P", "--parsable2", help="'|'-delimited, no trailing '|'.")] = False,
    noheader: Annotated[bool, typer.Option("-n", "--noheader", help="No header.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    helpformat: Annotated[bool, typer.Option("-e", "--helpformat", help="List the available fields.")] = False,
    job_args: Annotated[list[str] | None, typer.Argument(help="Job ids.")] = None,
) -> None:
    """Status of running jobs: energy so far, CPU time, memory and frequency."""
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
    try:
        app(prog_name="sstat")
    except CLIError as exc:
        die("sstat", str(exc))

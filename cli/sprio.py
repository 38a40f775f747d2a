"""sprio: each pending job's priority and the weighted factors it is made of, energy included."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

# %-code -> (title, factor key, weight key); the value is weight x factor, or the factor with -n
CODES: dict[str, tuple[str, str, str]] = {
    "A": ("AGE", "age", "age"),
    "F": ("FAIRSHARE", "fairshare", "fairshare"),
    "J": ("JOBSIZE", "job_size", "job_size"),
    "P": ("PARTITION", "partition_factor", "partition"),
    "Q": ("QOS", "qos", "qos"),
    "E": ("ENERGY", "energy", "energy"),
}
DEFAULT = "%.15i %9r %10u %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q %.10E"
LONG = DEFAULT + " %.6N"


def _values(weights: dict[str, Any], normalized: bool):
    def value(code: str):
        if code in CODES:
            _title, factor, weight = CODES[code]
            if normalized:
                return lambda j: f"{j[factor]:.7f}"
            return lambda j: str(round(weights[weight] * j[factor]))
        simple = {"i": lambda j: str(j["job_id"]), "r": lambda j: j["partition"], "u": lambda j: j["user"],
                  "Y": lambda j: str(j["priority"]), "S": lambda j: str(j["site"]), "N": lambda j: str(j["nice"])}
        return simple.get(code, lambda _j, c=code: f"%{c}")
    return value


TITLES = {"i": "JOBID", "r": "PARTITION", "u": "USER", "Y": "PRIORITY", "S": "SITE", "N": "NICE",
          **{c: t for c, (t, _f, _w) in CODES.items()}}


@app.command()
def sprio(
    jobs: Annotated[list[str] | None, typer.Option("-j", "--jobs", help="Job ids.")] = None,
    users: Annotated[list[str] | None, typer.Option("-u", "--user", help="Users.")] = None,
    long: Annotated[bool, typer.Option("-l", "--long", help="Long format (adds NICE).")] = False,
    normalized: Annotated[bool, typer.Option("-n", "--norm", help="Factors in [0, 1], unweighted.")] = False,
    weights_only: Annotated[bool, typer.Option("-w", "--weights", help="Show the configured weights.")] = False,
    fmt_: Annotated[str | None, typer.Option("-o", "--format", help="%-codes: %i %r %u %Y %S %A %F %J %P %Q %E %N.")]
    = None,
    parsable: Annotated[bool, typer.Option("-P", "--parsable", help="'|'-delimited.")] = False,
    noheader: Annotated[bool, typer.Option("-h", "--noheader", help="No header.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show the priority factors of pending jobs."""
    reply = Client().request("GET", "/v1/priority")
    weights = reply["weights"]
    rows = reply["jobs"]
    wanted_jobs, wanted_users = set(split_list(jobs)), set(split_list(users))
    rows = [j for j in rows if (not wanted_jobs or str(j["job_id"]) in wanted_jobs)
            and (not wanted_users or j["user"] in wanted_users)]
    rows.sort(key=lambda j: (-j["priority"], j["job_id"]))
    if json_:
        print_json({"weights": weights, "jobs": rows})
        return
    spec = fmt_ or (LONG if long else DEFAULT)
    parts = fmt.parse_format(spec)
    if parsable:
        parts = [p for p in parts if isinstance(p, fmt.Column)]
        parts = [fmt.Column(p.code, None, False) for p in parts]
        parts = [x for p in parts for x in (p, "|")][:-1]
    lines = [] if noheader else [fmt.render_header(parts, TITLES)]
    if weights_only:
        weight_row = {"job_id": "Weights", "partition": "", "user": "", "priority": "", "site": "", "nice": "",
                      **{f: 1.0 for _t, f, _w in CODES.values()}}
        value = _values(weights, False)
        row = fmt.compile_row(parts, lambda code: (lambda _j, w=CODES[code][2]: str(weights[w])) if code in CODES
                              else value(code))
        lines.append(row(weight_row))
    else:
        row = fmt.compile_row(parts, _values(weights, normalized))
        lines.extend(row(j) for j in rows)
    print("\n".join(lines))


def main() -> None:
    try:
        app(prog_name="sprio")
    except CLIError as exc:
        die("sprio", str(exc))

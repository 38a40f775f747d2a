"""sprio: each pending job's priority and the weighted factors it is made of, energy included."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from wattsched.cli import fmt
from wattsched.cli.common import Client, print_json, split_list
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard

# %-code -> (title, factor key, weight key); the value is weight x factor, or the factor with -n.
# Slurm's factors (B, the association's, and T, the TRES', are 0 here: no such weights), then ours.
CODES: dict[str, tuple[str, str, str]] = {
    "A": ("AGE", "age", "age"),
    "B": ("ASSOC", "assoc", "assoc"),
    "F": ("FAIRSHARE", "fairshare", "fairshare"),
    "J": ("JOBSIZE", "job_size", "job_size"),
    "P": ("PARTITION", "partition_factor", "partition"),
    "Q": ("QOS", "qos", "qos"),
    "E": ("ENERGY", "energy", "energy"),  # ours: EnergyFairShare (PriorityWeightEnergy)
    "G": ("CARBON", "carbon", "carbon"),  # ours: flexible work in greener hours (PriorityWeightCarbon)
}
NORMALIZED = {code.lower(): code for code in CODES}
# Slurm's layouts: -l's fixed; the default's a column for each factor whose weight is set
LONG = "%.15i %9r %.8u %.8o %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10n %.10Q %.11N %.20T"
LONG_NORMALIZED = "%.15i %9r %.8u %.8o %10y %10a %10b %10f %10j %10p %10n %10q %20t"


def default_format(weights: dict[str, Any], normalized: bool, users: bool) -> str:
    """Slurm's default: job and partition, the user where -u asks, the priority (and site), then a
    column for each factor with a weight."""
    columns = ["%.15i %9r", *([" %.8u"] if users else []), " %10y" if normalized else " %.10Y %.10S"]
    for code in ("A", "B", "F", "J", "P", "Q", "E", "G"):
        if weights.get(CODES[code][2]):
            columns.append(f" %10{code.lower()}" if normalized else f" %.10{code}")
    return "".join(columns)


def _values(weights: dict[str, Any], normalized: bool):
    def value(code: str):
        if code in NORMALIZED:  # Slurm's lower-case codes: the factor itself
            factor = CODES[NORMALIZED[code]][1]
            return lambda j: f"{j.get(factor, 0.0):.7f}"
        if code in CODES:
            _title, factor, weight = CODES[code]
            if normalized:
                return lambda j: f"{j.get(factor, 0.0):.7f}"
            return lambda j: str(round(weights.get(weight, 0) * j.get(factor, 0.0)))
        simple = {"i": lambda j: str(j["job_id"]), "r": lambda j: j["partition"], "u": lambda j: j["user"],
                  "n": lambda j: j["qos_name"], "o": lambda j: j["account"],
                  "Y": lambda j: str(j["priority"]), "y": lambda j: f"{j['priority'] / 4294967295:.7f}",
                  "S": lambda j: str(j["site"]), "N": lambda j: str(j["nice"]), "T": lambda j: "",
                  "t": lambda j: ""}
        return simple.get(code, lambda _j, c=code: f"%{c}")
    return value


TITLES = {"i": "JOBID", "r": "PARTITION", "u": "USER", "Y": "PRIORITY", "y": "PRIORITY", "S": "SITE", "N": "NICE",
          "n": "QOSNAME", "o": "ACCOUNT", "T": "TRES", "t": "TRES", **{c: t for c, (t, _f, _w) in CODES.items()},
          **{n: CODES[c][0] for n, c in NORMALIZED.items()}}


COMMAND = Command("sprio", "[-j jid[s]] [-u user_name[s]] [-o format] [-p partitions] [--usage] "
                  "[-hlnvVw] [--json]", [
    Opt("h", "noheader", NO, "no headers on output"),
    Opt("j", "jobs", OPT, "comma separated list of jobs IDs to view, default is all", metavar="job_id",
        kind="list", const=""),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("l", "long", NO, "long report"),
    Opt("n", "norm", NO, "display normalized values"),
    Opt("o", "format", REQ, "format specification", metavar="format"),
    Opt("P", "parsable", NO, "'|'-delimited output (wattsched)"),
    Opt("p", "partition", REQ, "comma separated list of partitions to view", metavar="partitions", kind="list"),
    Opt("u", "user", REQ, "comma separated list of users to view", metavar="user_name", kind="list"),
    Opt("v", "verbose", NO, "verbosity level", kind="count"),
    Opt("w", "weights", NO, "show the weights for each priority factor"),
    ignored("M", "cluster", REQ), ignored("S", "sort", REQ), ignored(None, "sibling", NO),
    ignored(None, "federation", NO), ignored(None, "local", NO),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    "Help options:",
    *standard(None),
], help_usage="[OPTIONS]")


def sprio(argv: list[str]) -> None:
    """Show the priority factors of pending jobs."""
    opts, operands = COMMAND.parse(argv)
    jobs = [*opts.get("jobs", []), *operands[:1]] if "jobs" in opts else None
    users, long, normalized = opts.get("user"), opts.get("long"), bool(opts.get("norm"))
    weights_only, fmt_, parsable = opts.get("weights"), opts.get("format"), opts.get("parsable")
    noheader, json_ = opts.get("noheader"), "json" in opts
    if opts.get("verbose"):  # the parameters, as Slurm's sprio prints them (C's NULL as "(null)")
        given = {"format": fmt_, "job_flag": int(jobs is not None), "jobs": ",".join(split_list(jobs)) or None,
                 "partition": ",".join(opts.get("partition") or ()) or None,
                 "users": ",".join(users or ()) or None, "verbose": opts["verbose"]}
        lines = [f"{name:<10} = {'(null)' if value is None else value}" for name, value in given.items()]
        print("\n".join(["-----------------------------", *lines, "-----------------------------\n\n"]))
    reply = Client().request("GET", "/v1/priority")
    weights = reply["weights"]
    rows = reply["jobs"]
    wanted_jobs, wanted_users = set(split_list(jobs)), set(split_list(users))
    wanted_parts = set(split_list(opts.get("partition")))
    rows = [j for j in rows if (not wanted_jobs or str(j["job_id"]) in wanted_jobs)
            and (not wanted_users or j["user"] in wanted_users)
            and (not wanted_parts or j["partition"] in wanted_parts)]
    rows.sort(key=lambda j: (-j["priority"], j["job_id"]))
    if json_:
        print_json({"weights": weights, "jobs": rows})
        return
    spec = fmt_ or ((LONG_NORMALIZED if normalized else LONG) if long else
                    default_format(weights, normalized, bool(wanted_users)))
    parts = fmt.parse_format(spec)
    if parsable:  # every column unpadded, between bars
        columns = [fmt.Column(p.code, None, False) for p in parts if isinstance(p, fmt.Column)]
        parts = [x for p in columns for x in (p, "|")][:-1]
    lines = [] if noheader else [fmt.render_header(parts, TITLES)]
    if weights_only:
        weight_row = {"job_id": "Weights", "partition": "", "user": "", "priority": "", "site": 1, "nice": "",
                      **{f: 1.0 for _t, f, _w in CODES.values()}}
        value = _values(weights, False)

        def weight_of(code: str) -> Callable[[Any], str]:
            if code not in CODES:
                return value(code)
            weight = str(weights.get(CODES[code][2], 0))
            return lambda _j: weight

        row = fmt.compile_row(parts, weight_of)
        lines.append(row(weight_row))
    else:
        row = fmt.compile_row(parts, _values(weights, normalized))
        lines.extend(row(j) for j in rows)
    print("\n".join(lines))


def main() -> None:
    run("sprio", lambda: sprio(sys.argv[1:]))

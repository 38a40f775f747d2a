"""sreport: usage reports over a period from the accounting records, with energy as a TRES.

Reports: ``cluster AccountUtilizationByUser``, ``cluster UserUtilizationByAccount`` and ``user
TopUsage [TopCount=N]``, with ``start=``/``end=`` (default: yesterday, as in Slurm),
``users=``/``accounts=``, ``--tres=cpu,energy`` (default cpu), ``-t Seconds|Minutes|Hours``
for CPU time, ``-P``/``-p``/``-n`` and ``--json``. A job is counted for the part of its run
inside the period: CPUs x seconds, and its energy in proportion (energy in joules).
"""

from __future__ import annotations

import pwd
import time
from collections import defaultdict
from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

REPORTS = {("cluster", "accountutilizationbyuser"), ("cluster", "userutilizationbyaccount"), ("user", "topusage")}
TIME_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600}


def usage(rows: list[dict[str, Any]], start: float, end: float, now: float) -> dict[tuple[str, str], dict[str, float]]:
    """Per (account, user): CPU seconds and joules inside [start, end]."""
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: {"cpu": 0.0, "energy": 0.0})
    for job in rows:
        began, ended = job["time_start"], job["time_end"] or now
        if not began:
            continue
        inside = max(0.0, min(end, ended) - max(start, began))
        entry = totals[(job["account"], job["user"])]
        entry["cpu"] += inside * job["alloc_cpus"]
        if job["consumed_energy_j"] and ended > began:
            entry["energy"] += job["consumed_energy_j"] * inside / (ended - began)
    return totals


def _proper_name(user: str) -> str:
    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0] or user
    except KeyError:
        return user


@app.command(context_settings={"allow_extra_args": True})
def sreport(
    words: Annotated[list[str], typer.Argument(help="cluster AccountUtilizationByUser | user TopUsage ... key=value")],
    tres: Annotated[str, typer.Option("--tres", "-T", help="cpu, energy or both (cpu,energy).")] = "cpu",
    time_unit: Annotated[str, typer.Option("-t", help="Seconds, Minutes or Hours for CPU time.")] = "Minutes",
    parsable: Annotated[bool, typer.Option("-p", "--parsable", help="'|'-delimited, with a trailing '|'.")] = False,
    parsable2: Annotated[bool, typer.Option("-P", "--parsable2", help="'|'-delimited, no trailing '|'.")] = False,
    noheader: Annotated[bool, typer.Option("-n", "--noheader", help="No header.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Usage reports of CPU time and energy per account and user."""
    from wattsched import timefmt

    plain = [w for w in words if "=" not in w]
    options = {k.lower(): v for k, _, v in (w.partition("=") for w in words if "=" in w)}
    if len(plain) != 2 or (plain[0].lower(), plain[1].lower()) not in REPORTS:
        raise CLIError("Unknown report: use 'cluster AccountUtilizationByUser', "
                       "'cluster UserUtilizationByAccount' or 'user TopUsage'")
    kind = plain[1].lower()
    kinds = [t.strip().lower() for t in tres.split(",") if t.strip()]
    if not kinds or any(t not in ("cpu", "energy") for t in kinds):
        raise CLIError(f"Invalid TRES: {tres} (cpu, energy)")
    if time_unit.lower() not in TIME_UNITS:
        raise CLIError(f"Invalid time unit: {time_unit} (Seconds, Minutes, Hours)")
    now = time.time()
    try:
        end = timefmt.parse_time(options["end"], now) if "end" in options else timefmt.parse_time("today", now)
        start = timefmt.parse_time(options["start"], now) if "start" in options else end - 86400
    except timefmt.TimeFormatError as exc:
        raise CLIError(str(exc)) from exc
    if end <= start:
        raise CLIError("start must be before end")
    rows = Client().request("GET", "/v1/accounting/jobs", params={"start": start, "end": end})["jobs"]
    totals = usage(rows, start, end, now)
    users = {u for u in options.get("users", "").split(",") if u}
    accounts = {a for a in options.get("accounts", "").split(",") if a}
    totals = {k: v for k, v in totals.items() if (not users or k[1] in users) and (not accounts or k[0] in accounts)}
    cluster = Client().config.cluster_name
    divisor = TIME_UNITS[time_unit.lower()]
    records: list[dict[str, Any]] = []
    if kind == "topusage":
        per_user: dict[str, dict[str, Any]] = {}
        for (account, user), used in totals.items():
            entry = per_user.setdefault(user, {"accounts": [], "cpu": 0.0, "energy": 0.0})
            entry["accounts"].append(account)
            entry["cpu"] += used["cpu"]
            entry["energy"] += used["energy"]
        ranked = sorted(per_user.items(), key=lambda kv: -kv[1][kinds[0]])[:int(options.get("topcount", 10))]
        for user, used in ranked:
            for t in kinds:
                records.append({"Cluster": cluster, "Login": user, "Proper Name": _proper_name(user),
                                "Account": ",".join(sorted(set(used["accounts"]))), "TRES Name": t,
                                "Used": _amount(used[t], t, divisor)})
        title = f"Top {int(options.get('topcount', 10))} Users"
        columns = ["Cluster", "Login", "Proper Name", "Account", "TRES Name", "Used"]
    else:
        by_account: dict[str, dict[str, float]] = defaultdict(lambda: {"cpu": 0.0, "energy": 0.0})
        for (account, _user), used in totals.items():
            for t in ("cpu", "energy"):
                by_account[account][t] += used[t]
        for account in sorted(by_account):
            for t in kinds:
                records.append({"Cluster": cluster, "Account": account, "Login": "", "Proper Name": "",
                                "TRES Name": t, "Used": _amount(by_account[account][t], t, divisor)})
            for (acct, user), used in sorted(totals.items()):
                if acct == account:
                    for t in kinds:
                        records.append({"Cluster": cluster, "Account": account, "Login": user,
                                        "Proper Name": _proper_name(user), "TRES Name": t,
                                        "Used": _amount(used[t], t, divisor)})
        title = "Cluster/Account/User Utilization" if kind == "accountutilizationbyuser" else \
            "Cluster/User/Account Utilization"
        columns = ["Cluster", "Account", "Login", "Proper Name", "TRES Name", "Used"]
        if kind == "userutilizationbyaccount":
            columns = ["Cluster", "Login", "Proper Name", "Account", "TRES Name", "Used"]
            records = [r for r in records if r["Login"]]
    if json_:
        print_json({"report": title, "start": start, "end": end, "rows": records})
        return
    if not (parsable or parsable2 or noheader):
        unit = "CPU " + time_unit.capitalize() if kinds == ["cpu"] else f"TRES {time_unit.capitalize()}"
        print("-" * 80)
        print(f"{title} {timefmt.ts_str(start)} - {timefmt.ts_str(end - 1)} ({int(end - start)} secs)")
        print(f"Usage reported in {unit}" + (" (energy in joules)" if "energy" in kinds else ""))
        print("-" * 80)
    widths = {"Cluster": 9, "Account": 15, "Login": 9, "Proper Name": 15, "TRES Name": 14, "Used": 10}
    fields = [(c, widths[c]) for c in columns]
    delimiter = "|" if parsable or parsable2 else None
    for line in fmt.format_table(records, fields, delimiter, trailing=parsable, header=not noheader):
        print(line)


def _amount(value: float, tres: str, divisor: int) -> str:
    return str(round(value)) if tres == "energy" else str(round(value / divisor))


def main() -> None:
    try:
        app(prog_name="sreport")
    except CLIError as exc:
        die("sreport", str(exc))

"""sreport: usage reports over a period from the accounting records, with energy as a TRES.

Reports: ``cluster AccountUtilizationByUser``, ``cluster UserUtilizationByAccount`` and ``user
TopUsage [TopCount=N]``, with ``start=``/``end=`` (default: yesterday, as in Slurm; start= alone
ends a day later or now),
``users=``/``accounts=``, ``--tres=cpu,energy,co2e`` (default cpu), ``-t Seconds|Minutes|Hours``
for CPU time, ``-P``/``-p``/``-n`` and ``--json``. A job is counted for the part of its run
inside the period: CPUs x seconds, and its energy and emissions in proportion (energy in joules;
ours, co2e: grams of CO2e at the grid's carbon intensity, wattsched.carbon).

Ours: ``cluster Budgets`` lists every GrpTRESMins budget (of an account, a user's association
or a QOS) with what is used of it as the limits count it (decayed, running jobs' use so far
included), what the running jobs may still use (their TRES-minutes to their time limits), what
remains and the share used; ``accounts=``/``users=``/``qos=`` and ``--tres`` select.
"""

from __future__ import annotations

import pwd
import sys
import time
from collections import defaultdict
from typing import Any

from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, print_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, run, standard

REPORTS = {("cluster", "accountutilizationbyuser"), ("cluster", "userutilizationbyaccount"), ("user", "topusage"),
           ("cluster", "budgets")}
TIME_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600}
KINDS = ("cpu", "energy", "co2e")


def usage(rows: list[dict[str, Any]], start: float, end: float, now: float) -> dict[tuple[str, str], dict[str, float]]:
    """Per (account, user): CPU seconds, joules and grams of CO2e inside [start, end]."""
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
    for job in rows:
        began, ended = job["time_start"], job["time_end"] or now
        if not began:
            continue
        inside = max(0.0, min(end, ended) - max(start, began))
        entry = totals[(job["account"], job["user"])]
        entry["cpu"] += inside * job["alloc_cpus"]
        if ended > began:
            entry["energy"] += (job["consumed_energy_j"] or 0) * inside / (ended - began)
            entry["co2e"] += (job.get("co2e_g") or 0) * inside / (ended - began)
    return totals


def _proper_name(user: str) -> str:
    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0] or user
    except KeyError:
        return user


COMMAND = Command("sreport", "[<OPTION>] [<COMMAND>]", [
    Opt(None, "json", OPT, "Produce JSON output (wattsched)", metavar="data_parser"),
    Opt("n", "noheader", NO, "Don't display header when listing info."),
    Opt("p", "parsable", NO, "output will be '|' delimited with a '|' at the end"),
    Opt("P", "parsable2", NO, "output will be '|' delimited without a '|' at the end"),
    Opt("t", "time", REQ, "Set format of time: Seconds, Minutes (default) or Hours", metavar="format",
        dest="time_unit"),
    Opt("T", "tres", REQ, "Specify the TRES to report on: cpu (default), energy, co2e (ours), or a list",
        metavar="tres_names"),
    Opt("v", "verbose", NO, "Enable detailed logging.", kind="count"),
    ignored("a", "all_clusters", NO), ignored("M", "cluster", REQ), ignored(None, "local", NO),
    ignored("Q", "quiet", NO),
    *standard(),
], epilog="""  <keyword> may be omitted from the execute line and sreport will execute
  in interactive mode. It will process commands as entered until explicitly
  terminated.

    Valid <COMMAND> values are:
     cluster AccountUtilizationByUser | UserUtilizationByAccount [start=] [end=] [users=] [accounts=]
     user TopUsage [TopCount=N] [start=] [end=] [users=] [accounts=]

  start= defaults to 00:00:00 of the previous day, end= to 00:00:00 of the current day; with start=
  alone, end= is a day later, or now if that is sooner.""")


def report_period(options: dict[str, str], now: float) -> tuple[float, float]:
    """start=/end= as sreport reads them: by default yesterday; start= alone ends a day later or now."""
    from wattsched import timefmt

    try:
        today = timefmt.parse_time("today", now)
        start = timefmt.parse_time(options["start"], now) if "start" in options else None
        end = timefmt.parse_time(options["end"], now) if "end" in options else None
    except timefmt.TimeFormatError as exc:
        raise CLIError(str(exc)) from exc
    if start is None:
        start = (end if end is not None else today) - 86400
    if end is None:
        end = today if "start" not in options else min(start + 86400, now)
    if end <= start:
        raise CLIError("start time must be before end time")
    return start, end


def sreport(argv: list[str]) -> None:
    """Usage reports of CPU time and energy per account and user."""
    opts, words = COMMAND.parse(argv)
    tres, time_unit = opts.get("tres", "cpu"), opts.get("time_unit", "Minutes")
    parsable, parsable2, noheader = bool(opts.get("parsable")), bool(opts.get("parsable2")), bool(opts.get("noheader"))
    json_ = "json" in opts
    from wattsched import timefmt

    plain = [w for w in words if "=" not in w]
    options = {k.lower(): v for k, _, v in (w.partition("=") for w in words if "=" in w)}
    if len(plain) != 2 or (plain[0].lower(), plain[1].lower()) not in REPORTS:
        raise CLIError("Unknown report: use 'cluster AccountUtilizationByUser', "
                       "'cluster UserUtilizationByAccount', 'cluster Budgets' or 'user TopUsage'")
    kind = plain[1].lower()
    if time_unit.lower() not in TIME_UNITS:
        raise CLIError(f"Invalid time unit: {time_unit} (Seconds, Minutes, Hours)")
    if kind == "budgets":
        budgets(options, opts.get("tres"), time_unit, parsable, parsable2, noheader, json_)
        return
    kinds = [t.strip().lower() for t in tres.split(",") if t.strip()]
    if not kinds or any(t not in KINDS for t in kinds):
        raise CLIError(f"Invalid TRES: {tres} (cpu, energy, co2e)")
    now = time.time()
    start, end = report_period(options, now)
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
            entry = per_user.setdefault(user, {"accounts": [], **dict.fromkeys(KINDS, 0.0)})
            entry["accounts"].append(account)
            for t in KINDS:
                entry[t] += used[t]
        ranked = sorted(per_user.items(), key=lambda kv: -kv[1][kinds[0]])[:int(options.get("topcount", 10))]
        for user, top in ranked:
            for t in kinds:
                records.append({"Cluster": cluster, "Login": user, "Proper Name": _proper_name(user),
                                "Account": ",".join(sorted(set(top["accounts"]))), "TRES Name": t,
                                "Used": _amount(top[t], t, divisor)})
        title = f"Top {int(options.get('topcount', 10))} Users"
        columns = ["Cluster", "Login", "Proper Name", "Account", "TRES Name", "Used"]
    else:
        by_account: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
        for (account, _user), used in totals.items():
            for t in KINDS:
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
        units = [text for kind, text in (("energy", "energy in joules"), ("co2e", "co2e in grams")) if kind in kinds]
        print(f"Usage reported in {unit}" + (f" ({', '.join(units)})" if units else ""))
        print("-" * 80)
    widths = {"Cluster": 9, "Account": 15, "Login": 9, "Proper Name": 15, "TRES Name": 14, "Used": 10}
    fields = [(c, widths[c]) for c in columns]
    delimiter = "|" if parsable or parsable2 else None
    for line in fmt.format_table(records, fields, delimiter, trailing=parsable, header=not noheader):
        print(line)


BUDGET_COLUMNS = [("Cluster", 9), ("Account", 15), ("Login", 9), ("QOS", 10), ("TRES Name", 10), ("Budget", 12),
                  ("Used", 12), ("Running", 12), ("Remaining", 12), ("Used%", 7)]


def budgets(options: dict[str, str], tres: str | None, time_unit: str, parsable: bool, parsable2: bool,
            noheader: bool, json_: bool) -> None:
    """Every GrpTRESMins budget, with its use, what running jobs may still use, and what remains."""
    divisor = TIME_UNITS[time_unit.lower()]
    data = Client().request("GET", "/v1/assoc_mgr")
    chosen = {name: {v for v in options.get(name, "").split(",") if v} for name in ("accounts", "users", "qos")}
    kinds = {t.strip().lower() for t in tres.split(",") if t.strip()} if tres else set()
    owners = [(a["account"], a["user"], "", a) for a in data["associations"]
              if (not chosen["accounts"] or a["account"] in chosen["accounts"])
              and (not chosen["users"] or a["user"] in chosen["users"]) and not chosen["qos"]]
    owners += [("", "", q["name"], q) for q in data["qos"] if (not chosen["qos"] or q["name"] in chosen["qos"])
               and not chosen["accounts"] and not chosen["users"]]
    records: list[dict[str, Any]] = []
    for account, user, qos, owner in owners:
        usage = owner["usage"]
        for name, budget in sorted(owner["limits"].get("grp_tres_mins", {}).items()):
            if kinds and name not in kinds:
                continue
            used, running = usage["tres_mins"].get(name, 0.0), usage["tres_run_mins"].get(name, 0.0)
            # TRES-minutes in the time unit asked for; energy in joules
            scale = 1.0 if name == "energy" else 60.0 / divisor
            records.append({"Cluster": data["cluster"], "Account": account, "Login": user, "QOS": qos,
                            "TRES Name": name, "Budget": round(budget * scale), "Used": round(used * scale),
                            "Running": round(running * scale), "Remaining": round(max(0.0, budget - used) * scale),
                            "Used%": f"{100.0 * used / budget:.1f}%" if budget else "100.0%"})
    if json_:
        print_json({"report": "Budgets", "time": data["time"], "rows": records})
        return
    if not (parsable or parsable2 or noheader):
        print("-" * 80)
        from wattsched import timefmt

        print(f"Budgets (GrpTRESMins) at {timefmt.ts_str(data['time'])}")
        print(f"Usage reported in TRES {time_unit.capitalize()} (energy in joules)")
        print("-" * 80)
    delimiter = "|" if parsable or parsable2 else None
    for line in fmt.format_table(records, BUDGET_COLUMNS, delimiter, trailing=parsable, header=not noheader):
        print(line)


def _amount(value: float, tres: str, divisor: int) -> str:
    return str(round(value)) if tres in ("energy", "co2e") else str(round(value / divisor))


def main() -> None:
    run("sreport", lambda: sreport(sys.argv[1:]))

"""sshare: the fair-share tree, usage and factors, with the energy columns of EnergyFairShare."""

from __future__ import annotations

import os
import sys
from typing import Any

from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, print_json, split_list
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard


def _f(value: Any) -> str:
    return value if isinstance(value, str) else f"{value:.6f}"


# name -> (width, value); negative width: left-justified
FIELDS: dict[str, tuple[int, Any]] = {
    "Account": (-20, lambda r: " " * r["depth"] + r["account"]),
    "User": (-10, lambda r: r["user"]),
    "RawShares": (10, lambda r: str(r["raw_shares"]) if r["depth"] else ""),
    "NormShares": (11, lambda r: _f(r["norm_shares"])),
    "RawUsage": (11, lambda r: str(round(r["raw_usage"]))),
    "NormUsage": (11, lambda r: _f(r["norm_usage"])),
    "EffectvUsage": (13, lambda r: _f(r["effective_usage"])),
    "FairShare": (10, lambda r: _f(r["fairshare"]) if r["user"] else ""),
    "LevelFS": (10, lambda r: _f(r["level_fs"]) if r["depth"] else ""),
    "RawEnergy": (13, lambda r: str(round(r["raw_energy"]))),
    "NormEnergy": (13, lambda r: _f(r["norm_energy"])),
    "EffectvEnergy": (13, lambda r: _f(r["effective_energy"])),
    "EnergyFairShare": (15, lambda r: _f(r["energy_fairshare"]) if r["user"] else ""),
    "LevelEFS": (10, lambda r: _f(r["level_efs"]) if r["depth"] else ""),
    # the budgets (QOS and association limits): the limit, the use in the period, what runs may still use
    "GrpTRESMins": (13, lambda r: r.get("grp_tres_mins", "")),
    "GrpTRESRaw": (30, lambda r: r.get("grp_tres_raw", "")),
    "TRESRunMins": (30, lambda r: r.get("tres_run_mins", "")),
}
DEFAULT = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,RawEnergy,EffectvEnergy,EnergyFairShare"
LONG = ("Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS,RawEnergy,"
        "NormEnergy,EffectvEnergy,EnergyFairShare,LevelEFS,GrpTRESMins,TRESRunMins")


def select_rows(rows: list[dict], users: list[str], accounts: list[str], everyone: bool) -> list[dict]:
    """Accounts always; users as asked (-a: all, -u: those, else the caller), under -A's accounts."""
    if not everyone and not users:
        from wattsched.auth import username

        users = [username(os.getuid())]
    result, inside = [], False
    for row in rows:
        if not row["user"]:
            inside = not accounts or row["account"] in accounts or (inside and row["depth"] > 1)
        if accounts and not inside and row["depth"]:
            continue
        if row["user"] and not everyone and row["user"] not in users:
            continue
        result.append(row)
    return result


COMMAND = Command("sshare", "[-AahlnPpUuv] [--json]", [
    Opt("A", "accounts", REQ, "display specific accounts (comma separated list)", metavar="accounts",
        kind="list"),
    Opt("a", "all", NO, "display information for all users"),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("l", "long", NO, "include normalized usage in output"),
    Opt("n", "noheader", NO, "omit header from output"),
    Opt("o", "format", REQ, "Comma separated list of fields (use \"--helpformat\" for a list of available "
        "fields)", metavar="fields"),
    Opt("P", "parsable2", NO, "output will be '|' delimited without a '|' at the end"),
    Opt("p", "parsable", NO, "output will be '|' delimited with a '|' at the end"),
    Opt("u", "users", REQ, "display specific users (comma separated list)", metavar="users", kind="list"),
    Opt("v", "verbose", NO, "display more information", kind="count"),
    ignored("m", "partition", NO), ignored("M", "cluster", REQ), ignored("U", "Users", NO),
    ignored(None, "helpformat", NO), ignored("e", "helpformat2", NO),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    *standard(),
], operands=False)


def sshare(argv: list[str]) -> None:
    """Show fair-share usage, shares and factors (CPU-seconds and joules)."""
    opts, _ = COMMAND.parse(argv)
    all_users, users, accounts, long = opts.get("all"), opts.get("users"), opts.get("accounts"), opts.get("long")
    fields, parsable, parsable2 = opts.get("format"), bool(opts.get("parsable")), bool(opts.get("parsable2"))
    noheader, json_ = opts.get("noheader"), "json" in opts
    reply = Client().request("GET", "/v1/shares")
    rows = select_rows(reply["rows"], split_list(users), split_list(accounts), bool(all_users))
    if json_:
        print_json({"shares": rows, "computed_at": reply["computed_at"]})
        return
    try:
        lines = fmt.field_table(rows, fields or (LONG if long else DEFAULT), FIELDS, parsable, parsable2,
                                header=not noheader)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    print("\n".join(lines))


def main() -> None:
    run("sshare", lambda: sshare(sys.argv[1:]))

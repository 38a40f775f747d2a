"""sshare: the fair-share tree, usage and factors, with the energy columns of EnergyFairShare."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})


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
}
DEFAULT = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,RawEnergy,EffectvEnergy,EnergyFairShare"
LONG = ("Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS,RawEnergy,"
        "NormEnergy,EffectvEnergy,EnergyFairShare,LevelEFS")


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


@app.command()
def sshare(
    all_users: Annotated[bool, typer.Option("-a", "--all", help="All users.")] = False,
    users: Annotated[list[str] | None, typer.Option("-u", "--users", help="Users to show.")] = None,
    accounts: Annotated[list[str] | None, typer.Option("-A", "--accounts", help="Accounts to show.")] = None,
    long: Annotated[bool, typer.Option("-l", "--long", help="More columns (LevelFS, NormUsage, ...).")] = False,
    fields: Annotated[str | None, typer.Option("-o", "--format", help="Columns, e.g. Account,User,FairShare%12.")]
    = None,
    parsable: Annotated[bool, typer.Option("-p", "--parsable", help="'|'-delimited, trailing '|'.")] = False,
    parsable2: Annotated[bool, typer.Option("-P", "--parsable2", help="'|'-delimited.")] = False,
    noheader: Annotated[bool, typer.Option("-n", "--noheader", help="No header.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show fair-share usage, shares and factors (CPU-seconds and joules)."""
    reply = Client().request("GET", "/v1/shares")
    rows = select_rows(reply["rows"], split_list(users), split_list(accounts), all_users)
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
    try:
        app(prog_name="sshare")
    except CLIError as exc:
        die("sshare", str(exc))

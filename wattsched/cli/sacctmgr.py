"""sacctmgr: add, modify, delete and show clusters, accounts, users, associations and QOS.

    sacctmgr [-i] add account physics Parent=root Fairshare=10 Description="..." Organization=...
    sacctmgr [-i] add user alice Account=physics DefaultAccount=physics Fairshare=2 AdminLevel=None
    sacctmgr [-i] modify account physics set Fairshare=5 GrpTRES=cpu=64,power=3000 GrpTRESMins=energy=1e9
    sacctmgr [-i] modify user alice where Account=physics set Fairshare=3 MaxJobs=4 QOS+=high
    sacctmgr [-i] delete user alice [where Account=physics]
    sacctmgr [-i] add qos high Priority=100 Preempt=normal MaxJobsPerUser=2 Flags=DenyOnLimit
    sacctmgr show assoc [format=Account,User,Share,GrpTRES] [-P] [-n] [--json]
    sacctmgr show qos [high] [format=Name,Priority,MaxJobsPU]

The limits and QOS settings are those of wattsched.limits (Slurm's, with power as a TRES).

Without -i the change is described and committed only when the answer is "y", as in Slurm.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from wattsched import limits
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, Unreachable, print_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run
from wattsched.limits import Limits
from wattsched.timefmt import elapsed_str

ENTITIES = {"cluster": "cluster", "clusters": "cluster", "account": "account", "accounts": "account",
            "user": "user", "users": "user", "association": "assoc", "associations": "assoc", "assoc": "assoc",
            "qos": "qos", "tres": "tres", "wckey": "wckey", "wckeys": "wckey"}
ACTIONS = {"add": "add", "create": "add", "modify": "modify", "update": "modify", "delete": "delete",
           "remove": "delete", "show": "show", "list": "show"}
def _limit(key: limits.LimitKey):
    return lambda r: limits.show_limit(key, Limits.from_json(r["limits"]))


# show: field -> (width, value)
FIELDS: dict[str, dict[str, tuple[int, Any]]] = {
    "assoc": {"Cluster": (10, lambda r: r["cluster"]), "Account": (10, lambda r: r["account"]),
              "User": (10, lambda r: r["user"]), "Partition": (10, lambda r: ""),
              "Share": (9, lambda r: str(r["shares"])), "Fairshare": (9, lambda r: str(r["shares"])),
              "ParentName": (10, lambda r: "" if r["user"] else r["parent"]), "ID": (6, lambda r: str(r["id"])),
              "DefaultAccount": (10, lambda r: r["default_account"] if r["user"] else ""),
              "Priority": (10, lambda r: ""), "QOS": (20, lambda r: ",".join(sorted(r["qos"]))),
              "Def QOS": (9, lambda r: r["default_qos"]),
              **{k.header: (k.width, _limit(k)) for k in limits.ASSOC_KEYS}},
    "qos": {"Name": (10, lambda r: r["name"]), "Priority": (10, lambda r: str(r["priority"])),
            "GraceTime": (10, lambda r: elapsed_str(r["grace_time"])),
            "Preempt": (10, lambda r: ",".join(sorted(r["preempt"]))),
            "PreemptExemptTime": (19, lambda r: "" if r["preempt_exempt_time"] is None else
                                  limits.format_minutes(r["preempt_exempt_time"])),
            "PreemptMode": (11, lambda r: r["preempt_mode"]), "Flags": (20, lambda r: ",".join(r["flags"])),
            "UsageThres": (10, lambda r: "" if r["usage_threshold"] is None else f"{r['usage_threshold']:.6f}"),
            "UsageFactor": (11, lambda r: f"{r['usage_factor']:.6f}"), "Descr": (20, lambda r: r["description"]),
            "ID": (6, lambda r: str(r["id"])), "EnergyPolicy": (12, lambda r: r.get("energy_policy", "")),
            **{k.header: (k.width, _limit(k)) for k in limits.QOS_KEYS}},
    "account": {"Account": (10, lambda r: r["name"]), "Descr": (20, lambda r: r["description"]),
                "Org": (20, lambda r: r["organization"]), "ParentName": (10, lambda r: r["parent"])},
    "user": {"User": (10, lambda r: r["name"]), "Def Acct": (10, lambda r: r["default_account"]),
             "Admin": (9, lambda r: r["admin_level"])},
    "cluster": {"Cluster": (10, lambda r: r["name"])},
    "tres": {"Type": (8, lambda r: r["type"]), "Name": (15, lambda r: r["name"]), "ID": (6, lambda r: str(r["id"]))},
    "wckey": {"WCKey": (10, lambda r: r["name"]), "Cluster": (10, lambda r: r["cluster"]),
              "User": (10, lambda r: r["user"])},
}
DEFAULTS = {"assoc": "Cluster,Account,User,Partition,Share,Priority,GrpJ,GrpTRES,GrpS,GrpWall,GrpTRESMins,MaxJ,"
                     "MaxTRES,MaxS,MaxW,MaxTRESMins,QOS,DefaultQOS,GrpTRESRunMins",
            "account": "Account,Descr,Org", "user": "User,Def Acct,Admin", "cluster": "Cluster",
            "tres": "Type,Name,ID", "wckey": "WCKey,Cluster,User",
            "qos": "Name,Prio,GraceT,Preempt,PreemptE,PreemptM,Flags%40,UsageThres,UsageFactor,GrpTRES,GrpTRESMins,"
                   "GrpTRESRunMins,GrpJ,GrpS,GrpW,MaxTRES,MaxTRESPerN,MaxTRESMins,MaxW,MaxTRESPerUser,"
                   "MaxJobsPerUser,MaxSubmitJobsPerUser,MaxTRESPerAcct,MaxJobsPerAcct,MaxSubmitJobsPerAcct,MinTRES"}
ROWS = {"assoc": "associations", "account": "accounts", "user": "users", "cluster": "clusters", "qos": "qos",
        "tres": "TRES", "wckey": "wckeys"}
SHOW_ONLY = ("assoc", "tres", "wckey")  # listed, never added, changed or deleted here
TRES_LISTED = ("cpu", "mem", "energy", "node", "billing", "gres/gpu")  # (power: ours, no Slurm id)
# format= names as sacctmgr takes them: a field's full name, or the start of one of its names at
# least as long as Slurm's minimum for it (4 letters unless given), first match in this order
_FIELD_NAMES: dict[str, list[tuple[str, str, int]]] = {
    "assoc": [("defaultqos", "Def QOS", 8), ("def qos", "Def QOS", 4), ("qoslevel", "QOS", 3),
              ("fairshare", "Share", 2), ("share", "Share", 1), ("priority", "Priority", 3),
              *((name, k.header, 4) for k in limits.ASSOC_KEYS for name in k.names)],
    "qos": [("name", "Name", 2), ("priority", "Priority", 3), ("gracetime", "GraceTime", 3),
            ("preemptmode", "PreemptMode", 8), ("preempt", "Preempt", 7), ("preemptexempttime", "PreemptExemptTime", 8),
            ("flags", "Flags", 2), ("usagethreshold", "UsageThres", 6), ("usagefactor", "UsageFactor", 6),
            ("description", "Descr", 3), ("energypolicy", "EnergyPolicy", 6),
            *((name, k.header, 4) for k in limits.QOS_KEYS for name in k.names)],
}


def canonical_fields(entity: str, spec: str) -> str:
    """``format=`` with each name as sacctmgr resolves it (GrpJ is GrpJobs, MaxTRESPerN is
    MaxTRESPerNode, ...), for the entities whose fields Slurm abbreviates."""
    names = _FIELD_NAMES.get(entity)
    if names is None:
        return spec
    out = []
    for item in spec.split(","):
        given, sep, width = item.partition("%")
        lowered = given.strip().lower()
        header = next((h for name, h, _least in names if name == lowered), None) or \
            next((h for name, h, least in names if name.startswith(lowered) and len(lowered) >= least), None)
        out.append(f"{header or given}{sep}{width}")
    return ",".join(out)


def with_associations(entity: str, names: list[str]) -> bool:
    """Whether ``names`` holds Slurm's WithAssoc keyword (5 letters of it at least, any case), which
    ``show account`` and ``show user`` take as -s; it is taken out of ``names``."""
    found = [n for n in names if len(n) >= 5 and "withassoc".startswith(n.lower())]
    for word in found:
        names.remove(word)
    return bool(found) and entity in ("account", "user")


def parse_command(words: list[str]) -> tuple[str, str, list[str], dict[str, str], dict[str, str]]:
    """(action, entity, names, where, set) from ``add account physics Parent=root``,
    ``modify user where name=alice account=physics set fairshare=2`` and the like."""
    if len(words) < 2:
        raise CLIError("You gave no command or entity.  Try 'sacctmgr --help'.")
    action, entity = ACTIONS.get(words[0].lower()), ENTITIES.get(words[1].lower())
    if action is None:
        raise CLIError(f"Invalid command: {words[0]}")
    if entity is None or (entity in SHOW_ONLY and action != "show"):
        raise CLIError(f"No valid entity in {words[0]} command.  Input was '{words[1]}'")
    names: list[str] = []
    where: dict[str, str] = {}
    values: dict[str, str] = {}
    target = values if action == "add" else where
    for word in words[2:]:
        lowered = word.lower()
        if lowered in ("where", "set"):
            target = where if lowered == "where" else values
            continue
        key, sep, value = word.partition("=")
        key = key.lower()
        names_key = key in ("name", "names") or (key in ("user", "users") and entity != "assoc" and target is where)
        if not sep:
            names.extend(n for n in word.split(",") if n)
        elif (names_key and (target is where or action == "add")) or (entity == "assoc" and key in ("user", "users")):
            names.extend(n for n in value.split(",") if n)
        else:
            target[key] = value
    return action, entity, names, where, values


def _describe(action: str, entity: str, names: list[str], values: dict[str, str]) -> str:
    verb = {"add": "Adding", "modify": "Modified", "delete": "Deleting"}[action]
    lines = [f" {verb} {entity}(s)", *(f"  {n}" for n in names)]
    if values:
        lines.append(" Settings")
        lines.extend(f"  {k:<15} = {v}" for k, v in values.items())
    return "\n".join(lines)


def _confirm() -> bool:
    sys.stdout.write("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


COMMAND = Command("sacctmgr", "[<OPTION>] [<COMMAND>]", [
    Opt("i", "immediate", NO, "commit changes immediately without asking for confirmation"),
    Opt(None, "json", OPT, "Produce JSON output (show)", metavar="data_parser"),
    Opt("n", "noheader", NO, "no header will be added to the beginning of the output"),
    Opt("p", "parsable", NO, "output will be '|' delimited with a '|' at the end"),
    Opt("P", "parsable2", NO, "output will be '|' delimited without a '|' at the end"),
    Opt("v", "verbose", NO, "enable detailed logging", kind="count"),
    ignored("Q", "quiet", NO), ignored("r", "readonly", NO),
    Opt("s", "associations", NO, "with accounts and users, show their associations too"),
    ignored("o", "oneliner", NO), ignored("M", "cluster", REQ), ignored(None, "local", NO),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    Opt("h", "help", NO, "show this help message", kind="help"),
    Opt(None, "usage", NO, "show this help message (as Slurm's sacctmgr does)", kind="help"),
    Opt("V", "version", NO, "output version information and exit", kind="version"),
], help_usage="[<OPTION>] [<COMMAND>]", option_list=True, epilog="""    Valid <COMMAND> values are:
     add <ENTITY> <SPECS>             add an entity (create: the same)
     delete <ENTITY> where <SPECS>    delete the entities named (remove: the same)
     list <ENTITY> [<SPECS>]          display the entities, all of them by default (show: the same)
     modify <ENTITY> where <SPECS> set <SPECS>
                                      change the entities named (update: the same)

  <ENTITY> may be ("account", "association", "cluster", "qos", "tres", "user" or "wckey"); tres and
  wckey are listed only.

  <SPECS> are different for each command entity pair.
       list associations   - Accounts=, Clusters=, Users=, Format=
       list accounts       - Names=, Format=
       list clusters       - Names=, Format=
       list qos            - Names=, Format=
       list tres           - Names= (their types), Format=
       list users          - Names=, Format=
       list wckeys         - Names=, Format=

       add account         - Names=, Parent=, Description=, Organization=, Fairshare=, QOS=,
                             DefaultQOS= and the limits
       add cluster         - Names=
       add qos             - Names=, Description=, Priority=, Flags=, Preempt=, PreemptMode=,
                             PreemptExemptTime=, GraceTime=, UsageFactor=, UsageThreshold=,
                             EnergyPolicy= and the limits
       add user            - Names=, Account=, DefaultAccount=, Fairshare=, AdminLevel=, QOS=,
                             DefaultQOS= and the limits

       modify account      - (set options) Parent=, Description=, Organization=, Fairshare=, QOS=,
                             DefaultQOS= and the limits
       modify cluster      - not supported here: a cluster has no settings of its own
       modify qos          - (set options) as add qos
       modify user         - (set options) DefaultAccount=, Fairshare=, AdminLevel=, QOS=, DefaultQOS=
                             and the limits

       delete account      - Names=
       delete qos          - Names=
       delete user         - Names=, Account=

  The limits are Slurm's (GrpJobs=, GrpTRES=, GrpTRESMins= with energy= in joules, MaxJobs=,
  MaxWall=, ...); -1 clears one.""")


def sacctmgr(argv: list[str]) -> None:
    """Manage accounts, users and their associations."""
    opts, words = COMMAND.parse(argv)
    if not words:
        raise CLIError("no command given (add, modify, delete or show); see sacctmgr --help")
    if [w.lower() for w in words] == ["shutdown"]:  # Slurm's: stop slurmdbd, of which there is none
        print("sacctmgr: no accounting daemon runs here: slurmctld keeps the accounting (scontrol shutdown "
              "stops it)", file=sys.stderr)
        return None
    immediate, noheader, json_ = opts.get("immediate"), bool(opts.get("noheader")), "json" in opts
    parsable, parsable2 = bool(opts.get("parsable")), bool(opts.get("parsable2"))
    action, entity, names, where, values = parse_command(words)
    client = Client()
    if action == "show":
        assoc = with_associations(entity, names) or (bool(opts.get("associations")) and entity in ("account", "user"))
        return _show(client, entity, names, where, noheader, parsable, parsable2, json_, assoc)
    if not names:
        raise CLIError(f"No {entity} name given.  Nothing {'added' if action == 'add' else 'changed'}.")
    if action == "modify" and not values:
        raise CLIError("You didn't give me anything to set")
    change = {"action": action, "entity": entity, "names": names, "where": where, "values": values}
    if immediate:  # what was changed is said once it is: a refusal prints only its reason
        _ask(client, "POST", "/v1/associations", change)
        print(_describe(action, entity, names, values))
        return None
    print(_describe(action, entity, names, values))
    if not _confirm():
        print(" Changes Discarded")
        return None
    _ask(client, "POST", "/v1/associations", change)
    return None


def _ask(client: Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """The controller's answer; root's, while no controller answers, the accounting database's
    own (wattsched.cli.acctdirect: Slurm's sacctmgr needs no slurmctld either)."""
    try:
        return client.request(method, path, body)
    except Unreachable:
        if os.geteuid() != 0:
            raise
    from wattsched.cli import acctdirect

    return acctdirect.request(method, path, body)


def _show(client: Client, entity: str, names: list[str], where: dict[str, str], noheader: bool, parsable: bool,
          parsable2: bool, as_json: bool, assoc: bool = False) -> None:
    if entity == "tres":  # the trackable resources this system counts, with Slurm's ids
        from wattsched.dataparser import tres

        rows = tres({name: 0 for name in limits.TRES if name in TRES_LISTED})
    elif entity == "wckey":
        rows = _ask(client, "GET", "/v1/wckeys")["wckeys"]
    else:
        rows = _ask(client, "GET", "/v1/associations")[ROWS[entity]]
    wanted_accounts = set(where.get("account", "").split(",")) - {""}
    key = {"assoc": "user", "tres": "type"}.get(entity, "name")
    if entity == "assoc":
        rows = [r for r in rows if not wanted_accounts or r["account"] in wanted_accounts]
        wanted_users = set(names) | (set(where.get("user", "").split(",")) - {""})
        rows = [r for r in rows if not wanted_users or r["user"] in wanted_users]
    elif names:
        rows = [r for r in rows if r[key] in names]
    if as_json:
        print_json({ROWS[entity]: rows})
        return
    catalogue, default = FIELDS[entity], DEFAULTS[entity]
    spec = where.pop("format", "")
    if assoc:  # each account's (user's) associations, a line each, its own fields first
        rows = _with_associations(client, entity, rows)
        catalogue, default = {**FIELDS["assoc"], **FIELDS[entity]}, WITH_ASSOC[entity]
        spec = canonical_fields("assoc", spec or default)
    spec = canonical_fields(entity, spec or default)
    try:
        lines = fmt.field_table(rows, spec, catalogue, parsable, parsable2, header=not noheader)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    print("\n".join(lines))


# Slurm's default fields of show account/user with their associations (-s, WithAssoc)
WITH_ASSOC = {"account": "Account,Descr,Org,Cluster,ParentName,User,Share,Priority,GrpJ,GrpTRES,GrpS,GrpWall,"
                         "GrpTRESMins,MaxJ,MaxTRES,MaxS,MaxW,MaxTRESMins,QOS,Def QOS",
              "user": "User,Def Acct,Admin,Cluster,Account,Partition,Share,Priority,MaxJ,MaxTRES,MaxS,MaxW,"
                      "MaxTRESMins,QOS,Def QOS"}


def _with_associations(client: Client, entity: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each account's (or user's) row once per association of it, the association's fields beside
    its own: an account's are its own and its users', a user's those it is a member by."""
    associations = _ask(client, "GET", "/v1/associations")["associations"]
    key = "account" if entity == "account" else "user"
    return [{**a, **{k: v for k, v in row.items() if k not in a or k == "name"}}
            for row in rows for a in associations if a[key] == row["name"]]


def main() -> None:
    run("sacctmgr", lambda: sacctmgr(sys.argv[1:]))

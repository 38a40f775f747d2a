"""scontrol show assoc_mgr: the controller's associations, users and QOS with each limit and,
in brackets, what is held or used against it now, in Slurm's layout ("N" for no limit):

    GrpTRES=cpu=64(12),mem=N(2048),...     TRES held by running jobs
    GrpTRESMins=energy=1440000(5230)...    TRES-minutes used in the period (energy: joules)
    GrpTRESRunMins=cpu=N(360),...          TRES-minutes the running jobs may still use

    scontrol show assoc_mgr [flags=users,assoc,qos] [accounts=A,B] [users=U] [qos=Q] [-o]
"""

from __future__ import annotations

import pwd
from typing import Any

from wattsched.cli.common import CLIError

NO_VAL = 4294967294
FLAGS = ("users", "assoc", "qos")


def _uid(name: str) -> int:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return NO_VAL


def _count(limit: Any, used: float | None = None) -> str:
    shown = "N" if limit is None else str(limit)
    return shown if used is None else f"{shown}({int(used)})"


def _tres(name: str, tres: list[str], limits: dict[str, int], used: dict[str, float] | None) -> str:
    """Slurm's _print_tres_line: with usage every TRES, limit or N, and the usage in brackets;
    without, only the TRES that have a limit."""
    items = []
    for key in tres:
        limit = limits.get(key)
        if used is None:
            if limit is not None:
                items.append(f"{key}={limit}")
        else:
            items.append(f"{key}={_count(limit, used.get(key, 0))}")
    return f"{name}={','.join(items)}"


def _max(name: str, value: Any) -> str:
    return f"{name}={'' if value is None else value}"


def lines(data: dict[str, Any], flags: set[str], accounts: set[str], users: set[str], qos: set[str],
          oneliner: bool = False) -> list[str]:
    tres = data["tres"]
    out = ["Current Association Manager state"]
    sep = " " if oneliner else "\n    "
    if "users" in flags:
        chosen = [u for u in data["users"] if not users or u["name"] in users]
        out += ["", "User Records", ""] if chosen else ["", "No users currently cached in Slurm.", ""]
        out += [f"UserName={u['name']}({_uid(u['name'])}) DefAccount={u['default_account']} DefWckey= "
                "AdminLevel=None" for u in chosen]
    if "assoc" in flags:
        chosen = [a for a in data["associations"] if (not accounts or a["account"] in accounts)
                  and (not users or a["user"] in users)]
        out += ["", "Association Records", ""] if chosen else ["", "No associations currently cached in Slurm.", ""]
        for a in chosen:
            lim, use = a["limits"], a["usage"]
            user = f"{a['user']}({_uid(a['user'])})" if a["user"] else ""
            parent = a["account"] if a["user"] else a["parent"]
            fields = [
                f"ClusterName={data.get('cluster', '')} Account={a['account']} UserName={user} Partition= "
                f"Priority=0 ID=0",
                f"SharesRaw/Norm/Level/Factor={a['shares_raw']}/{a['shares_norm']:.2f}/{a['shares_raw']}/"
                f"{a['fairshare']:.2f}",
                f"UsageRaw/Norm/Efctv={a['usage_raw']:.2f}/{a['usage_norm']:.2f}/{a['usage_effective']:.2f}",
                f"ParentAccount={parent or ''} DefAssoc={'Yes' if a['user'] and a['default_qos'] else 'No'}",
                f"GrpJobs={_count(lim.get('grp_jobs'), use['jobs'])} GrpJobsAccrue=N(0)",
                f"GrpSubmitJobs={_count(lim.get('grp_submit'), use['submitted'])} "
                f"GrpWall={'N' if lim.get('grp_wall') is None else lim['grp_wall']}({use['wall_mins']:.2f})",
                _tres("GrpTRES", tres, lim.get("grp_tres", {}), use["tres"]),
                _tres("GrpTRESMins", tres, lim.get("grp_tres_mins", {}), use["tres_mins"]),
                _tres("GrpTRESRunMins", tres, lim.get("grp_tres_run_mins", {}), use["tres_run_mins"]),
                f"MaxJobs={_count(lim['max_jobs'], use['jobs']) if 'max_jobs' in lim else ''} MaxJobsAccrue= "
                f"MaxSubmitJobs={_count(lim['max_submit'], use['submitted']) if 'max_submit' in lim else ''} "
                f"{_max('MaxWallPJ', lim.get('max_wall'))}",
                _tres("MaxTRESPJ", tres, lim.get("max_tres_per_job", {}), None),
                "MaxTRESPN=",
                _tres("MaxTRESMinsPJ", tres, lim.get("max_tres_mins_per_job", {}), None),
                "MinPrioThresh=", "Comment=",
            ]
            out.append(sep.join(fields))
    if "qos" in flags:
        chosen = [q for q in data["qos"] if not qos or q["name"] in qos]
        out += ["", "QOS Records", ""] if chosen else ["", "No QOS currently cached in Slurm.", ""]
        for q in chosen:
            lim, use = q["limits"], q["usage"]
            fields = [
                f"QOS={q['name']}({q['id']})",
                f"UsageRaw={use['tres_mins'].get('cpu', 0.0) * 60:.6f}",
                f"GrpJobs={_count(lim.get('grp_jobs'), use['jobs'])} GrpJobsAccrue=N(0) "
                f"GrpSubmitJobs={_count(lim.get('grp_submit'), use['submitted'])} "
                f"GrpWall={'N' if lim.get('grp_wall') is None else lim['grp_wall']}({use['wall_mins']:.2f})",
                _tres("GrpTRES", tres, lim.get("grp_tres", {}), use["tres"]),
                _tres("GrpTRESMins", tres, lim.get("grp_tres_mins", {}), use["tres_mins"]),
                _tres("GrpTRESRunMins", tres, lim.get("grp_tres_run_mins", {}), use["tres_run_mins"]),
                _max("MaxWallPJ", lim.get("max_wall")),
                _tres("MaxTRESPJ", tres, lim.get("max_tres_per_job", {}), None),
                _tres("MaxTRESPN", tres, lim.get("max_tres_per_node", {}), None),
                _tres("MaxTRESMinsPJ", tres, lim.get("max_tres_mins_per_job", {}), None),
                "MinPrioThresh=",
                _tres("MinTRESPJ", tres, lim.get("min_tres_per_job", {}), None),
                f"PreemptMode={q['preempt_mode'].upper()}",
                f"Priority={q['priority']}",
                "Account Limits" + "".join(
                    f"{sep}  {acct}={{MaxJobsPA={_count(lim.get('max_jobs_per_account'), u['jobs'])} "
                    f"{_tres('MaxTRESPA', tres, lim.get('max_tres_per_account', {}), u['tres'])}}}"
                    for acct, u in sorted(q["accounts"].items())) if q["accounts"] else "Account Limits" + sep +
                "  No Accounts",
                "User Limits" + "".join(
                    f"{sep}  {name}({_uid(name)})={{MaxJobsPU={_count(lim.get('max_jobs'), u['jobs'])} "
                    f"{_tres('MaxTRESPU', tres, lim.get('max_tres_per_user', {}), u['tres'])}}}"
                    for name, u in sorted(q["users"].items())) if q["users"] else "User Limits" + sep + "  No Users",
            ]
            out.append(sep.join(fields))
    return out


def parse_filters(words: list[str]) -> tuple[set[str], set[str], set[str], set[str]]:
    """flags=, accounts=, users=, qos= (Slurm's keys, any case)."""
    flags, accounts, users, qos = set(FLAGS), set(), set(), set()
    for word in words:
        key, sep, value = word.partition("=")
        values = {v for v in value.split(",") if v}
        key = key.lower()
        if not sep:
            raise CLIError(f"Invalid assoc_mgr option: {word} (flags=, accounts=, users=, qos=)")
        if key == "flags":
            unknown = {v.lower() for v in values} - set(FLAGS)
            if unknown:
                raise CLIError(f"Invalid flag: {sorted(unknown)[0]} (users, assoc or qos)")
            flags = {v.lower() for v in values}
        elif key in ("accounts", "account"):
            accounts = values
        elif key in ("users", "user"):
            users = values
        elif key == "qos":
            qos = values
        else:
            raise CLIError(f"Invalid assoc_mgr option: {word} (flags=, accounts=, users=, qos=)")
    return flags, accounts, users, qos

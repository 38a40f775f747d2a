"""Clusters, accounts, users and their associations: what sacctmgr adds, modifies, deletes and
shows, and the job history the fair-share factors are computed from.

Every change runs in one transaction and is checked before anything is written, so a refused
request (unknown parent, negative shares, a duplicate) leaves the database as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Connection, Engine

from wattsched import confvalues, energypolicy, limits, prediction, states
from wattsched.accounting.models import (
    AccountRecord,
    AssociationRecord,
    ClusterRecord,
    JobRecord,
    QosRecord,
    UserRecord,
    table,
)
from wattsched.api import AssocRequest
from wattsched.fairshare import ROOT, Assoc, UsageRecord
from wattsched.limits import AssocLimits, LimitError, Limits, Qos

# a job's record in accounting, as Slurm's database keys it: (job id, submit time)
JobKey = tuple[int, float]

ADMIN_LEVELS = ("None", "Operator", "Administrator")
_ASSOC, _ACCOUNTS, _USERS = table(AssociationRecord), table(AccountRecord), table(UserRecord)
_QOS = table(QosRecord)
# what an account or a user association may set besides its shares: its limits and its QOS
ASSOC_SETTINGS = frozenset({*(n for k in limits.ASSOC_KEYS for n in k.names), "qos", "qos+", "qos-", "defaultqos"})
QOS_SETTINGS = frozenset({*(n for k in limits.QOS_KEYS for n in k.names), "description", "priority", "flags",
                          "flags+", "flags-", "preempt", "preempt+", "preempt-", "preemptmode", "preemptexempttime",
                          "gracetime", "usagefactor", "usagethreshold", "energypolicy"})


class AssocError(ValueError):
    """A sacctmgr request that is refused; the message says why."""


def _shares(value: Any) -> int:
    try:
        shares = int(value)
    except (TypeError, ValueError) as exc:
        raise AssocError(f"Invalid Fairshare value: {value}") from exc
    if shares < 0:
        raise AssocError(f"Invalid Fairshare value: {value}")
    return shares


def _admin_level(value: str) -> str:
    for level in ADMIN_LEVELS:
        if value.lower() == level.lower():
            return level
    raise AssocError(f"Invalid AdminLevel: {value} (None, Operator or Administrator)")


class AssocStore:
    """sacctmgr's operations on one cluster's associations."""

    def __init__(self, engine: Engine, cluster: str):
        self.engine, self.cluster = engine, cluster

    # --- reading ------------------------------------------------------------------------------------

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """What sacctmgr show lists: associations, accounts, users, clusters and QOS."""
        return {"associations": self.associations(), "accounts": self.accounts(), "users": self.users(),
                "clusters": self.clusters(), "qos": self.qos()}

    def associations(self) -> list[dict[str, Any]]:
        """Every association with its user's default account, root first."""
        with self.engine.connect() as conn:
            defaults = {r.name: r.default_account for r in conn.execute(select(_USERS))}
            rows = conn.execute(select(_ASSOC).where(_ASSOC.c.cluster == self.cluster)
                                .order_by(_ASSOC.c.account, _ASSOC.c.user))
            return [{"cluster": r.cluster, "account": r.account, "user": r.user, "parent": r.parent,
                     "shares": r.shares, "id": r.id, "default_account": defaults.get(r.user, ""),
                     "limits": json.loads(r.limits or "{}"), "qos": _names(r.qos), "default_qos": r.default_qos}
                    for r in rows]

    def assoc_limits(self) -> dict[tuple[str, str], AssocLimits]:
        """Every association's place, limits and QOS, as the limits read them."""
        return {(a["account"], a["user"]): AssocLimits(a["account"], a["user"], a["parent"] if not a["user"] else
                                                       a["account"], Limits.from_json(a["limits"]),
                                                       frozenset(a["qos"]), a["default_qos"])
                for a in self.associations()}

    def qos(self) -> list[dict[str, Any]]:
        """Every QOS, by name."""
        with self.engine.connect() as conn:
            return [_qos_row(r) for r in conn.execute(select(_QOS).order_by(_QOS.c.id))]

    def qos_records(self) -> dict[str, Qos]:
        return {q["name"]: qos_from_row(q) for q in self.qos()}

    def tree(self) -> list[Assoc]:
        return [Assoc(a["account"], a["user"], a["parent"], a["shares"]) for a in self.associations()]

    def accounts(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(_ACCOUNTS).order_by(_ACCOUNTS.c.name))]

    def users(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(_USERS).order_by(_USERS.c.name))]

    def clusters(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(table(ClusterRecord)))]

    def usage_records(self, since: float, skip: Collection[JobKey] = ()) -> list[UsageRecord]:
        """Finished jobs' use after ``since``: CPUs, run interval and energy, per user and account;
        none of the jobs ``skip`` names by (job id, submit time)."""
        jobs = table(JobRecord)
        return [UsageRecord(r.user, r.account, r.alloc_cpus, r.time_start, r.time_end,
                            float(r.consumed_energy_j or 0))
                for r in self._finished(since, skip, jobs.c.alloc_cpus, jobs.c.consumed_energy_j)]

    def use_records(self, since: float, skip: Collection[JobKey] = ()) -> list[limits.UseRecord]:
        """Finished jobs' use after ``since`` as the limits count it: TRES, QOS and energy; none of
        the jobs ``skip`` names."""
        jobs = table(JobRecord)
        return [limits.UseRecord(r.user, r.account, r.qos, limits.job_tres(
            r.alloc_cpus, r.nnodes, r.req_mem_mb * r.nnodes or r.req_mem_per_cpu * r.alloc_cpus, r.alloc_gpus, 0),
            r.time_start, r.time_end, float(r.consumed_energy_j or 0))
            for r in self._finished(since, skip, jobs.c.qos, jobs.c.alloc_cpus, jobs.c.nnodes, jobs.c.req_mem_mb,
                                    jobs.c.req_mem_per_cpu, jobs.c.alloc_gpus, jobs.c.consumed_energy_j)]

    def run_history(self, limit: int = 50000) -> dict[str, prediction.Prediction]:
        """The predictions of the jobs that ran before (wattsched.prediction): from the latest
        ``limit`` completed runs with a key and an energy."""
        jobs = table(JobRecord)
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.history_key, jobs.c.time_start, jobs.c.time_end, jobs.c.time_suspended,
                                       jobs.c.consumed_energy_j)
                                .where(jobs.c.cluster == self.cluster, jobs.c.history_key != "",
                                       jobs.c.state == states.COMPLETED, jobs.c.time_start > 0,
                                       jobs.c.consumed_energy_j.is_not(None))
                                .order_by(jobs.c.time_end.desc()).limit(limit)).all()
        return prediction.from_history((r.history_key, r.time_end - r.time_start - (r.time_suspended or 0.0),
                                        float(r.consumed_energy_j)) for r in rows)

    def _finished(self, since: float, skip: Collection[JobKey], *columns: Any) -> Sequence[Any]:
        """The rows of the jobs that ran and ended after ``since``, but those in ``skip``."""
        jobs = table(JobRecord)
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.job_id, jobs.c.time_submit, jobs.c.user, jobs.c.account,
                                       jobs.c.time_start, jobs.c.time_end, *columns)
                                .where(jobs.c.cluster == self.cluster, jobs.c.time_start > 0,
                                       jobs.c.time_end > since)).all()
        return [r for r in rows if (r.job_id, r.time_submit) not in skip] if skip else rows

    # --- changes ------------------------------------------------------------------------------------

    def apply(self, req: AssocRequest, now: float) -> None:
        """One sacctmgr change, for each name."""
        values, account = req.values, req.where.get("account", "")
        for name in req.names:
            if req.entity == "qos":
                if req.action == "add":
                    self.add_qos(name, values)
                elif req.action == "modify":
                    self.modify_qos(name, values)
                else:
                    self.delete_qos(name)
            elif req.entity == "cluster":
                if req.action != "add":
                    raise AssocError(f"{req.action} cluster is not supported: clusters are added, never changed")
                self.add_cluster(name, now)
            elif req.entity == "account":
                if req.action == "add":
                    unknown = set(values) - {"parent", "fairshare", "description", "organization"} - ASSOC_SETTINGS
                    if unknown:
                        raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
                    self.add_account(name, values.get("parent", "root"), values.get("fairshare", 1),
                                      values.get("description", ""), values.get("organization", ""), values)
                elif req.action == "modify":
                    self.modify_account(name, values)
                else:
                    self.delete_account(name)
            elif req.action == "add":
                unknown = set(values) - {"account", "defaultaccount", "fairshare", "adminlevel"} - ASSOC_SETTINGS
                if unknown:
                    raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
                self.add_user(name, values.get("account", ""), values.get("defaultaccount", ""),
                               values.get("fairshare", 1), values.get("adminlevel", ""), values)
            elif req.action == "modify":
                self.modify_user(name, values, account)
            else:
                self.delete_user(name, account)

    def add_cluster(self, name: str, now: float) -> None:
        with self.engine.begin() as conn:
            if conn.execute(select(table(ClusterRecord)).where(table(ClusterRecord).c.name == name)).first():
                raise AssocError(f"Cluster {name} already exists.  Nothing new added.")
            conn.execute(insert(table(ClusterRecord)).values(name=name, created=now))
        self._ensure_root(name)

    def ensure_root(self) -> None:
        self._ensure_root(self.cluster)

    def _ensure_root(self, cluster: str) -> None:
        """The root account and root user every cluster has."""
        with self.engine.begin() as conn:
            if not conn.execute(select(_ACCOUNTS).where(_ACCOUNTS.c.name == ROOT)).first():
                conn.execute(insert(_ACCOUNTS).values(name=ROOT, description="default root account",
                                                      organization="root", parent=""))
            if not conn.execute(select(_USERS).where(_USERS.c.name == "root")).first():
                conn.execute(insert(_USERS).values(name="root", default_account=ROOT, admin_level="Administrator"))
            for user in ("", "root"):
                if not self._assoc(conn, ROOT, user, cluster):
                    conn.execute(insert(_ASSOC).values(cluster=cluster, account=ROOT, user=user, parent="", shares=1))

    def add_account(self, name: str, parent: str = ROOT, shares: Any = 1, description: str = "",
                    organization: str = "", settings: dict[str, str] | None = None) -> None:
        shares = _shares(shares)
        with self.engine.begin() as conn:
            if not self._assoc(conn, parent, ""):
                raise AssocError(f"Parent account {parent} doesn't exist.")
            if self._assoc(conn, name, ""):
                raise AssocError(f"Account {name} already exists.  Nothing new added.")
            if not conn.execute(select(_ACCOUNTS).where(_ACCOUNTS.c.name == name)).first():
                conn.execute(insert(_ACCOUNTS).values(name=name, description=description or name,
                                                      organization=organization or parent, parent=parent))
            conn.execute(insert(_ASSOC).values(cluster=self.cluster, account=name, user="", parent=parent,
                                               shares=shares))
            self._settle(conn, name, "", settings or {})

    def add_user(self, name: str, account: str = "", default_account: str = "", shares: Any = 1,
                 admin_level: str = "", settings: dict[str, str] | None = None) -> None:
        shares = _shares(shares)
        level = _admin_level(admin_level) if admin_level else None
        accounts = [a for a in account.split(",") if a] or ([default_account] if default_account else [])
        with self.engine.begin() as conn:
            user = conn.execute(select(_USERS).where(_USERS.c.name == name)).first()
            if not accounts:
                if user is None:
                    raise AssocError("Need a default account for these users to add.")
                if level is None:
                    raise AssocError("Nothing new added.")
            for acct in accounts:
                if not self._assoc(conn, acct, ""):
                    raise AssocError(f"Account {acct} doesn't exist.")
                if self._assoc(conn, acct, name):
                    raise AssocError(f"User {name} already has an association with account {acct}.  "
                                     "Nothing new added.")
            default = default_account or (user.default_account if user else accounts[0])
            if default not in accounts and not (user and self._assoc(conn, default, name)):
                raise AssocError(f"Default account {default} is not one of the user's accounts.")
            if user is None:
                conn.execute(insert(_USERS).values(name=name, default_account=default, admin_level=level or "None"))
            elif level is not None or default_account:
                conn.execute(update(_USERS).where(_USERS.c.name == name).values(
                    default_account=default, admin_level=level or user.admin_level))
            for acct in accounts:
                conn.execute(insert(_ASSOC).values(cluster=self.cluster, account=acct, user=name, parent=acct,
                                                   shares=shares))
                self._settle(conn, acct, name, settings or {})

    def modify_account(self, name: str, values: dict[str, str]) -> None:
        unknown = set(values) - {"fairshare", "parent", "description", "organization"} - ASSOC_SETTINGS
        if unknown:
            raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
        with self.engine.begin() as conn:
            if not self._assoc(conn, name, "") or (name == ROOT and "parent" in values):
                raise AssocError(f"Account {name} doesn't exist." if name != ROOT else "Can't modify root's parent.")
            changes: dict[str, Any] = {}
            if "fairshare" in values:
                changes["shares"] = _shares(values["fairshare"])
            if "parent" in values:
                parent = values["parent"]
                if not self._assoc(conn, parent, "") or parent == name or name in self._ancestors(conn, parent):
                    raise AssocError(f"Parent account {parent} doesn't exist or would make a loop.")
                changes["parent"] = parent
            if changes:
                conn.execute(update(_ASSOC).where(self._where(name, "")).values(**changes))
            info: dict[str, str] = {k: values[k] for k in ("description", "organization") if k in values}
            if "parent" in values:
                info["parent"] = values["parent"]
            if info:
                conn.execute(update(_ACCOUNTS).where(_ACCOUNTS.c.name == name).values(**info))
            self._settle(conn, name, "", values)

    def modify_user(self, name: str, values: dict[str, str], account: str = "") -> None:
        unknown = set(values) - {"fairshare", "defaultaccount", "adminlevel"} - ASSOC_SETTINGS
        if unknown:
            raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
        with self.engine.begin() as conn:
            user = conn.execute(select(_USERS).where(_USERS.c.name == name)).first()
            if user is None:
                raise AssocError(f"User {name} doesn't exist.")
            if "fairshare" in values:
                where = self._where(account, name) if account else and_(_ASSOC.c.cluster == self.cluster,
                                                                         _ASSOC.c.user == name)
                conn.execute(update(_ASSOC).where(where).values(shares=_shares(values["fairshare"])))
            changes = {}
            if "defaultaccount" in values:
                if not self._assoc(conn, values["defaultaccount"], name):
                    raise AssocError(f"User {name} has no association with account {values['defaultaccount']}.")
                changes["default_account"] = values["defaultaccount"]
            if "adminlevel" in values:
                changes["admin_level"] = _admin_level(values["adminlevel"])
            if changes:
                conn.execute(update(_USERS).where(_USERS.c.name == name).values(**changes))
            accounts = [account] if account else [r.account for r in conn.execute(
                select(_ASSOC.c.account).where(_ASSOC.c.cluster == self.cluster, _ASSOC.c.user == name))]
            for acct in accounts:
                self._settle(conn, acct, name, values)

    # --- QOS ----------------------------------------------------------------------------------------

    def add_qos(self, name: str, values: dict[str, str]) -> None:
        unknown = set(values) - QOS_SETTINGS
        if unknown:
            raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
        with self.engine.begin() as conn:
            if conn.execute(select(_QOS.c.id).where(_QOS.c.name == name)).first():
                raise AssocError(f"Qos {name} already exists.  Nothing new added.")
            conn.execute(insert(_QOS).values(name=name, description=name))
            self._set_qos(conn, name, values)

    def modify_qos(self, name: str, values: dict[str, str]) -> None:
        unknown = set(values) - QOS_SETTINGS
        if unknown:
            raise AssocError(f"Unknown option: {sorted(unknown)[0]}")
        with self.engine.begin() as conn:
            if not conn.execute(select(_QOS.c.id).where(_QOS.c.name == name)).first():
                raise AssocError(f"Qos {name} doesn't exist.")
            self._set_qos(conn, name, values)

    def delete_qos(self, name: str) -> None:
        """As Slurm's: the QOS goes from every association that lists it (and is no longer a default),
        and from every QOS that may preempt it."""
        with self.engine.begin() as conn:
            if not conn.execute(select(_QOS.c.id).where(_QOS.c.name == name)).first():
                raise AssocError(f"Qos {name} doesn't exist.")
            for assoc in conn.execute(select(_ASSOC.c.id, _ASSOC.c.qos, _ASSOC.c.default_qos)).all():
                if name in _names(assoc.qos) or assoc.default_qos == name:
                    conn.execute(update(_ASSOC).where(_ASSOC.c.id == assoc.id).values(
                        qos=",".join(n for n in _names(assoc.qos) if n != name),
                        default_qos="" if assoc.default_qos == name else assoc.default_qos))
            conn.execute(delete(_QOS).where(_QOS.c.name == name))
            for row in conn.execute(select(_QOS.c.name, _QOS.c.preempt)):  # nobody preempts what is gone
                if name in _names(row.preempt):
                    conn.execute(update(_QOS).where(_QOS.c.name == row.name).values(
                        preempt=",".join(n for n in _names(row.preempt) if n != name)))

    def _set_qos(self, conn: Connection, name: str, values: dict[str, str]) -> None:
        row = conn.execute(select(_QOS).where(_QOS.c.name == name)).one()
        known = {r.name for r in conn.execute(select(_QOS.c.name))}
        changes: dict[str, Any] = {}
        try:
            updates = _limit_updates(limits.QOS_KEYS, values)
            if updates:
                changes["limits"] = json.dumps(Limits.from_json(json.loads(row.limits or "{}")).changed(updates)
                                               .to_json())
            if "description" in values:
                changes["description"] = values["description"]
            if "priority" in values:
                changes["priority"] = _integer(values["priority"], "Priority", 0, 2 ** 31 - 1)
            if "usagefactor" in values:
                changes["usage_factor"] = _number(values["usagefactor"], "UsageFactor", 0.0, 1e6)
            if "usagethreshold" in values:
                changes["usage_threshold"] = None if values["usagethreshold"] == "-1" else \
                    _number(values["usagethreshold"], "UsageThreshold", 0.0, 1.0)
            if "gracetime" in values:
                changes["grace_time"] = _integer(values["gracetime"], "GraceTime", 0, 2 ** 31 - 1)
            if "preemptexempttime" in values:
                exempt = limits.parse_minutes(values["preemptexempttime"])
                changes["preempt_exempt_time"] = None if exempt == limits.UNLIMITED else exempt
            if "preemptmode" in values:
                changes["preempt_mode"] = _preempt_mode(values["preemptmode"])
            if "energypolicy" in values:  # ours; "" or -1 clears it
                policy = values["energypolicy"].strip()
                changes["energy_policy"] = "" if policy in ("", "-1") else energypolicy.check(policy)
        except (LimitError, energypolicy.PolicyError) as exc:
            raise AssocError(str(exc)) from exc
        flags = _edit_list(_names(row.flags), values, "flags")
        if flags is not None:
            canonical = {f.lower(): f for f in limits.QOS_FLAGS}
            bad = [f for f in flags if f.lower() not in canonical and f.lower() != "none"]
            if bad:
                raise AssocError(f"Unknown QOS flag: {bad[0]} (one of {', '.join(limits.QOS_FLAGS)})")
            changes["flags"] = ",".join(canonical[f.lower()] for f in flags if f.lower() != "none")
        preempt = _edit_list(_names(row.preempt), values, "preempt")
        if preempt is not None:
            missing = [q for q in preempt if q not in known]
            if missing:
                raise AssocError(f"Qos {missing[0]} doesn't exist.")
            if name in preempt:
                raise AssocError(f"Qos {name} can't preempt itself.")
            changes["preempt"] = ",".join(preempt)
        if changes:
            conn.execute(update(_QOS).where(_QOS.c.name == name).values(**changes))

    def _settle(self, conn: Connection, account: str, user: str, values: dict[str, str]) -> None:
        """An association's limits and QOS from sacctmgr's settings (the others are not its)."""
        row = conn.execute(select(_ASSOC).where(self._where(account, user))).first()
        if row is None:
            return
        changes: dict[str, Any] = {}
        try:
            updates = _limit_updates(limits.ASSOC_KEYS, values)
        except LimitError as exc:
            raise AssocError(str(exc)) from exc
        if updates:
            changes["limits"] = json.dumps(Limits.from_json(json.loads(row.limits or "{}")).changed(updates).to_json())
        # QOS+= and QOS-= edit the list the association has, its own or, as in Slurm, its parent's
        qos = _edit_list(_names(row.qos) or self._inherited_qos(conn, row.parent if not user else account), values,
                         "qos")
        known = {r.name for r in conn.execute(select(_QOS.c.name))}
        if qos is not None:
            missing = [q for q in qos if q not in known]
            if missing:
                raise AssocError(f"Qos {missing[0]} doesn't exist.")
            changes["qos"] = ",".join(qos)
        if "defaultqos" in values:
            default = "" if values["defaultqos"] in ("", "-1") else values["defaultqos"]
            if default and default not in known:
                raise AssocError(f"Qos {default} doesn't exist.")
            allowed = qos if qos is not None else _names(row.qos)
            if default and allowed and default not in allowed:
                raise AssocError(f"Default QOS {default} is not in the association's QOS list "
                                 f"({','.join(allowed)}).")
            changes["default_qos"] = default
        if changes:
            conn.execute(update(_ASSOC).where(self._where(account, user)).values(**changes))

    def delete_account(self, name: str) -> None:
        with self.engine.begin() as conn:
            if name == ROOT or not self._assoc(conn, name, ""):
                raise AssocError(f"Account {name} doesn't exist." if name != ROOT else "Can't delete root.")
            children = conn.execute(select(_ASSOC).where(_ASSOC.c.cluster == self.cluster, (
                (_ASSOC.c.account == name) & (_ASSOC.c.user != "")) | ((_ASSOC.c.parent == name) &
                                                                        (_ASSOC.c.user == "")))).first()
            if children:
                raise AssocError(f"Account {name} still has users or sub-accounts: delete them first.")
            conn.execute(delete(_ASSOC).where(self._where(name, "")))
            conn.execute(delete(_ACCOUNTS).where(_ACCOUNTS.c.name == name))

    def delete_user(self, name: str, account: str = "") -> None:
        with self.engine.begin() as conn:
            where = self._where(account, name) if account else and_(_ASSOC.c.cluster == self.cluster,
                                                                     _ASSOC.c.user == name)
            if not conn.execute(select(_ASSOC.c.id).where(where)).first():
                raise AssocError(f"User {name} doesn't exist." if not account else
                                 f"User {name} has no association with account {account}.")
            conn.execute(delete(_ASSOC).where(where))
            left = conn.execute(select(_ASSOC.c.account).where(_ASSOC.c.user == name)).first()
            if left is None:
                conn.execute(delete(_USERS).where(_USERS.c.name == name))
            else:
                conn.execute(update(_USERS).where(_USERS.c.name == name, _USERS.c.default_account == account)
                             .values(default_account=left.account))

    # --- helpers ------------------------------------------------------------------------------------

    def _where(self, account: str, user: str):
        return and_(_ASSOC.c.cluster == self.cluster, _ASSOC.c.account == account, _ASSOC.c.user == user)

    def _assoc(self, conn: Connection, account: str, user: str, cluster: str | None = None):
        cluster = cluster or self.cluster
        return conn.execute(select(_ASSOC.c.id).where(_ASSOC.c.cluster == cluster, _ASSOC.c.account == account,
                                                      _ASSOC.c.user == user)).first()

    def _inherited_qos(self, conn: Connection, account: str) -> list[str]:
        """The QOS list an association under ``account`` inherits: the nearest account's up the
        tree that has one (root's default: normal)."""
        seen: set[str] = set()
        while account and account not in seen:
            seen.add(account)
            row = conn.execute(select(_ASSOC.c.parent, _ASSOC.c.qos).where(self._where(account, ""))).first()
            if row is None:
                break
            if _names(row.qos):
                return _names(row.qos)
            account = row.parent
        return ["normal"] if conn.execute(select(_QOS.c.id).where(_QOS.c.name == "normal")).first() else []

    def _ancestors(self, conn: Connection, account: str) -> set[str]:
        seen: set[str] = set()
        while account and account not in seen:
            seen.add(account)
            row = conn.execute(select(_ASSOC.c.parent).where(self._where(account, ""))).first()
            account = row.parent if row else ""
        return seen


def _names(text: str) -> list[str]:
    return [n for n in (text or "").split(",") if n]


def _edit_list(current: list[str], values: dict[str, str], key: str) -> list[str] | None:
    """A list setting as sacctmgr edits it: ``key=a,b`` replaces, ``key+=c`` adds, ``key-=a``
    removes; None when not given."""
    if key not in values and f"{key}+" not in values and f"{key}-" not in values:
        return None
    result = _names(values[key]) if key in values else list(current)
    result.extend(n for n in _names(values.get(f"{key}+", "")) if n not in result)
    removed = set(_names(values.get(f"{key}-", "")))
    return [n for n in result if n not in removed]


def _limit_updates(keys: tuple[limits.LimitKey, ...], values: dict[str, str]) -> dict[str, Any]:
    updates: dict[str, Any] = {}
    for name, text in values.items():
        key = limits.find_key(keys, name)
        if key is not None:
            updates[key.field] = limits.parse_limit(key, text)
    return updates


def _integer(text: str, what: str, low: int, high: int) -> int:
    return int(_number(text, what, low, high, int))


def _number(text: str, what: str, low: float, high: float, cast: Callable[[str], float] = float) -> float:
    try:
        value = cast(text)
    except ValueError as exc:
        raise LimitError(f"Invalid {what}: {text}") from exc
    if not low <= value <= high:  # (NaN fails too)
        raise LimitError(f"Invalid {what}: {text} (from {low} to {high})")
    return value


def _preempt_mode(text: str) -> str:
    """A QOS's PreemptMode: "cluster" (the cluster's PreemptMode applies) or one of its values."""
    if text.strip().lower() == "cluster":
        return "cluster"
    try:
        return confvalues.preempt_mode(text)
    except ValueError as exc:
        raise LimitError(f"Invalid PreemptMode: {exc}") from exc


def _qos_row(row: Any) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "description": row.description, "priority": row.priority,
            "flags": _names(row.flags), "usage_factor": row.usage_factor, "usage_threshold": row.usage_threshold,
            "preempt": _names(row.preempt), "preempt_mode": row.preempt_mode,
            "preempt_exempt_time": row.preempt_exempt_time, "grace_time": row.grace_time,
            "limits": json.loads(row.limits or "{}"), "energy_policy": row.energy_policy or ""}


def qos_from_row(row: dict[str, Any]) -> Qos:
    """A QOS record (as :meth:`AssocStore.qos` gives it) as the limits read it."""
    return Qos(row["name"], row["id"], row["description"], row["priority"], frozenset(row["flags"]),
               row["usage_factor"], row["usage_threshold"], frozenset(row["preempt"]), row["preempt_mode"],
               row["preempt_exempt_time"], row["grace_time"], Limits.from_json(row["limits"]),
               row.get("energy_policy", ""))

"""Clusters, accounts, users and their associations: what sacctmgr adds, modifies, deletes and
shows, and the job history the fair-share factors are computed from.

Every change runs in one transaction and is checked before anything is written, so a refused
request (unknown parent, negative shares, a duplicate) leaves the database as it was.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Connection, Engine

from wattsched.accounting.models import AccountRecord, AssociationRecord, ClusterRecord, JobRecord, UserRecord
from wattsched.fairshare import ROOT, Assoc, UsageRecord

ADMIN_LEVELS = ("None", "Operator", "Administrator")
_ASSOC, _ACCOUNTS, _USERS = AssociationRecord.__table__, AccountRecord.__table__, UserRecord.__table__


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

    def associations(self) -> list[dict[str, Any]]:
        """Every association with its user's default account, root first."""
        with self.engine.connect() as conn:
            defaults = {r.name: r.default_account for r in conn.execute(select(_USERS))}
            rows = conn.execute(select(_ASSOC).where(_ASSOC.c.cluster == self.cluster)
                                .order_by(_ASSOC.c.account, _ASSOC.c.user))
            return [{"cluster": r.cluster, "account": r.account, "user": r.user, "parent": r.parent,
                     "shares": r.shares, "id": r.id, "default_account": defaults.get(r.user, "")} for r in rows]

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
            return [dict(r._mapping) for r in conn.execute(select(ClusterRecord.__table__))]

    def usage_records(self, since: float) -> list[UsageRecord]:
        """Finished jobs' use after ``since``: CPUs, run interval and energy, per user and account."""
        jobs = JobRecord.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.user, jobs.c.account, jobs.c.alloc_cpus, jobs.c.time_start,
                                       jobs.c.time_end, jobs.c.consumed_energy_j)
                                .where(jobs.c.cluster == self.cluster, jobs.c.time_start > 0,
                                       jobs.c.time_end > since))
            return [UsageRecord(r.user, r.account, r.alloc_cpus, r.time_start, r.time_end,
                                float(r.consumed_energy_j or 0)) for r in rows]

    # --- changes ------------------------------------------------------------------------------------

    def add_cluster(self, name: str, now: float) -> None:
        with self.engine.begin() as conn:
            if conn.execute(select(ClusterRecord.__table__).where(ClusterRecord.__table__.c.name == name)).first():
                raise AssocError(f"Cluster {name} already exists.  Nothing new added.")
            conn.execute(insert(ClusterRecord.__table__).values(name=name, created=now))
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
                    organization: str = "") -> None:
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

    def add_user(self, name: str, account: str = "", default_account: str = "", shares: Any = 1,
                 admin_level: str = "") -> None:
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

    def modify_account(self, name: str, values: dict[str, str]) -> None:
        unknown = set(values) - {"fairshare", "parent", "description", "organization"}
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
            info = {k: values[k] for k in ("description", "organization") if k in values}
            if "parent" in values:
                info["parent"] = values["parent"]
            if info:
                conn.execute(update(_ACCOUNTS).where(_ACCOUNTS.c.name == name).values(**info))

    def modify_user(self, name: str, values: dict[str, str], account: str = "") -> None:
        unknown = set(values) - {"fairshare", "defaultaccount", "adminlevel"}
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

    def _ancestors(self, conn: Connection, account: str) -> set[str]:
        seen: set[str] = set()
        while account and account not in seen:
            seen.add(account)
            row = conn.execute(select(_ASSOC.c.parent).where(self._where(account, ""))).first()
            account = row.parent if row else ""
        return seen

"""Who may do what, and which jobs a reference names: administrators (root, AdminUsers,
sacctmgr's operators), the owner rule, what PrivateData hides from other users, and job references
(12, 12_3, 12_[1-4]).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from wattsched.auth import Identity
from wattsched.controller.actions import Refused
from wattsched.model import Job

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

MAX_JOB_REF = 64  # characters of a job reference (12, 12_3, 12_[1-4]) before it is looked at


def is_admin(state: ClusterState, who: Identity) -> bool:
    """root, AdminUsers, the controller itself, and users sacctmgr made Operator or Administrator."""
    return (who.uid == 0 or who.user in state.config.admin_users or who.role == "controller"
            or who.user in state.shares.admins)


def is_super_user(state: ClusterState, who: Identity) -> bool:
    """Slurm's super user, who alone may shut the cluster down: root, AdminUsers, the controller
    itself, and users sacctmgr made Administrator (not Operator)."""
    return (who.uid == 0 or who.user in state.config.admin_users or who.role == "controller"
            or who.user in state.shares.administrators)


def resolve(state: ClusterState, job_ref: str) -> list[Job]:
    """Jobs named by ``12`` (a job, or every task of array 12) or ``12_3`` (one task)."""
    if len(job_ref) > MAX_JOB_REF:
        raise Refused("Invalid job id specified: too long")
    try:
        if "_" in job_ref:
            array_s, task_s = job_ref.split("_", 1)
            array_id, task_ids = int(array_s), TaskRanges(task_s)
            found = [j for j in state.jobs.values()
                     if j.array_job_id == array_id and j.array_task_id in task_ids]
        else:
            job_id = int(job_ref)
            job = state.jobs.get(job_id)
            if job is None or job.array_job_id == job_id:  # an array's tasks (its first may be gone)
                found = [j for j in state.jobs.values() if j.array_job_id == job_id and j.array_task_id is not None]
            else:
                found = [job]
    except ValueError as exc:
        raise Refused(f"Invalid job id specified: {job_ref}") from exc
    if not found:
        raise Refused("Invalid job id specified", 404)
    return found


def sees_all(state: ClusterState, who: Identity, kind: str) -> bool:
    """Whether ``who`` sees every user's ``kind`` (PrivateData: jobs, usage, users, accounts), or
    only their own: administrators and the daemons see everything, as Slurm's SlurmUser and
    operators do."""
    return kind not in state.config.private_data or who.is_daemon or is_admin(state, who)


def visible(state: ClusterState, who: Identity, jobs: Iterable[Job]) -> list[Job]:
    """The jobs ``who`` may see: all, or under PrivateData=jobs their own."""
    if sees_all(state, who, "jobs"):
        return list(jobs)
    return [job for job in jobs if job.uid == who.uid]


def record_users(state: ClusterState, who: Identity, users: tuple[str, ...]) -> tuple[str, ...] | None:
    """The users whose accounting records a query asking for ``users`` (none: everyone's) may
    return to ``who``; None when it may return nothing (PrivateData=jobs, another user's asked)."""
    if sees_all(state, who, "jobs"):
        return users
    return (who.user,) if not users or who.user in users else None


def private_rows(state: ClusterState, who: Identity, rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """PrivateData: of association-shaped rows (``account``, ``user``), what ``who`` may see of
    ``kind``: all; or (``users``, ``usage``) their own rows and those of the accounts they are in;
    or (``accounts``) every row of the accounts they are in."""
    if sees_all(state, who, kind):
        return rows
    mine = {r["account"] for r in rows if r.get("user") == who.user}
    if kind == "accounts":
        return [r for r in rows if r["account"] in mine]
    return [r for r in rows if r.get("user") == who.user or (not r.get("user") and r["account"] in mine)]


def private_accounts(state: ClusterState, who: Identity, assocs: list[dict[str, Any]], accounts: list[dict[str, Any]],
                     users: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], ...]:
    """What sacctmgr (and slurmrestd's slurmdb) may show ``who`` of the associations, accounts and
    users: PrivateData=users keeps their own user and associations, PrivateData=accounts the
    accounts they are in."""
    mine = {a["account"] for a in assocs if a["user"] == who.user}
    if not sees_all(state, who, "users"):
        users = [u for u in users if u["name"] == who.user]
    if not sees_all(state, who, "accounts"):
        accounts = [a for a in accounts if a["name"] in mine]
    return private_rows(state, who, private_rows(state, who, assocs, "users"), "accounts"), accounts, users


def check_owner(state: ClusterState, job: Job, who: Identity) -> None:
    if job.uid != who.uid and not is_admin(state, who):
        raise Refused("Access/permission denied", 403)


class TaskRanges:
    """Array task ids named by ``3``, ``[1-4,7]``: kept as ranges, never expanded (``0-20000000`` is
    as cheap as ``3``); the text is already bounded by MAX_JOB_REF."""

    def __init__(self, text: str):
        self.ranges = []
        for part in text.strip("[]").split(","):
            first, _, last = part.partition("-")
            low, high = int(first), int(last or first)
            if low < 0 or high < low:
                raise ValueError(text)
            self.ranges.append((low, high))

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, int) and any(low <= task_id <= high for low, high in self.ranges)

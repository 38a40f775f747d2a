"""The controller's side of QOS and association limits (Slurm's acct_policy): the accounts part
of a pass's snapshot (the QOS, the associations' limits and use, the active jobs), and what a
submission is checked against before it is queued (its QOS, its time limit under MaxWall, the
submit limits, DenyOnLimit). The verdicts are :mod:`wattsched.limits`'s.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from wattsched import ledger, limits, states
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.config import Config, PartitionConf
from wattsched.controller.actions import Refused
from wattsched.model import Job

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


def watts_per_cpu(config: Config) -> dict[str, float]:
    """Per partition, the most a CPU of its nodes draws (MaxWatts / CPUs): a pending job's power."""
    per_node = {n.name: (n.max_watts or 0) / n.cpus for n in config.nodes if n.cpus}
    return {p.name: max((per_node.get(n, 0.0) for n in p.nodes), default=0.0) for p in config.partitions}


def active_job(job: Job, config_watts: dict[str, float]) -> limits.ActiveJob:
    """A running job as the limits count it; its power is its CPUs' share of its nodes' MaxWatts."""
    nodes = len(job.alloc.alloc_cpus)
    watts = sum(cpus * config_watts.get(name, 0.0) for name, cpus in job.alloc.alloc_cpus.items())
    tres = limits.job_tres(job.num_cpus, nodes, job.alloc.alloc_mem_mb * nodes, job.num_gpus, watts)
    end = job.start_time + job.suspended_s + job.time_limit_min * 60 if job.time_limit_min is not None else None
    return limits.ActiveJob(job.job_id, job.user, job.account, job.qos, tres, end, job.partition)


def snapshot(state: ClusterState) -> limits.AccountsSnap | None:
    """The accounts part of a pass's snapshot; None without accounting (no QOS is known then)."""
    shares = state.shares
    if not shares.qos:
        return None
    memo = state.memo
    if memo.watts_per_cpu is None:
        memo.watts_per_cpu = watts_per_cpu(state.config)
        memo.cpu_watts = {n.name: (n.max_watts or 0) / n.cpus for n in state.config.nodes if n.cpus}
    active = tuple(active_job(j, memo.cpu_watts) for j in state.jobs.values() if j.state == states.RUNNING) \
        if {"limits", "safe"} & set(state.config.accounting_storage_enforce) else ()
    return limits.AccountsSnap(shares.qos, shares.assoc_limits, shares.assoc_use, shares.qos_use, active,
                               frozenset(state.config.accounting_storage_enforce), memo.watts_per_cpu,
                               partition_qos(state.config))


def partition_qos(config: Config) -> dict[str, str]:
    return {p.name: p.qos for p in config.partitions if p.qos}


def settle(state: ClusterState, req: JobSubmit, who: Identity) -> JobSubmit:
    """A submission's QOS (as asked, else its association's default) and, under a MaxWall, its
    time limit when it gave none; refused for a QOS that does not exist or, with
    AccountingStorageEnforce=qos, that its association may not use."""
    shares = state.shares
    if not shares.qos:  # no accounting: QOS are not known, the job keeps what it asked
        return req
    snap = limits.AccountsSnap(shares.qos, shares.assoc_limits)
    enforce = set(state.config.accounting_storage_enforce)
    qos = req.qos or snap.default_qos(req.account, who.user)
    if qos and qos not in shares.qos:
        raise Refused(limits.INVALID_QOS)
    if "qos" in enforce and qos not in snap.allowed_qos(req.account, who.user):
        raise Refused(limits.INVALID_QOS)
    if qos and "RequiresReservation" in shares.qos[qos].flags and not req.reservation:
        raise Refused(limits.INVALID_QOS)  # Slurm's: "qos %s can only be used in a reservation"
    partition = next((p for p in state.config.partitions if p.name == req.partition), None) if req.partition \
        else state.config.default_partition()
    if partition is not None and qos and not qos_allowed(partition, qos):
        # Slurm's: "Job's QOS not permitted to use this partition (debug allows normal not high)"
        raise Refused(limits.INVALID_QOS)
    update: dict[str, object] = {"qos": qos}
    if not req.time_limit and {"limits", "safe"} & enforce:
        max_wall = snap.max_wall(req.account, who.user, qos)
        if max_wall is not None:
            update["time_limit"] = str(max_wall)
    return req.model_copy(update=update)


def qos_allowed(partition: PartitionConf, qos: str) -> bool:
    """The partition's AllowQos and DenyQos let ``qos`` in."""
    return ("ALL" in partition.allow_qos or qos in partition.allow_qos) and qos not in partition.deny_qos


def check_submit(state: ClusterState, jobs: list[Job], skip: int = 0) -> None:
    """The submit limits (MaxSubmitJobs*, GrpSubmitJobs of the QOS and up the association tree)
    and, for a QOS with DenyOnLimit, its per-job limits: refused as Slurm refuses them. ``skip``: a
    queued job that ``jobs`` stand for (one moved to another partition), not counted twice."""
    shares = state.shares
    if not jobs or not shares.qos or not {"limits", "safe"} & set(state.config.accounting_storage_enforce):
        return
    first = jobs[0]
    snap = limits.AccountsSnap(shares.qos, shares.assoc_limits, partition_qos=partition_qos(state.config))
    asked = first.request
    ask = limits.Ask(first.user, first.account, first.qos, *limits.request_tres(
        asked.ntasks, asked.cpus_per_task, asked.nodes_min, asked.mem_per_node_mb, asked.mem_per_cpu_mb,
        first.gpu_request, 0.0), first.time_limit_min, first.partition)
    if ledger.per_job_refusal(snap, ask) is not None:  # (only under a QOS with DenyOnLimit)
        raise Refused(limits.SUBMIT_REFUSED)
    user_jobs = 0
    accounts: Counter[str] = Counter()
    by_qos: Counter[str] = Counter()
    qos_user: Counter[str] = Counter()
    qos_account: Counter[str] = Counter()
    chains: dict[str, list[str]] = {}
    for job in state.jobs.values():
        if job.state in states.FINISHED or job.job_id == skip:
            continue
        if job.user == first.user and job.account == first.account:
            user_jobs += 1
        chain = chains.get(job.account)
        if chain is None:
            chain = chains[job.account] = [a.account for a in snap.chain(job.account, "") if not a.user]
        accounts.update(chain)
        for name in snap.qos_of(job.qos, job.partition):
            by_qos[name] += 1
            qos_user[name] += job.user == first.user
            qos_account[name] += job.account == first.account
    refusal = ledger.submit_refusal(snap, ask, len(jobs), user_jobs, accounts, by_qos, qos_user, qos_account)
    if refusal is not None:
        raise Refused(refusal)


def manager_view(state: ClusterState, now: float) -> dict[str, Any]:
    """What ``scontrol show assoc_mgr`` shows: every association and QOS with its limits and what
    is held against them now (running jobs and their TRES, jobs queued, TRES-minutes still to
    run) and used in the period (TRES-minutes, energy in joules, wall minutes)."""
    shares = state.shares
    memo = state.memo
    if memo.watts_per_cpu is None:
        snapshot(state)  # fills the per-node watts
    running = tuple(active_job(j, memo.cpu_watts) for j in state.jobs.values() if j.state == states.RUNNING)
    snap = limits.AccountsSnap(shares.qos, shares.assoc_limits, shares.assoc_use, shares.qos_use, running)
    book = ledger.Ledger(snap, now, {})
    queued: Counter[tuple[str, str]] = Counter()
    queued_qos: Counter[str] = Counter()
    for job in state.jobs.values():
        if job.state not in states.FINISHED:
            for assoc in snap.chain(job.account, job.user):
                queued[assoc.key] += 1
            queued_qos[job.qos] += 1

    def usage(held: ledger.Held | None, use: limits.Use, submitted: int) -> dict[str, Any]:
        held = held or ledger.Held()
        return {"jobs": held.jobs, "submitted": submitted, "tres": dict(held.tres), "wall_mins": use.wall_mins,
                "tres_mins": dict(use.tres_mins), "tres_run_mins": {
                    **{k: v for k, v in held.run_mins.items() if k != "power"},
                    **({"energy": held.run_mins["power"] * 60.0} if "power" in held.run_mins else {})}}

    rows = {(r.account, r.user): r for r in shares.rows}
    assocs = []
    for key, assoc in sorted(shares.assoc_limits.items()):
        row = rows.get(key)
        assocs.append({"account": assoc.account, "user": assoc.user, "parent": assoc.parent,
                       "limits": assoc.limits.to_json(), "qos": sorted(assoc.qos), "default_qos": assoc.default_qos,
                       "shares_raw": row.raw_shares if row else 0, "shares_norm": row.norm_shares if row else 0.0,
                       "fairshare": row.fairshare if row else 0.0, "usage_raw": row.raw_usage if row else 0.0,
                       "usage_norm": row.norm_usage if row else 0.0,
                       "usage_effective": row.effective_usage if row else 0.0,
                       "usage": usage(book.assoc.get(key), shares.assoc_use.get(key, limits.NO_USE), queued[key])})
    qos_rows = []
    for name, qos in sorted(shares.qos.items(), key=lambda item: item[1].id):
        per_user = {user: {"jobs": held.jobs, "tres": dict(held.tres)}
                    for (q, user), held in book.qos_user.items() if q == name}
        per_account = {account: {"jobs": held.jobs, "tres": dict(held.tres)}
                       for (q, account), held in book.qos_account.items() if q == name}
        qos_rows.append({"name": name, "id": qos.id, "priority": qos.priority, "preempt_mode": qos.preempt_mode,
                         "limits": qos.limits.to_json(), "users": per_user, "accounts": per_account,
                         "usage": usage(book.qos.get(name), shares.qos_use.get(name, limits.NO_USE),
                                        queued_qos[name])})
    users = sorted({(a.user, shares.default_account.get(a.user, "")) for a in shares.assoc_limits.values() if a.user})
    return {"time": now, "cluster": state.config.cluster_name, "tres": list(limits.TRES),
            "users": [{"name": u, "default_account": d} for u, d in users],
            "associations": assocs, "qos": qos_rows}

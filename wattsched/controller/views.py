"""What the API shows of jobs, nodes and partitions: plain dicts the CLI formats."""

from __future__ import annotations

import math
from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from wattsched import gres, hostlist, licenses, nodestates, patterns, states
from wattsched.config import Config
from wattsched.model import JOB_FIELD_PATHS, Job, Node

if TYPE_CHECKING:
    from wattsched.controller.reservations import ReservationBook

_HIDDEN = {"app_model", "completing_nodes", "steps"}
_BRIEF = ("job_id", "array_job_id", "array_task_id", "array_throttle", "name", "user", "uid", "group", "account", "qos",
          "partition", "state", "reason", "hold", "priority", "time_limit_min", "start_time", "end_time",
          "submit_time", "work_dir", "dependency", "comment", "nice", "batch_host", "exc_nodes", "req_nodes",
          "wckey", "exit_code", "term_signal", "expected_start", "reservation", "gid", "features",
          "mem_per_node_mb", "mem_per_cpu_mb", "cpus_per_task", "ntasks", "ntasks_per_node", "exclusive", "tmp_mb",
          "requeue", "restart_count", "eligible_time", "consumed_energy_j", "interactive", "energy_policy",
          "exp_elapsed_s", "exp_energy_j", "exp_watts", "licenses")
_brief_values = attrgetter(*(JOB_FIELD_PATHS[key] for key in _BRIEF))  # one call for all, parts' fields too
_STATE = _BRIEF.index("state")
# a listing's record: these keys, in this order; brief_values gives its values
BRIEF_KEYS = (*_BRIEF, "display_id", "node_list", "num_nodes", "num_cpus", "run_time_s", "command", "tres_per_node",
              "tres_per_task", "tres_per_job", "num_gpus")
RUN_TIME = BRIEF_KEYS.index("run_time_s")
DISPLAY_ID = BRIEF_KEYS.index("display_id")


def brief_values(job: Job, now: float) -> tuple[Any, ...]:
    """What listings (squeue) need, in BRIEF_KEYS' order: a tuple, a third of a dict's size, which
    the controller keeps for every job a listing has shown, and cheap to send for 10,000 jobs."""
    own = list(_brief_values(job))
    own[_STATE] = job.shown_state
    asked = job.request
    gpus = job.gpu_request
    where, text = gpus.tres() if gpus else ("", "")
    return (*own, job.display_id, job.alloc.nodes_expr, len(job.alloc.alloc_cpus) or asked.nodes_min,
            job.num_cpus or asked.ntasks * asked.cpus_per_task, run_time(job, now), asked.command or "(null)",
            *(text if key == where else "" for key in ("tres_per_node", "tres_per_task", "tres_per_job")),
            job.num_gpus)


def job_brief(job: Job, now: float) -> dict[str, Any]:
    """A listing's record as a dict (BRIEF_KEYS and brief_values)."""
    return dict(zip(BRIEF_KEYS, brief_values(job, now), strict=True))


def job_view(job: Job, now: float) -> dict[str, Any]:
    """Everything about a job but its script and environment (scontrol show job)."""
    data = {k: v for k, v in job.to_dict().items() if k not in _HIDDEN}
    data.update(job_brief(job, now))
    data.update(
        std_out_path=output_path(job, job.request.std_out),
        std_err_path=output_path(job, job.request.std_err or job.request.std_out),
        steps=[{"step_id": s.step_id, "name": s.name, "state": s.state, "nodes": hostlist.compress(s.nodes),
                "ntasks": s.ntasks, "start_time": s.start_time} for s in job.steps],
    )
    return data


def output_path(job: Job, pattern: str) -> str:
    """A job's --output/--error/--input pattern expanded as Slurm shows it (scontrol StdOut=)."""
    return patterns.expand(pattern, job_id=job.job_id, job_name=job.name, user=job.user,
                           node=job.alloc.batch_host, array_job_id=job.array_job_id,
                           array_task_id=job.array_task_id, work_dir=job.request.work_dir)


def run_time(job: Job, now: float) -> float:
    if not job.start_time:
        return 0.0
    if job.state in (states.RUNNING,):
        return now - job.start_time - job.suspended_until(now)
    return max(0.0, (job.end_time or now) - job.start_time - job.suspended_s)


def license_view(snap: licenses.LicenseSnap | None) -> list[dict[str, Any]]:
    """The cluster's licenses by name (scontrol show licenses): each one's total, what the allocated
    jobs hold (Used; an administrator's update may take it past the total for a while) and what
    is left (Free). None are reserved or served by the accounting database here."""
    if snap is None:
        return []
    used = snap.used()
    return [{"name": name, "total": total, "used": used.get(name, 0), "free": max(0, total - used.get(name, 0)),
             "reserved": 0, "remote": False} for name, total in sorted(snap.totals.items())]


def job_gpus(job: Job, nodes: dict[str, Node]) -> dict[str, Any]:
    """A job's GPUs as scontrol -d shows them: by type in all, and per node with their numbers."""
    devices = {n: nodes[n].gpus for n in job.alloc.alloc_gpus if n in nodes}
    return {"job_gres": gres.job_gres(job.alloc.alloc_gpus, devices),
            "gres_detail": gres.job_detail(job.alloc.alloc_gpus, devices)}


def node_view(node: Node, now: float, reserved: str = "") -> dict[str, Any]:
    """A node for sinfo and scontrol; ``reserved`` is RESERVED or MAINT inside an active reservation."""
    return {
        "gres": gres.format_node(node.gres), "gpus": gres.total(node.gres), "alloc_gpus": len(node.alloc_gpus),
        "gres_used": gres.format_used(node.gpus, node.gres, node.alloc_gpus),
        "name": node.name, "address": node.address or node.name, "hostname": node.hostname or node.name,
        "port": node.port, "cpus": node.cpus, "alloc_cpus": node.alloc_cpus,
        "real_memory_mb": node.real_memory_mb, "alloc_mem_mb": node.alloc_mem_mb, "tmp_disk_mb": node.tmp_disk_mb,
        "sockets": node.sockets, "cores_per_socket": node.cores_per_socket,
        "threads_per_core": node.threads_per_core, "weight": node.weight, "features": list(node.features),
        "partitions": list(node.partitions),
        "state": nodestates.node_state_long(node.base_state, node.drain, node.not_responding, reserved=reserved,
                                        power=node.power),
        "state_short": nodestates.node_state_short(node.base_state, node.drain, node.not_responding, reserved=reserved,
                                               power=node.power),
        "state_sinfo": nodestates.node_state_sinfo_long(node.base_state, node.drain, node.not_responding,
                                                    reserved=reserved, power=node.power),
        "power": node.power, "power_since": node.power_since,
        "base_state": node.base_state, "drain": node.drain, "not_responding": node.not_responding,
        "reason": node.reason, "reason_time": node.reason_time, "reason_uid": node.reason_uid,
        "instance_id": node.instance_id, "instance_type": node.instance_type,
        "boot_time": node.boot_time, "last_seen": node.last_seen, "agent_url": node.agent_url,
        "idle_watts": node.idle_watts, "max_watts": node.max_watts, "power_save_watts": node.power_save_watts,
        "down_watts": node.down_watts, "power_cap_priority": node.power_cap_priority,
        "current_watts": round(node.current_watts), "ave_watts": round(node.ave_watts),
        "energy_error": node.energy_error, "cap_watts": node.ordered_limit, "limit_watts": node.limit_watts,
        "limit_error": node.limit_error,
        "consumed_joules": round(node.consumed_joules), "metered": bool(node.energy_samples),
        "lowest_joules": round(node.energy_first[1]) if node.energy_first else 0,
    }


def node_views(nodes: dict[str, Node], book: ReservationBook, now: float,
               names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """:func:`node_view` of the named nodes (all by default), each marked RESERVED or MAINT while an
    active reservation holds it (sinfo and scontrol, and the REST API's nodes)."""
    held = {name: "MAINT" if "MAINT" in r.flags else "RESERVED" for name, r in book.active_on(now).items()}
    return [node_view(nodes[name], now, held.get(name, "")) for name in (nodes if names is None else names)]


def partition_views(config: Config, nodes: dict[str, Node]) -> list[dict[str, Any]]:
    default = config.default_partition()
    result = []
    for part in config.partitions:
        members = [nodes[n] for n in part.nodes if n in nodes]
        result.append({
            "name": part.name, "default": default is not None and part.name == default.name,
            "state": part.state, "max_time_min": part.max_time_min, "default_time_min": part.default_time_min,
            "max_nodes": part.max_nodes, "nodes": hostlist.compress(part.nodes),
            "total_nodes": len(members), "total_cpus": sum(n.cpus for n in members),
            "qos": part.qos, "allow_qos": ",".join(part.allow_qos), "deny_qos": ",".join(part.deny_qos),
            "allow_accounts": ",".join(part.allow_accounts), "deny_accounts": ",".join(part.deny_accounts),
            "allow_groups": ",".join(part.allow_groups),
            "priority_job_factor": part.priority_job_factor, "priority_tier": part.priority_tier,
            "preempt_mode": part.preempt_mode or config.preempt_mode, "over_subscribe": part.over_subscribe,
            "min_nodes": part.min_nodes, "root_only": part.root_only, "disable_root_jobs": part.disable_root_jobs,
            "req_resv": part.req_resv,
            # None: the cluster's; math.inf (UNLIMITED) is not JSON
            "over_time_limit": "UNLIMITED" if part.over_time_limit_min == math.inf else part.over_time_limit_min,
        })
    return result

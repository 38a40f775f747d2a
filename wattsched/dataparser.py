"""Slurm's JSON, as ``--json`` prints it: the layout of Slurm 23.11's ``data_parser/v0.0.40``.

Tools that parse ``squeue --json``, ``sacct --json``, ``sinfo --json`` or ``scontrol show ... --json``
read these shapes: a ``meta`` block naming the parser and the Slurm release, ``errors``/``warnings``
lists, states as lists of flags, and numbers that may be unset or infinite as
``{"set": ..., "infinite": ..., "number": ...}``. TRES are lists of ``{"type", "name", "id", "count"}``
with Slurm's ids (cpu 1, mem 2, energy 3, node 4, billing 5, fs/disk 6). Energy sits where Slurm puts
it: the energy TRES of a job's allocation and steps, and each step's ``statistics.energy.consumed``.
Fields wattsched has no value for are present with Slurm's empty values; it adds no fields of its own.

The REST API (slurmrestd's paths) is to serve the same shapes from here.
"""

from __future__ import annotations

import os
from typing import Any

from wattsched import SLURM_RELEASE

DATA_PARSER = "data_parser/v0.0.40"
TRES_IDS = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5, "fs/disk": 6, "vmem": 7, "pages": 8,
            "gres/gpu": 1001}
INFINITE = object()


def check_version(asked: str | None) -> None:
    """``--json[=data_parser]``: this layout, or a clear error naming the one there is."""
    if asked and asked.removeprefix("data_parser/") not in ("v0.0.40", "latest"):
        raise ValueError(f"data_parser plugin {asked} is not available: this is {DATA_PARSER} (Slurm "
                         f"{'.'.join(SLURM_RELEASE[:2])})")


def number(value: Any) -> dict[str, Any]:
    """Slurm's optional number: unset (None), infinite (INFINITE) or a value."""
    if value is INFINITE:
        return {"set": False, "infinite": True, "number": 0}
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(value)}


def seconds(value: float | None) -> dict[str, Any]:
    """A time in seconds since the epoch; 0 when it has not happened (Slurm's set zero)."""
    return number(int(value or 0))


def tres(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    # a TRES with a name of its own (gres/gpu) is type "gres", name "gpu", as Slurm lists it
    return [{"type": name.partition("/")[0] if name.startswith("gres/") else name,
             "name": name.partition("/")[2] if name.startswith("gres/") else "", "id": TRES_IDS[name],
             "count": int(count)}
            for name, count in pairs.items() if count is not None]


def exit_code(code: int, sig: int, state: str = "") -> dict[str, Any]:
    status = "SIGNALED" if sig else "SUCCESS" if code == 0 and state not in ("FAILED",) else "ERROR"
    if state in ("PENDING", "RUNNING", "CONFIGURING"):
        status = "PENDING"
    return {"status": [status], "return_code": number(code), "signal": {"id": number(sig or None), "name": ""}}


def document(key: str, items: list[dict[str, Any]], command: list[str], cluster: str,
             extra: dict[str, Any] | None = None, client: tuple[str, str] | None = None) -> dict[str, Any]:
    """The whole answer: ``{key: items, meta, errors, warnings}``; ``client`` is (user, group),
    by default this process's (the REST API names its caller)."""
    import grp
    import pwd

    if client is not None:
        user, group = client
    else:
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
            group = grp.getgrgid(os.getgid()).gr_name
        except KeyError:
            user, group = str(os.getuid()), str(os.getgid())
    major, minor, micro = SLURM_RELEASE
    meta = {"plugin": {"type": "", "name": "", "data_parser": DATA_PARSER,
                       "accounting_storage": "accounting_storage/slurmdbd"},
            "client": {"source": os.environ.get("SSH_TTY", ""), "user": user, "group": group},
            "command": command,
            "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                      "release": ".".join(SLURM_RELEASE), "cluster": cluster}}
    return {key: items, **(extra or {}), "meta": meta, "errors": [], "warnings": []}


def _limit(minutes: int | None) -> dict[str, Any]:
    return number(INFINITE if minutes is None else minutes)


def _over_time(minutes: int | str | None) -> dict[str, Any]:
    """A partition's OverTimeLimit as the view gives it: None (the cluster's), UNLIMITED or minutes."""
    return number(INFINITE if minutes == "UNLIMITED" else minutes)


def _job_resources(j: dict[str, Any]) -> dict[str, Any]:
    """What a job holds, per node (empty while it holds nothing)."""
    alloc = j.get("alloc_cpus")
    if not isinstance(alloc, dict) or not alloc:
        return {}
    mem = int(j.get("alloc_mem_mb") or 0)
    return {"nodes": j.get("node_list", ""), "allocated_cores": sum(alloc.values()),
            "allocated_cpus": sum(alloc.values()), "allocated_hosts": len(alloc),
            "allocated_nodes": [{"nodename": name, "cpus_used": cpus, "memory_used": mem, "memory_allocated": mem}
                                for name, cpus in alloc.items()]}


def queue_job(j: dict[str, Any], cluster: str) -> dict[str, Any]:
    """squeue --json / scontrol show job --json: one job (v0.0.40 job_info)."""
    state = j["state"]
    mem_node, mem_cpu = j.get("mem_per_node_mb", 0), j.get("mem_per_cpu_mb", 0)
    return {
        "account": j["account"], "accrue_time": seconds(j.get("eligible_time")),
        "admin_comment": j.get("admin_comment", ""), "allocating_node": "",
        "array_job_id": number(j["array_job_id"] or 0), "array_task_id": number(j["array_task_id"]),
        "array_max_tasks": number(j.get("array_throttle") or 0), "array_task_string": "",
        "association_id": 0, "batch_features": "", "batch_flag": not j.get("interactive", False),
        "batch_host": j.get("batch_host", ""), "flags": [], "burst_buffer": "", "burst_buffer_state": "",
        "cluster": cluster, "cluster_features": "", "command": j.get("command", ""), "comment": j.get("comment", ""),
        "container": "", "container_id": "", "contiguous": False, "core_spec": 0, "thread_spec": 0,
        "cores_per_socket": number(None), "billable_tres": {"set": True, "infinite": False,
                                                            "number": float(j.get("num_cpus", 0))},
        "cpus_per_task": number(j.get("cpus_per_task", 1)), "cpu_frequency_minimum": number(None),
        "cpu_frequency_maximum": number(None), "cpu_frequency_governor": number(None), "cpus_per_tres": "",
        "cron": "", "deadline": number(round(j.get("deadline") or 0)), "delay_boot": number(0),
        "dependency": j.get("dependency", ""),
        "derived_exit_code": exit_code(j.get("exit_code", 0), j.get("term_signal", 0), state),
        "eligible_time": seconds(j.get("eligible_time")), "end_time": seconds(j.get("end_time")),
        "excluded_nodes": ",".join(j.get("exc_nodes", [])),
        "exit_code": exit_code(j.get("exit_code", 0), j.get("term_signal", 0), state), "extra": "",
        "failed_node": "", "features": "&".join(j.get("features", [])), "federation_origin": "",
        "federation_siblings_active": "", "federation_siblings_viable": "",
        "gres_detail": list(j.get("gres_detail", [])),
        "group_id": j.get("gid", 0), "group_name": j.get("group", ""), "het_job_id": number(0),
        "het_job_id_set": "", "het_job_offset": number(0), "job_id": j["job_id"],
        "job_resources": _job_resources(j), "job_size_str": [], "job_state": [state],
        "last_sched_evaluation": number(0),
        "licenses": j.get("licenses", ""), "mail_type": list(j.get("mail_type", [])),
        "mail_user": j.get("mail_user") or j.get("user", ""), "max_cpus": number(0),
        "max_nodes": number(0), "mcs_label": "", "memory_per_tres": "", "name": j["name"], "network": "",
        "nodes": j.get("node_list", ""), "nice": j.get("nice", 0), "tasks_per_core": number(INFINITE),
        "tasks_per_tres": number(0), "tasks_per_node": number(j.get("ntasks_per_node", 0)),
        "tasks_per_socket": number(INFINITE), "tasks_per_board": number(0), "cpus": number(j.get("num_cpus", 0)),
        "node_count": number(j.get("num_nodes", 0)), "tasks": number(j.get("ntasks", 1)),
        "partition": j["partition"], "prefer": "",
        "memory_per_cpu": number(mem_cpu or None), "memory_per_node": number(mem_node or None),
        "minimum_cpus_per_node": number(j.get("cpus_per_task", 1)), "minimum_tmp_disk_per_node": number(0),
        "power": {"flags": []}, "preempt_time": number(0), "preemptable_time": number(0),
        "pre_sus_time": number(0), "hold": bool(j.get("hold")), "priority": number(j.get("priority", 0)),
        "profile": ["NOT_SET"], "qos": j.get("qos", ""), "reboot": False,
        "required_nodes": ",".join(j.get("req_nodes", [])),
        "minimum_switches": 0, "requeue": bool(j.get("requeue", True)), "resize_time": number(0),
        "restart_cnt": j.get("restart_count", 0), "resv_name": j.get("reservation", ""), "scheduled_nodes": "",
        "selinux_context": "", "shared": [], "exclusive": ["true"] if j.get("exclusive") else [],
        "oversubscribe": not j.get("exclusive"), "show_flags": ["DETAIL", "LOCAL"], "sockets_per_board": 0,
        "sockets_per_node": number(None), "start_time": seconds(j.get("start_time") or j.get("expected_start")),
        "state_description": "", "state_reason": j.get("reason", "None"),
        "standard_error": j.get("std_err_path", ""), "standard_input": "/dev/null",
        "standard_output": j.get("std_out_path", ""), "submit_time": seconds(j.get("submit_time")),
        "suspend_time": number(0), "system_comment": "", "time_limit": _limit(j.get("time_limit_min")),
        "time_minimum": number(0), "threads_per_core": number(None), "tres_bind": j.get("tres_bind", ""),
        "tres_freq": "",
        "tres_per_job": j.get("tres_per_job", ""), "tres_per_node": j.get("tres_per_node", ""),
        "tres_per_socket": "", "tres_per_task": j.get("tres_per_task", ""),
        "tres_req_str": f"cpu={j.get('num_cpus', 0)},node={j.get('num_nodes', 0)},billing={j.get('num_cpus', 0)}"
        + (f",gres/gpu={j['num_gpus']}" if j.get("num_gpus") else ""),
        "tres_alloc_str": f"cpu={j.get('num_cpus', 0)},node={j.get('num_nodes', 0)},billing={j.get('num_cpus', 0)}"
        + (f",gres/gpu={j['num_gpus']}" if j.get("num_gpus") else "")
        if state not in ("PENDING",) else "",
        "user_id": j.get("uid", 0), "user_name": j.get("user", ""), "maximum_switch_wait": number(0),
        "wckey": j.get("wckey", ""), "current_working_directory": j.get("work_dir", ""),
    }


def _time(seconds_: float) -> dict[str, int]:
    whole = int(seconds_)
    return {"seconds": whole, "microseconds": round((seconds_ - whole) * 1e6)}


def _step_tres(step: dict[str, Any], which: str) -> list[dict[str, Any]]:
    if which == "total":
        return tres({"cpu": int(step["total_cpu_s"] * 1000), "energy": step.get("consumed_energy_j"),
                     "fs/disk": step["disk_read_b"], "mem": step["max_rss_kb"] * 1024, "pages": step["max_pages"]})
    return tres({"mem": step["max_rss_kb"] * 1024, "fs/disk": step["max_disk_read_b"]})


def accounting_job(j: dict[str, Any]) -> dict[str, Any]:
    """sacct --json: one job with its steps (v0.0.40 job), from an accounting record."""
    state = j["state"]
    elapsed = int((j["time_end"] or 0) - j["time_start"]) if j["time_start"] and j["time_end"] else 0
    steps = []
    for s in j["steps"]:
        s_elapsed = int(s["time_end"] - s["time_start"]) if s["time_start"] and s["time_end"] else 0
        joules = s.get("consumed_energy_j")
        steps.append({
            "time": {"elapsed": s_elapsed, "end": number(int(s["time_end"]) or None),
                     "start": number(int(s["time_start"]) or None), "suspended": 0,
                     "system": _time(s["system_cpu_s"]), "limit": _limit(j["timelimit_min"]),
                     "total": _time(s["total_cpu_s"]), "user": _time(s["user_cpu_s"])},
            "exit_code": exit_code(s["exit_code"], s["term_signal"], s["state"]),
            "nodes": {"count": s["nnodes"], "range": s["node_list"], "list": []},
            "tasks": {"count": s["ntasks"]}, "pid": "", "CPU": {"requested_frequency": {"min": number(None),
                                                                                        "max": number(None)},
                                                               "governor": ""},
            "kill_request_user": "", "state": [s["state"]],
            "statistics": {"CPU": {"actual_frequency": j.get("ave_cpu_freq_khz") or 0},
                           "energy": {"consumed": number(round(joules) if joules is not None else None)}},
            "step": {"id": f"{j['job_id']}.{s['step_id']}", "name": s["name"]},
            "task": {"distribution": "Block"},
            "tres": {"requested": {"max": _step_tres(s, "max"), "min": [], "average": [],
                                   "total": _step_tres(s, "total")},
                     "consumed": {"max": _step_tres(s, "max"), "min": [], "average": [],
                                  "total": _step_tres(s, "total")},
                     "allocated": tres({"cpu": s["alloc_cpus"], "node": s["nnodes"],
                                        "energy": round(joules) if joules is not None else None})},
        })
    joules = j.get("consumed_energy_j")
    mem = j["req_mem_mb"] * max(1, j["req_nodes"]) if j["req_mem_mb"] else j["req_mem_per_cpu"] * j["req_cpus"]
    return {
        "account": j["account"], "comment": {"administrator": j.get("admin_comment", ""), "job": j["comment"],
                                             "system": ""},
        "allocation_nodes": j["nnodes"],
        "array": {"job_id": j["array_job_id"], "limits": {"max": {"running": {"tasks": 0}}},
                  "task": "", "task_id": number(j["array_task_id"])},
        "association": {"account": j["account"], "cluster": j["cluster"], "partition": "", "user": j["user"],
                        "id": 0},
        "block": "", "cluster": j["cluster"], "constraints": j["constraints"], "container": "",
        "derived_exit_code": exit_code(max([j["exit_code"]] + [s["exit_code"] for s in j["steps"]]),
                                       max([j["term_signal"]] + [s["term_signal"] for s in j["steps"]]), state),
        "time": {"elapsed": elapsed, "eligible": int(j["time_eligible"]), "end": int(j["time_end"]),
                 "start": int(j["time_start"]), "submission": int(j["time_submit"]),
                 "suspended": int(j.get("time_suspended") or 0),
                 "system": _time(sum(s["system_cpu_s"] for s in j["steps"])), "limit": _limit(j["timelimit_min"]),
                 "total": _time(sum(s["total_cpu_s"] for s in j["steps"])),
                 "user": _time(sum(s["user_cpu_s"] for s in j["steps"]))},
        "exit_code": exit_code(j["exit_code"], j["term_signal"], state), "extra": "", "failed_node": "",
        "flags": ["STARTED_ON_SCHEDULE"] if j["time_start"] else [], "group": j["group"],
        "het": {"job_id": 0, "job_offset": number(None)}, "job_id": j["job_id"], "name": j["name"],
        "licenses": j.get("licenses", ""), "mcs": {"label": ""}, "nodes": j["node_list"], "partition": j["partition"],
        "hold": False, "priority": number(j["priority"]), "qos": j.get("qos", ""),
        "required": {"CPUs": j["req_cpus"], "memory_per_cpu": number(j["req_mem_per_cpu"] or None),
                     "memory_per_node": number(j["req_mem_mb"] or None)},
        "kill_request_user": str(j["cancelled_by"]) if j.get("cancelled_by") is not None else "",
        "reservation": {"id": 0, "name": j["reservation"]}, "script": "",
        "state": {"current": [state], "reason": j.get("reason", "None")}, "steps": steps,
        "submit_line": j["submit_line"],
        "tres": {"allocated": tres({"cpu": j["alloc_cpus"] or None, "mem": mem or None,
                                    "energy": round(joules) if joules is not None else None,
                                    "node": j["nnodes"] if j["alloc_cpus"] else None,
                                    "billing": j["alloc_cpus"] or None,
                                    "gres/gpu": j.get("alloc_gpus") or None}),
                 "requested": tres({"cpu": j["req_cpus"], "mem": mem or None, "node": j["req_nodes"],
                                    "billing": j["req_cpus"], "gres/gpu": j.get("req_gpus") or None})},
        "used_gres": "", "user": j["user"], "wckey": {"wckey": j["wckey"], "flags": []},
        "working_directory": j["work_dir"],
    }


def node(n: dict[str, Any], cluster: str) -> dict[str, Any]:
    """scontrol show node --json / sinfo --json: one node (v0.0.40 node), with its energy."""
    state = [n["base_state"]] + (["DRAIN"] if n.get("drain") else []) + \
        (["POWERED_DOWN"] if str(n.get("power", "")).upper().startswith("POWERED_DOWN") else [])
    watts = n.get("current_watts") if n.get("metered") else None
    return {
        "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": number(None),
        "cluster_name": cluster, "cores": n.get("cores_per_socket", 1), "specialized_cores": 0,
        "cpu_binding": 0, "cpu_load": 0, "free_mem": number(None), "cpus": n["cpus"], "effective_cpus": n["cpus"],
        "specialized_cpus": "", "energy": {"average_watts": int(n.get("ave_watts") or 0),
                                           "base_consumed_energy": int(n.get("lowest_joules") or 0),
                                           "consumed_energy": int(n.get("consumed_joules") or 0),
                                           "current_watts": number(round(watts) if watts is not None else None),
                                           "previous_consumed_energy": 0, "last_collected": 0},
        "external_sensors": {}, "extra": "", "power": {}, "features": list(n.get("features", [])),
        "active_features": list(n.get("features", [])),
        "gres": n["gres"] if n.get("gpus") else "", "gres_drained": "N/A",
        "gres_used": n["gres_used"] if n.get("gpus") else "",
        "instance_id": n.get("instance_id", ""), "instance_type": n.get("instance_type", ""),
        "last_busy": number(None),
        "mcs_label": "", "specialized_memory": 0, "name": n["name"], "next_state_after_reboot": ["INVALID"],
        "address": n.get("address", n["name"]), "hostname": n.get("hostname", n["name"]), "state": state,
        "operating_system": "", "owner": "", "partitions": list(n.get("partitions", [])), "port": n.get("port", 0),
        "real_memory": n.get("real_memory_mb", 0), "comment": "", "reason": n.get("reason", ""),
        "reason_changed_at": number(int(n["reason_time"]) if n.get("reason_time") else None),
        "reason_set_by_user": "", "resume_after": number(None), "reservation": "",
        "alloc_memory": 0, "alloc_cpus": n.get("alloc_cpus", 0),
        "alloc_idle_cpus": n["cpus"] - n.get("alloc_cpus", 0), "tres_used": "", "tres_weighted": 0.0,
        "slurmd_start_time": number(None), "sockets": n.get("sockets", 1), "threads": n.get("threads_per_core", 1),
        "temporary_disk": 0, "weight": n.get("weight", 1), "tres": f"cpu={n['cpus']},mem={n.get('real_memory_mb', 0)}M"
        + (f",gres/gpu={n['gpus']}" if n.get("gpus") else ""),
        "version": ".".join(SLURM_RELEASE),
    }


def partition(p: dict[str, Any], cluster: str) -> dict[str, Any]:
    """scontrol show partition --json (v0.0.40 partition_info)."""
    return {"nodes": {"allowed_allocation": "", "configured": p["nodes"], "total": p["total_nodes"]},
            "accounts": {"allowed": "" if p.get("allow_accounts", "ALL") == "ALL" else p.get("allow_accounts", ""),
                         "deny": p.get("deny_accounts", "")},
            "groups": {"allowed": "" if p.get("allow_groups", "ALL") == "ALL" else p.get("allow_groups", "")}, "qos": {
                "allowed": "" if p.get("allow_qos", "ALL") == "ALL" else p.get("allow_qos", ""),
                "deny": p.get("deny_qos", ""), "assigned": p.get("qos", "")},
            "alternate": "",
            "tres": {"billing_weights": "", "configured": f"cpu={p['total_cpus']},node={p['total_nodes']}"},
            "cluster": cluster, "cpus": {"task_binding": 0, "total": p["total_cpus"]},
            "defaults": {"memory_per_cpu": 0, "partition_memory_per_cpu": number(None),
                         "partition_memory_per_node": number(None),
                         "time": number(INFINITE if p["default_time_min"] is None else p["default_time_min"]),
                         "job": ""},
            "grace_time": 0, "maximums": {"cpus_per_node": number(INFINITE), "cpus_per_socket": number(INFINITE),
                                          "memory_per_cpu": 0, "partition_memory_per_cpu": number(None),
                                          "partition_memory_per_node": number(None),
                                          "nodes": number(INFINITE if p["max_nodes"] is None else p["max_nodes"]),
                                          "shares": 1, "oversubscribe": {
                                              "jobs": 0 if p.get("over_subscribe") == "EXCLUSIVE" else 1, "flags": []},
                                          "time": _limit(p["max_time_min"]),
                                          "over_time_limit": _over_time(p.get("over_time_limit"))},
            "minimums": {"nodes": p.get("min_nodes", 0)}, "name": p["name"], "node_sets": "",
            "priority": {"job_factor": p.get("priority_job_factor", 1), "tier": p.get("priority_tier", 1)},
            "timeouts": {"resume": number(None), "suspend": number(None)},
            "partition": {"state": [p["state"]]}, "suspend_time": number(None)}


def license_record(lic: dict[str, Any]) -> dict[str, Any]:
    """scontrol show licenses --json (v0.0.40 license), from the API's license."""
    return {"LicenseName": lic["name"], "Total": lic["total"], "Used": lic["used"], "Free": lic["free"],
            "Remote": False, "Reserved": lic["reserved"], "LastConsumed": 0, "LastDeficit": 0, "LastUpdate": 0}


def reservation(r: dict[str, Any], cluster: str) -> dict[str, Any]:
    """scontrol show reservation --json (v0.0.40 reservation_info), from the API's reservation."""
    return {"accounts": ",".join(r["accounts"]), "burst_buffer": "", "core_count": r["core_cnt"],
            "core_specializations": [], "end_time": seconds(r["end_time"]), "features": r.get("features", ""),
            "flags": ["PURGE_COMPLETE" if f.startswith("PURGE_COMP") else f.upper() for f in r["flags"]],
            "groups": "", "licenses": "", "max_start_delay": 0,
            "name": r["name"], "node_count": r["node_cnt"], "node_list": r["nodes"], "partition": r["partition"],
            "purge_completed": {"time": number(r.get("purge_comp_s") or None)}, "start_time": seconds(r["start_time"]),
            "watts": number(r["watts"]), "tres": r["tres"], "users": ",".join(r["users"])}


def sinfo_groups(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """sinfo --json: one entry per partition and node state, as sinfo's default lines group them."""
    by_name = {n["name"]: n for n in nodes}
    from wattsched import hostlist

    entries = []
    for part in partitions:
        groups: dict[str, list[dict[str, Any]]] = {}
        for name in hostlist.expand(part["nodes"]):
            if name in by_name:
                groups.setdefault(by_name[name]["state_sinfo"], []).append(by_name[name])
        for members in groups.values():
            names = [n["name"] for n in members]
            other = [n for n in members if n["base_state"] == "DOWN" or n["drain"]]
            busy = [n for n in members if n["alloc_cpus"] and n not in other]
            cpus = sum(n["cpus"] for n in members)
            alloc = sum(n["alloc_cpus"] for n in members)
            first = node(members[0], cluster)
            entries.append({
                "port": 0, "node": {"state": first["state"]},
                "nodes": {"allocated": len(busy), "idle": len(members) - len(busy) - len(other),
                          "other": len(other), "total": len(members), "hostnames": names,
                          "names": names, "nodes": [hostlist.compress(names)]},
                "cpus": {"allocated": alloc, "idle": cpus - alloc, "other": 0, "total": cpus,
                         "minimum": min(n["cpus"] for n in members), "maximum": max(n["cpus"] for n in members),
                         "load": {"minimum": 0, "maximum": 0}, "per_node": {"max": number(INFINITE)}},
                "memory": {"minimum": min(n["real_memory_mb"] for n in members),
                           "maximum": max(n["real_memory_mb"] for n in members),
                           "free": {"minimum": number(None), "maximum": number(None)},
                           "allocated": sum(n["alloc_mem_mb"] for n in members)},
                "sockets": {"minimum": first["sockets"], "maximum": first["sockets"]},
                "cores": {"minimum": first["cores"], "maximum": first["cores"]},
                "threads": {"minimum": first["threads"], "maximum": first["threads"]},
                "disk": {"minimum": 0, "maximum": 0},
                "weight": {"minimum": first["weight"], "maximum": first["weight"]},
                "features": {"total": ",".join(first["features"]), "active": ",".join(first["features"])},
                "gres": {"total": "", "used": ""}, "cluster": cluster, "comment": "", "extra": "",
                "reason": {"description": members[0]["reason"], "time": first["reason_changed_at"]["number"],
                           "user": ""},
                "reservation": "", "partition": partition(part, cluster),
            })
    return entries

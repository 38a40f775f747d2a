"""slurmrestd's data_parser versions v0.0.40 to v0.0.45, derived from one model.

wattsched.dataparser builds each object in v0.0.40's layout (Slurm 23.11's, which ``--json``
prints); every later version is that object with the changes Slurm's OpenAPI release notes list
for it, applied in order. A change is a function of the object being answered and of wattsched's
own view of the thing (``source``), so a field a version adds carries the real value, not a
placeholder. Only the objects wattsched serves are covered: jobs (slurmctld's and slurmdbd's),
steps, nodes, partitions, reservations, pings, diag statistics, associations and users, and the
answers to a submission, an update and a signal.

The suite checks every version's answers against the OpenAPI document Slurm's own slurmrestd
publishes for it (tests/slurm-openapi/).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wattsched.dataparser import number

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
LATEST = VERSIONS[-1]

Object = dict[str, Any]
Change = Callable[[Object, Object], None]


def _unset() -> Object:
    return number(None)


def _add(**fields: Any) -> Change:
    """New fields; a callable value is called for each object (a fresh list or dict each time)."""
    def change(obj: Object, source: Object) -> None:
        for key, value in fields.items():
            obj[key] = value() if callable(value) else value
    return change


def _drop(*keys: str) -> Change:
    def change(obj: Object, source: Object) -> None:
        for key in keys:
            obj.pop(key, None)
    return change


# --- v0.0.41 (Slurm 24.05) ------------------------------------------------------------------------

def _job_resources_41(obj: Object, source: Object) -> None:
    """job_resources became the allocation per node; a job without one has none."""
    alloc: dict[str, int] = source.get("alloc_cpus") or {}
    if not isinstance(alloc, dict) or not alloc:
        obj.pop("job_resources", None)
        return
    mem = int(source.get("alloc_mem_mb") or 0)
    obj["job_resources"] = {
        "select_type": ["CPU"], "cpus": sum(alloc.values()), "threads_per_core": number(1),
        "nodes": {"count": len(alloc), "select_type": ["AVAILABLE"], "list": source.get("node_list", ""),
                  "whole": bool(source.get("exclusive")),
                  "allocation": [{"index": i, "name": name, "cpus": {"count": cpus, "used": cpus},
                                  "memory": {"used": mem, "allocated": mem}, "sockets": []}
                                 for i, (name, cpus) in enumerate(alloc.items())]}}


def _planned_41(obj: Object, source: Object) -> None:
    start, eligible = source.get("time_start") or 0, source.get("time_eligible") or 0
    obj["time"]["planned"] = number(max(0, int(start - eligible)) if start else None)


def _std_41(obj: Object, source: Object) -> None:
    for stream, key in (("stdin", "std_in"), ("stdout", "std_out"), ("stderr", "std_err")):
        obj[stream] = obj[f"{stream}_expanded"] = source.get(key) or ""


def _assoc_id_41(obj: Object, source: Object) -> None:
    obj["id"] = obj["id"]["id"]


def _diag_41(obj: Object, source: Object) -> None:
    obj.update(schedule_cycle_sum=int(source.get("schedule_cycle_sum", 0)),
               schedule_cycle_depth=int(source.get("schedule_cycle_depth", 0)),
               bf_table_size_sum=0, pending_rpcs=[], pending_rpcs_by_hostlist=[])


# --- v0.0.42 (Slurm 24.11) ------------------------------------------------------------------------

def _ping_42(obj: Object, source: Object) -> None:
    obj.update(responding=obj["pinged"] == "UP", primary=obj["mode"] == "primary")


def _kill_42(obj: Object, source: Object) -> None:
    obj["status"] = [{"error": {"string": "", "code": 0, "message": ""}, "step_id": "batch",
                      "job_id": number(job_id), "federation": {"sibling": ""}} for job_id in source["job_ids"]]


def _update_42(obj: Object, source: Object) -> None:
    for key in ("job_id", "step_id", "job_submit_user_msg"):
        obj.pop(key, None)


def _restart_42(obj: Object, source: Object) -> None:
    obj.update(qosreq=source.get("qos", ""), restart_cnt=int(source.get("restart_count") or 0))


# --- v0.0.43 (Slurm 25.05) ------------------------------------------------------------------------

def _expanded_43(obj: Object, source: Object) -> None:
    obj.update(stdin_expanded=obj["standard_input"], stdout_expanded=obj["standard_output"],
               stderr_expanded=obj["standard_error"])


def _db_job_43(obj: Object, source: Object) -> None:
    obj["reservation"]["requested"] = obj["reservation"]["name"]
    obj["segment_size"] = 0


def _step_43(obj: Object, source: Object) -> None:
    """Steps' paths (wattsched's steps write where their job does: none of their own). Their
    ``time.limit``, which v0.0.43 documents, is in the v0.0.40 object already."""
    for stream in ("stdin", "stdout", "stderr"):
        obj["step"][stream] = obj["step"][f"{stream}_expanded"] = ""


def _licenses_allocated_43(obj: Object, source: Object) -> None:
    """The licenses an allocated job holds (a pending one holds none)."""
    obj["licenses_allocated"] = source.get("licenses", "") if source.get("alloc_cpus") else ""


# --- v0.0.44 (Slurm 25.11) ------------------------------------------------------------------------

def _step_id_44(obj: Object, source: Object) -> None:
    obj["step_id"] = {"sluid": "", "job_id": number(obj["job_id"]), "step_het_component": number(None),
                      "step_id": "batch" if obj.get("batch_flag") else "extern"}
    obj["submit_line"] = source.get("submit_line", "")


def _user_default_qos_44(obj: Object, source: Object) -> None:
    obj["default"]["qos"] = 0


# --- v0.0.45 (Slurm 26.05) ------------------------------------------------------------------------

def _ping_45(obj: Object, source: Object) -> None:
    obj["status"] = obj.pop("pinged")
    obj.pop("mode", None)


def _select_type_45(obj: Object, source: Object) -> None:
    """select_type names SelectTypeParameters' values (CR_CPU) where it named the resource (CPU)."""
    if "job_resources" in obj:
        obj["job_resources"]["select_type"] = ["CR_CPU"]


def _partition_45(obj: Object, source: Object) -> None:
    obj["cpus"]["task_binding"] = []
    obj["partition"].update(exclusive="NO", oversubscribe="NO")
    # PreemptMode's words as v0.0.45 names them (OFF is DISABLED; GANG and WITHIN have no flag)
    words = str(source.get("preempt_mode") or "OFF").upper().split(",")
    modes = [{"OFF": "DISABLED"}.get(word, word) for word in words]
    obj.update(flags=["DEFAULT"] if source.get("default") else [],
               preempt_mode=[m for m in modes if m in ("DISABLED", "SUSPEND", "REQUEUE", "CANCEL")] or ["DISABLED"])
    obj["select_type"] = ["CR_CPU"]


def _db_job_45(obj: Object, source: Object) -> None:
    exclusive = bool(source.get("exclusive"))
    obj.update(exclusive="YES" if exclusive else "NO", oversubscribe="NO", sluid="", original_sluid="")


def _step_45(obj: Object, source: Object) -> None:
    obj.pop("pid", None)
    obj["submit_line"] = ""


CHANGES: dict[str, dict[str, list[Change]]] = {
    "v0.0.41": {
        "job_info": [_job_resources_41],
        "node": [_add(gpu_spec="", res_cores_per_gpu=0)],
        "partition": [_add(select_type=lambda: ["CPU"])],
        "diag": [_diag_41],
        "slurmdb_job": [_planned_41, _std_41],
        "association": [_assoc_id_41],
    },
    "v0.0.42": {
        "job_info": [_drop("exclusive", "oversubscribe", "minimum_switches", "show_flags"),
                     _add(priority_by_partition=list, required_switches=0)],
        "ping": [_ping_42],
        "submit": [_drop("result")],
        "update": [_update_42],
        "kill": [_kill_42],
        "slurmdb_job": [_restart_42],
    },
    "v0.0.43": {
        "job_info": [_expanded_43, _licenses_allocated_43, _add(segment_size=0)],
        "node": [_add(tls_cert_last_renewal=_unset, topology="", cert_flags=list)],
        "partition": [_add(topology="")],
        "slurmdb_job": [_db_job_43],
        "slurmdb_step": [_step_43],
    },
    "v0.0.44": {
        "job_info": [_step_id_44],
        "license": [_add(Nodes="")],
        "user": [_user_default_qos_44],
    },
    "v0.0.45": {
        "diag": [_drop("parts_packed")],
        "job_info": [_drop("power"), _add(container_type="", memory_update_delay=0, memory_update_margin=0),
                     _select_type_45],
        "node": [_drop("external_sensors", "power", "tres_weighted"), _add(suspend_time=_unset)],
        "partition": [_partition_45],
        "ping": [_ping_45],
        "reservation": [_drop("watts")],
        "slurmdb_job": [_db_job_45],
        "slurmdb_step": [_step_45],
    },
}


def check(version: str) -> str:
    """The version asked for, or ValueError naming those there are."""
    if version not in VERSIONS:
        raise ValueError(f"Unknown data_parser version {version[:32]}: this serves {', '.join(VERSIONS)}")
    return version


def upgrade(kind: str, obj: Object, source: Object, version: str) -> Object:
    """``obj`` (a v0.0.40 object just built for this answer) changed in place into ``version``'s."""
    for step in VERSIONS[1:VERSIONS.index(version) + 1]:
        for change in CHANGES[step].get(kind, ()):
            change(obj, source)
    return obj

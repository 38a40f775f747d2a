"""A step's resource usage from its tasks' rusage: the figures sacct shows (TotalCPU, UserCPU,
SystemCPU, MinCPU*, MaxRSS*, AveRSS, disk I/O, pages) computed the way Slurm's jobacct_gather
aggregates them: totals summed over tasks, Ave* averaged over tasks, Max*/Min* with the node and
task where they were seen.

Each task's record is an :class:`wattsched.api.TaskUsage` as a dict; the agents report them when
the tasks are reaped (killed ones included), the controller keeps them on the step, and the
accounting store writes the summary.
"""

from __future__ import annotations

from typing import Any

# the summary's keys, which are also the accounting step table's columns, with their empty values
EMPTY: dict[str, Any] = {
    "total_cpu_s": 0.0, "user_cpu_s": 0.0, "system_cpu_s": 0.0,
    "min_cpu_s": 0.0, "min_cpu_node": "", "min_cpu_task": 0,
    "max_rss_kb": 0, "max_rss_node": "", "max_rss_task": 0, "ave_rss_kb": 0,
    "disk_read_b": 0, "max_disk_read_b": 0, "max_disk_read_node": "", "max_disk_read_task": 0,
    "disk_write_b": 0, "max_disk_write_b": 0, "max_disk_write_node": "", "max_disk_write_task": 0,
    "max_pages": 0,
}


def merge(tasks: list[dict[str, Any]], reported: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tasks`` with ``reported`` added; a task reported again (same node and rank) is replaced."""
    by_key = {(t["node"], t["task"]): t for t in tasks}
    by_key.update({(t["node"], t["task"]): t for t in reported})
    return sorted(by_key.values(), key=lambda t: t["task"])


def summarize(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The step's figures from its tasks' records (all zero when none was reported)."""
    if not tasks:
        return dict(EMPTY)
    cpu = {id(t): t["user_cpu_s"] + t["system_cpu_s"] for t in tasks}
    least = min(tasks, key=lambda t: cpu[id(t)])
    rss = max(tasks, key=lambda t: t["max_rss_kb"])
    read = max(tasks, key=lambda t: t["disk_read_b"])
    write = max(tasks, key=lambda t: t["disk_write_b"])
    return {
        "total_cpu_s": sum(cpu.values()), "user_cpu_s": sum(t["user_cpu_s"] for t in tasks),
        "system_cpu_s": sum(t["system_cpu_s"] for t in tasks),
        "min_cpu_s": cpu[id(least)], "min_cpu_node": least["node"], "min_cpu_task": least["task"],
        "max_rss_kb": rss["max_rss_kb"], "max_rss_node": rss["node"], "max_rss_task": rss["task"],
        "ave_rss_kb": round(sum(t["max_rss_kb"] for t in tasks) / len(tasks)),
        "disk_read_b": sum(t["disk_read_b"] for t in tasks), "max_disk_read_b": read["disk_read_b"],
        "max_disk_read_node": read["node"], "max_disk_read_task": read["task"],
        "disk_write_b": sum(t["disk_write_b"] for t in tasks), "max_disk_write_b": write["disk_write_b"],
        "max_disk_write_node": write["node"], "max_disk_write_task": write["task"],
        "max_pages": max(t["pages"] for t in tasks),
    }

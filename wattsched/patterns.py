"""Slurm's filename patterns for --output/--error/--input (%j %J %x %u %N %A %a %t %n %s %%).

A number between '%' and the letter zero-pads, as in Slurm (``%4a`` -> ``0007``).
"""

from __future__ import annotations

import os
import re

_PATTERN = re.compile(r"%(\d*)([%jJxuNAatns])")


def expand(pattern: str, *, job_id: int, job_name: str, user: str, node: str = "",
           array_job_id: int = 0, array_task_id: int | None = None, step_id: str = "batch",
           task_id: int | None = None, node_id: int | None = None, work_dir: str = "") -> str:
    def sub(match: re.Match[str]) -> str:
        width, code = match.group(1), match.group(2)
        if code == "%":
            return "%"
        values = {
            "j": job_id,
            "J": f"{job_id}.{step_id}" if step_id != "batch" else job_id,
            "x": job_name,
            "u": user,
            "N": node.split(".")[0],
            "A": array_job_id or job_id,
            "a": array_task_id if array_task_id is not None else 4294967294,
            "t": task_id if task_id is not None else 0,
            "n": node_id if node_id is not None else 0,
            "s": step_id,
        }
        value = values[code]
        if width and isinstance(value, int):
            return str(value).zfill(int(width))
        return str(value)

    path = _PATTERN.sub(sub, pattern)
    if work_dir and not os.path.isabs(path):
        path = os.path.join(work_dir, path)
    return path


def default_output(is_array: bool) -> str:
    return "slurm-%A_%a.out" if is_array else "slurm-%j.out"

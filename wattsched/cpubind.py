"""Task CPU binding (srun's ``--cpu-bind``, Slurm's task/affinity): which of its job's CPUs on a node
each task is bound to, and the SLURM_CPU_BIND* variables tasks see. Pure functions.

Types, as Slurm has them: ``none``, ``cores`` and ``threads`` (each task its own ``cpus-per-task`` of
the job's CPUs, in order), ``sockets`` and ``ldoms`` (the job's CPUs on the socket of the task's first
CPU), ``rank`` (task i on the job's i-th CPU), ``map_cpu:<list>`` (task i on host CPU list[i]),
``mask_cpu:<list>`` (task i on the CPUs of hex mask list[i]); ``verbose``/``quiet`` say whether each
task reports its binding on stderr. Like slurmstepd, the result is expressed as masks:
SLURM_CPU_BIND_TYPE=``mask_cpu:``, SLURM_CPU_BIND_LIST the tasks' masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TYPES = ("none", "cores", "threads", "sockets", "ldoms", "rank", "map_cpu", "mask_cpu")
LIST_MAX = 4096  # entries of map_cpu / mask_cpu
CPU_MAX = 1 << 16


@dataclass(frozen=True, slots=True)
class CpuBind:
    kind: str = ""  # "" (not asked: the plugin's default), or one of TYPES
    verbose: bool = False
    values: tuple[int, ...] = ()  # map_cpu CPU ids, or mask_cpu masks


@dataclass(frozen=True, slots=True)
class TaskBinding:
    """A step's local tasks' CPUs on a node (empty: not bound), their SLURM_CPU_BIND* and verbosity."""

    cpus: list[list[int]]
    env: dict[str, str]
    verbose: bool


def unbound(tasks: int) -> TaskBinding:
    """``tasks`` tasks bound to no CPU (without task/affinity, or a step on no allocation)."""
    return TaskBinding([[] for _ in range(tasks)], {}, False)


def parse(text: str) -> CpuBind:
    """``--cpu-bind=[{quiet|verbose},]TYPE``; a map_cpu or mask_cpu list takes the rest of the value
    (ValueError with Slurm's wording when it is wrong)."""
    kind, verbose = "", False
    values: tuple[int, ...] = ()
    items = text.split(",")
    while items:
        item = items.pop(0).strip()
        word, _, rest = item.partition(":")
        word = word.lower().replace("-", "_")
        if not item:
            continue
        if word in ("map_cpu", "mask_cpu"):
            base = 10 if word == "map_cpu" else 16
            listed = [v.strip() for v in (rest, *items)]
            items = []
            try:
                values = tuple(int(v.removeprefix("0x").removeprefix("0X"), base) for v in listed)
            except ValueError as exc:
                raise ValueError(f"Failed to parse --cpu-bind={text}") from exc
            limit = CPU_MAX if base == 10 else 1 << CPU_MAX  # a CPU id, or a mask of at most CPU_MAX CPUs
            if len(values) > LIST_MAX or any(v < 0 or v >= limit for v in values):
                raise ValueError(f"Failed to parse --cpu-bind={text}")
            kind = word
        elif word in ("verbose", "v", "quiet", "q"):
            verbose = word.startswith("v")
        elif word in TYPES or word in ("core", "thread", "socket", "ldom"):
            kind = word if word in TYPES else word + "s"
        else:
            raise ValueError(f"Invalid --cpu-bind argument: {item}")
    return CpuBind(kind, verbose, values)


def task_cpus(bind: CpuBind, job_cpus: Sequence[int], tasks: int, cpus_per_socket: int) -> list[tuple[int, ...]]:
    """Each local task's CPUs, from the job's CPUs on the node (in order)."""
    cpus = list(job_cpus) or [0]
    per_task = max(1, len(cpus) // max(1, tasks))
    result = []
    for i in range(tasks):
        if bind.kind in ("", "none"):
            result.append(tuple(cpus))
        elif bind.kind in ("cores", "threads"):
            start = (i * per_task) % len(cpus)
            result.append(tuple(cpus[start:start + per_task]) or (cpus[start],))
        elif bind.kind in ("sockets", "ldoms"):
            first = cpus[(i * per_task) % len(cpus)]
            socket = first // max(1, cpus_per_socket)
            result.append(tuple(c for c in cpus if c // max(1, cpus_per_socket) == socket))
        elif bind.kind == "rank":
            result.append((cpus[i % len(cpus)],))
        elif bind.kind == "map_cpu":
            result.append((bind.values[i % len(bind.values)],))
        else:  # mask_cpu
            mask = bind.values[i % len(bind.values)]
            result.append(tuple(c for c in range(mask.bit_length()) if mask >> c & 1))
    return result


def mask(cpus: Sequence[int]) -> str:
    return hex(sum(1 << c for c in cpus))


def environment(bind: CpuBind, masks: Sequence[str]) -> dict[str, str]:
    verbosity = "verbose" if bind.verbose else "quiet"
    if bind.kind in ("", "none"):
        return {"SLURM_CPU_BIND": f"{verbosity},none", "SLURM_CPU_BIND_TYPE": "none", "SLURM_CPU_BIND_LIST": "",
                "SLURM_CPU_BIND_VERBOSE": verbosity}
    listed = ",".join(masks)
    return {"SLURM_CPU_BIND": f"{verbosity},mask_cpu:{listed}", "SLURM_CPU_BIND_TYPE": "mask_cpu:",
            "SLURM_CPU_BIND_LIST": listed, "SLURM_CPU_BIND_VERBOSE": verbosity}

"""GPUs as generic resources (GRES): their grammar in slurm.conf, gres.conf and job options,
how free GPUs are counted over time during a scheduling pass, and how a node's devices are
chosen for a job.

Grammar (Slurm's): a node's ``Gres=gpu:2`` or ``Gres=gpu:a100:2,gpu:v100:1``; a job's
``--gres=gpu[:type][:count]`` and ``--gpus-per-node=[type:]count`` (per node),
``--gpus-per-task=[type:]count`` (per task) and ``--gpus=[type:]count`` (for the whole job).
A request without a type takes GPUs of any type. Only the ``gpu`` GRES is managed.

--gpus=N for a job of several nodes is spread as evenly as its nodes allow: each node must have
ceil(N / -N) free, and the job gets N in all, N // nodes on each and one more on the first
N % nodes (Slurm may spread them unevenly, over more nodes); a job that gives no node count gets
them on one node.

A node's GPUs are numbered 0..n-1 in the order of its Gres= types (or of its gres.conf lines,
which then also name each GPU's device file). A request without a type takes GPUs type by
type in that order, lowest numbers first; the scheduling pass counts them the same way, so its
plan and the controller's choice of devices agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

GPU = "gpu"
COUNT_MAX = 1 << 16  # GPUs on a node or in a request: a bound checked before any work

Inventory = tuple[tuple[str, int], ...]  # (type, count) in the node's order; "" is an untyped GPU

_TYPE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


class GresError(ValueError):
    pass


def _count(text: str, what: str) -> int:
    if not text.isdigit() or int(text) > COUNT_MAX:
        raise GresError(f"Invalid GRES count '{text}' in {what}")
    return int(text)


def _type(text: str, what: str) -> str:
    if not _TYPE.match(text):
        raise GresError(f"Invalid GRES type '{text}' in {what}")
    return text


def parse_node(text: str) -> Inventory:
    """A NodeName line's ``Gres=``: ``gpu:2``, ``gpu:a100:2,gpu:v100:1`` (a socket suffix such as
    ``(S:0-1)`` is accepted and ignored)."""
    result: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        item = re.sub(r"\(S:[0-9,\-]*\)$", "", item)
        parts = item.split(":")
        if parts[0] != GPU:
            raise GresError(f"GRES '{parts[0]}' is not supported (only gpu)")
        if len(parts) == 2:
            kind, count = "", _count(parts[1], "Gres")
        elif len(parts) == 3:
            kind, count = _type(parts[1], "Gres"), _count(parts[2], "Gres")
        else:
            raise GresError(f"Invalid GRES specification '{item}' (gpu[:type]:count)")
        result[kind] = result.get(kind, 0) + count
    if sum(result.values()) > COUNT_MAX:
        raise GresError(f"Too many GPUs in '{text}'")
    return tuple((kind, count) for kind, count in result.items() if count)


def format_node(inventory: Inventory) -> str:
    """As sinfo's %G and scontrol's Gres= show it: ``gpu:a100:2,gpu:1`` (``(null)`` for none)."""
    if not inventory:
        return "(null)"
    return ",".join(f"{GPU}:{kind}:{count}" if kind else f"{GPU}:{count}" for kind, count in inventory)


def total(inventory: Inventory) -> int:
    return sum(count for _kind, count in inventory)


def available(inventory: Mapping[str, int] | Inventory, kind: str) -> int:
    """GPUs of ``kind`` (any kind for "") in a free count."""
    pairs = inventory.items() if isinstance(inventory, Mapping) else inventory
    return sum(count for k, count in pairs if not kind or k == kind)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a job asks in GPUs: per node, per task or for the whole job (at most one of them),
    of one type or any ("")."""

    per_node: int = 0
    per_task: int = 0
    per_job: int = 0
    kind: str = ""

    def __bool__(self) -> bool:
        return bool(self.per_node or self.per_task or self.per_job)

    def tres(self) -> tuple[str, str]:
        """(squeue field, value): where Slurm shows the request and how (``gres/gpu:a100:2``)."""
        count = self.per_node or self.per_task or self.per_job
        text = f"gres/{GPU}:{self.kind}:{count}" if self.kind else f"gres/{GPU}:{count}"
        if self.per_task:
            return "tres_per_task", text
        if self.per_job:
            return "tres_per_job", text
        return "tres_per_node", text


NO_GPUS = GpuRequest()


def _typed_count(text: str, option: str) -> tuple[str, int]:
    """``[type:]count`` (--gpus and its relatives)."""
    text = text.strip()
    if text.startswith(f"{GPU}:"):
        text = text[len(GPU) + 1:]
    kind, sep, count = text.rpartition(":")
    number = _count(count, option)
    return (_type(kind, option) if sep else ""), number


def parse_request(gres: str = "", gpus: str = "", per_node: str = "", per_task: str = "") -> GpuRequest:
    """A job's GPU options as one request (an error for two at once, as Slurm's "conflicting")."""
    given = [(name, value) for name, value in (("--gres", gres), ("--gpus", gpus), ("--gpus-per-node", per_node),
                                               ("--gpus-per-task", per_task)) if value]
    if not given:
        return GpuRequest()
    if len(given) > 1:
        raise GresError(f"{given[0][0]} and {given[1][0]} cannot be combined")
    option, value = given[0]
    if option == "--gres":
        items = [item for item in value.split(",") if item]
        if len(items) != 1:
            raise GresError("Invalid generic resource (gres) specification: one gpu request expected")
        parts = items[0].removeprefix("gres/").removeprefix("gres:").split(":")
        if parts[0] != GPU:
            raise GresError(f"Invalid generic resource (gres) specification: '{parts[0]}' is not configured")
        if len(parts) == 1:
            kind, count = "", 1
        elif len(parts) == 2:
            kind, count = ("", _count(parts[1], option)) if parts[1].isdigit() else (_type(parts[1], option), 1)
        elif len(parts) == 3:
            kind, count = _type(parts[1], option), _count(parts[2], option)
        else:
            raise GresError(f"Invalid generic resource (gres) specification '{value}'")
        return GpuRequest(per_node=count, kind=kind) if count else GpuRequest()
    kind, count = _typed_count(value, option)
    if not count:
        return GpuRequest()
    if option == "--gpus-per-task":
        return GpuRequest(per_task=count, kind=kind)
    if option == "--gpus":
        return GpuRequest(per_job=count, kind=kind)
    return GpuRequest(per_node=count, kind=kind)


def spread(total: int, nodes: int) -> list[int]:
    """``total`` GPUs over ``nodes`` nodes: as even as can be, the first ones one more."""
    base, extra = divmod(total, max(1, nodes))
    return [base + (i < extra) for i in range(nodes)]


def per_node_need(request: GpuRequest, nodes_min: int) -> int:
    """The GPUs each node of the job needs before tasks are laid out (per-task requests are
    counted with the tasks)."""
    if request.per_node:
        return request.per_node
    if request.per_job:
        return math.ceil(request.per_job / max(1, nodes_min))
    return request.per_task  # a node takes at least one task


def take(free: Mapping[str, int], order: Sequence[str], kind: str, count: int) -> dict[str, int]:
    """What ``count`` GPUs of ``kind`` (any: type by type in ``order``) take from ``free``, by type."""
    taken: dict[str, int] = {}
    left = count
    for k in order:
        if left <= 0:
            break
        if kind and k != kind:
            continue
        n = min(left, free.get(k, 0))
        if n > 0:
            taken[k] = n
            left -= n
    return taken


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU of a node: its number there, its type and its device file (when known)."""

    index: int
    kind: str = ""
    file: str = ""


def devices(inventory: Inventory, files: Sequence[tuple[str, str]] = ()) -> tuple[Device, ...]:
    """A node's GPUs, numbered in inventory order; ``files`` are gres.conf's (type, file) lines for
    the node in order, matched to its GPUs type by type."""
    by_type: dict[str, list[str]] = {}
    for kind, path in files:
        by_type.setdefault(kind, []).append(path)
    result: list[Device] = []
    for kind, count in inventory:
        paths = by_type.get(kind, [])
        for i in range(count):
            result.append(Device(len(result), kind, paths[i] if i < len(paths) else ""))
    return tuple(result)


def pick(devices_: Sequence[Device], busy: Iterable[int], kind: str, count: int) -> list[int]:
    """The lowest free numbers of ``count`` devices of type ``kind`` (fewer when not as many are free)."""
    taken = set(busy)
    return [d.index for d in devices_ if d.kind == kind and d.index not in taken][:count]


def job_gres(per_node: Mapping[str, Sequence[int]], devices_of: Mapping[str, Sequence[Device]]) -> str:
    """scontrol's JOB_GRES: the GPUs in all by type, ``gpu:a100:2`` (``(null)`` for none)."""
    counts: dict[str, int] = {}
    for node, indices in per_node.items():
        kinds = {d.index: d.kind for d in devices_of.get(node, ())}
        for index in indices:
            kind = kinds.get(index, "")
            counts[kind] = counts.get(kind, 0) + 1
    return format_node(tuple(counts.items())) if counts else "(null)"


def index_list(indices: Iterable[int]) -> str:
    """``0-1,3``: Slurm's IDX list of device numbers."""
    ranges: list[list[int]] = []
    for value in sorted(set(indices)):
        if ranges and value == ranges[-1][-1] + 1:
            ranges[-1][1:] = [value]
        else:
            ranges.append([value])
    return ",".join("-".join(map(str, r)) for r in ranges)


def environment(indices: Sequence[int], constrained: bool) -> dict[str, str]:
    """What a job's processes on a node are told of its GPUs there, as Slurm tells them:
    SLURM_JOB_GPUS the node's numbers; CUDA_VISIBLE_DEVICES (and GPU_DEVICE_ORDINAL,
    ROCR_VISIBLE_DEVICES) the numbers the GPU runtime sees, which start at 0 when the device
    cgroup hides the others (ConstrainDevices), else the node's numbers."""
    if not indices:
        return {}
    numbers = ",".join(str(i) for i in sorted(indices))
    visible = ",".join(str(i) for i in range(len(indices))) if constrained else numbers
    return {"SLURM_JOB_GPUS": numbers, "SLURM_GPUS_ON_NODE": str(len(indices)), "CUDA_VISIBLE_DEVICES": visible,
            "GPU_DEVICE_ORDINAL": visible, "ROCR_VISIBLE_DEVICES": visible}


def request_environment(request: GpuRequest) -> dict[str, str]:
    """The job's GPU request as Slurm exports it to the batch script (SLURM_GPUS_PER_NODE, ...)."""
    kind = f"{request.kind}:" if request.kind else ""
    if request.per_node:
        return {"SLURM_GPUS_PER_NODE": f"{kind}{request.per_node}"}
    if request.per_task:
        return {"SLURM_GPUS_PER_TASK": f"{kind}{request.per_task}"}
    if request.per_job:
        return {"SLURM_GPUS": f"{kind}{request.per_job}"}
    return {}


def format_used(devices_: Sequence[Device], inventory: Inventory, busy: Iterable[int]) -> str:
    """A node's GRES in use, as sinfo's GresUsed and scontrol -d show them: ``gpu:a100:1(IDX:0)``
    per type (``IDX:N/A`` for none)."""
    taken = set(busy)
    parts = []
    for kind, _count in inventory:
        used = [d.index for d in devices_ if d.kind == kind and d.index in taken]
        label = f"{GPU}:{kind}:" if kind else f"{GPU}:"
        parts.append(f"{label}{len(used)}(IDX:{index_list(used) or 'N/A'})")
    return ",".join(parts) or "(null)"


def job_detail(per_node: Mapping[str, Sequence[int]], devices_of: Mapping[str, Sequence[Device]]) -> list[str]:
    """Per node of a job, its GPUs as scontrol -d and the data_parser's gres_detail show them:
    ``gpu:a100:1(IDX:0)``, in the job's node order."""
    result = []
    for node, indices in per_node.items():
        devices_ = devices_of.get(node, ())
        kinds = {d.index: d.kind for d in devices_}
        used = dict.fromkeys(kinds[i] for i in indices if i in kinds)  # its types, in its GPUs' order
        result.append(format_used(devices_, tuple((kind, 0) for kind in used), indices))
    return result

"""MPI plugins (srun --mpi, MpiDefault): what serves a step's tasks their process-management interface.

As in Slurm, ``none`` (and its old alias ``openmpi``) is no plugin at all: the tasks get nothing and
an MPI launcher of their own (mpirun, mpiexec) does the wiring. The others are entry points named
``mpi/<type>``; each gives the node agent, for every step that asks for it, one server per node
(:class:`MpiServer`). A server talks to its node's tasks (pmi2: over descriptors they inherit, no
socket anyone else can reach; pmix: OpenPMIx's loopback connections, its clients checked with
MUNGE) and to the step's other nodes through srun, which relays a fence's contributions from every
node to every node over the connections it already holds to their agents.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable

NONE_TYPES = ("none", "openmpi")  # Slurm's _is_none_plugin


class MpiError(ValueError):
    """An MPI type no plugin provides."""


@functools.cache  # the installed entry points do not change under a running agent: scanned once
def types() -> tuple[str, ...]:
    """The MPI types this installation serves (Slurm's plugin names without ``mpi/``)."""
    from wattsched import plugins

    return tuple(name.split("/", 1)[1] for name in plugins.available("mpi"))


def listing() -> str:
    """``srun --mpi=list``, worded as Slurm's plugrack prints it."""
    lines = ["MPI plugin types are...", "\tnone"]
    versions = []
    for name in types():
        if name.startswith("pmix_"):
            versions.append(name)
        else:
            lines.append(f"\t{name}")
    if versions:
        lines.append(f"specific pmix plugin versions available: {','.join(versions)}")
    return "\n".join(lines) + "\n"


def resolve(requested: str | None, default: str) -> str:
    """The step's MPI type: the one asked for, else MpiDefault; ``none`` for either of Slurm's names
    of no plugin. Raises MpiError, worded as Slurm's srun, for a type no plugin provides."""
    name = (requested or default or "none").strip()
    if name in NONE_TYPES:
        return "none"
    if name not in types():
        raise MpiError(f"Invalid MPI type '{name}', --mpi=list for acceptable types")
    return name


@runtime_checkable
class MpiServer(Protocol):
    """One step's MPI service on one node, built by the plugin's class from :class:`StepInfo`."""

    async def start(self) -> None:
        """Ready to serve the tasks, before the first task_setup (raises MpiError when it cannot)."""

    def task_setup(self, local_id: int) -> tuple[dict[str, str], int | None]:
        """The environment a local task gets, and the descriptor it inherits (None: none)."""

    def task_started(self, local_id: int) -> None:
        """The task has been forked: the agent's copy of its descriptor may be closed."""

    def task_ended(self, local_id: int) -> None:
        """The task has ended (its descriptor may not say so: a child of it may hold it open)."""

    def deliver(self, message: dict[str, Any]) -> None:
        """A fence's result srun relays from the step's nodes."""

    def close(self) -> None:
        """The step has ended on this node."""


class StepInfo:
    """What a server knows of its step: who and where, the layout of its tasks (node to global task
    ids, in node order), and how it reaches srun (``send``) and ends the step on its node (``abort``).
    ``spawn`` starts a step daemon of the agent's in a mode of its own (``pmix``) as the step's user,
    on the task's node (its ``spec`` gets the user and the node's identity); it answers an object
    with ``pid``, the binary ``stdin`` and ``stdout`` pipes, and ``end(grace)`` (end of input, then
    SIGKILL after ``grace`` seconds if it is still there). ``secret``: a value every node of the step
    derives alike from its credential and no other user knows."""

    def __init__(self, *, job_id: int, step_id: int, node: str, layout: dict[str, list[int]],
                 send: Callable[[dict[str, Any]], None], abort: Callable[[str], None],
                 spawn: Callable[[str, dict[str, Any]], Any] | None = None, secret: str = "") -> None:
        self.job_id, self.step_id, self.node = job_id, step_id, node
        self.layout, self.send, self.abort, self.spawn, self.secret = layout, send, abort, spawn, secret


def load(name: str, info: StepInfo) -> MpiServer:
    """The server of MPI type ``name`` for one step on one node."""
    from wattsched import plugins

    server = plugins.load(f"mpi/{name}", info=info)
    if not isinstance(server, MpiServer):
        raise MpiError(f"plugin 'mpi/{name}' does not provide what an MpiServer declares")
    return server


def process_mapping(layout: dict[str, list[int]]) -> str:
    """PMI's ``PMI_process_mapping``: the ranks' placement as MPICH reads it, ``(vector,(first node,
    node count, ranks per node),...)``, the runs of consecutive ranks on consecutive nodes."""
    node_of = {task: index for index, tasks in enumerate(layout.values()) for task in tasks}
    runs: list[list[int]] = []  # [node, block]: consecutive ranks on one node
    for rank in range(len(node_of)):
        node = node_of.get(rank, -1)
        if runs and runs[-1][0] == node:
            runs[-1][1] += 1
        else:
            runs.append([node, 1])
    triples: list[list[int]] = []  # [first node, node count, block]
    for node, block in runs:
        last = triples[-1] if triples else None
        if last and last[2] == block and last[0] + last[1] == node:
            last[1] += 1
        else:
            triples.append([node, 1, block])
    # MPICH repeats the vector until every rank is placed: Slurm writes a cyclic layout's period once
    period = next(p for p in range(1, len(triples) + 1)
                  if len(triples) % p == 0 and triples == triples[:p] * (len(triples) // p))
    triples = triples[:period]
    return "(vector," + ",".join(f"({a},{b},{c})" for a, b, c in triples) + ")"

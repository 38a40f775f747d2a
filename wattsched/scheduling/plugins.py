"""The interfaces of the policy plugins a pass calls: priority (a job's priority), select (where
a job fits) and scheduler (the walk over the queue that starts and reserves jobs). Each plugin
family's implementations are in wattsched.plugins, named in the configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from wattsched.scheduling.candidates import Candidates
    from wattsched.scheduling.records import Allocation, Decisions, JobRequest, NodeSnap, Snapshot
    from wattsched.scheduling.throttle import Throttle


@runtime_checkable
class PriorityPlugin(Protocol):
    # a job's priority depends on the job alone (priority/basic, not priority/multifactor): the
    # queue memo then keeps each job's priority and rank from pass to pass (QueueMemo)
    static: bool

    def priorities(self, snapshot: Snapshot) -> dict[int, int]: ...


@runtime_checkable
class SelectPlugin(Protocol):
    def select(self, job: JobRequest, candidates: list[NodeSnap], free: Mapping[str, tuple[int, int]],
               def_mem_per_cpu_mb: int, gpus: Mapping[str, Mapping[str, int]] | None = None) -> Allocation | None:
        """Where the job fits, given each candidate's free CPUs and memory and, for a job that asks
        for GPUs, each GPU node's free GPUs by type (:class:`GpuLedger`)."""
        ...

    def quick_select(self, job: JobRequest, candidates: Candidates, def_mem_per_cpu_mb: int) -> Allocation | None:
        """What select() would choose for a job of a common shape, found through an index the plugin
        keeps in the memo (:meth:`Candidates.index`) instead of a scan of every candidate; None when
        the job is not of such a shape or the index finds nothing (then select() decides)."""
        ...


class NodeIndex(Protocol):
    """A select plugin's index over one candidate list, kept by :class:`NodeMemo` from pass to pass."""

    def update(self, node: NodeSnap, free: tuple[int, int]) -> None:
        """The node (perhaps not in the index's list) now has these free CPUs and memory."""
        ...



@runtime_checkable
class SchedulerPlugin(Protocol):
    """Walks ``order`` (the pending jobs, highest priority first), skipping the ``ineligible`` ones
    (job id -> their reason; both read-only), and records what to start and why others wait."""

    # plans the whole queue when Snapshot.backfill_due (every bf_interval, strict passes between),
    # from the running jobs' ends: the shells then give it Snapshot.running at those passes
    backfill: bool

    def plan(self, snapshot: Snapshot, order: Sequence[JobRequest], ineligible: Mapping[int, str],
             select: SelectPlugin, throttle: Throttle, decisions: Decisions) -> None: ...

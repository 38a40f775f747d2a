"""What an agent knows of each job on its nodes, beside the books of their allocations
(noded.allocations, which the meter and profiler threads share under the agent's lock): one
:class:`JobHere` record per (node, job), made when first needed and dropped when its last part
goes, and the jobs recently over here, whose late steps are refused at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from wattsched.api import JobAllocation

ENDED_KEPT = 10000  # ended (node, job) pairs remembered, to refuse their step credentials at once


@dataclass(slots=True)
class JobHere:
    """One job on one node. A part is None while absent; the record goes when every part has."""

    alloc: JobAllocation | None = None  # what its Prolog and Epilog are told
    prolog: asyncio.Future[bool] | None = None  # its Prolog: done (True/False) before anything of it starts
    arrival: asyncio.Future[None] | None = None  # steps that came before its allocation: woken by it
    # its Epilog, running: the node is not clean of the job until it is done (and the loop keeps only
    # weak references to tasks: this is the strong one)
    epilog: asyncio.Task[None] | None = None
    pgids: set[int] | None = None  # its steps' process groups, from their first launch here to its end

    def gone(self) -> bool:
        return self.alloc is None and self.prolog is None and self.arrival is None and self.epilog is None \
            and self.pgids is None


class JobsHere:
    """The records by (node, job id), and the jobs over here, oldest first."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], JobHere] = {}
        self.ended: dict[tuple[str, int], None] = {}

    def make(self, node: str, job_id: int) -> JobHere:
        """The job's record on the node, made when first needed."""
        record = self.records.get((node, job_id))
        if record is None:
            record = self.records[(node, job_id)] = JobHere()
        return record

    def get(self, node: str, job_id: int) -> JobHere:
        """The job's record on the node, or an empty one (not kept) when there is none."""
        return self.records.get((node, job_id)) or JobHere()

    def tidy(self, node: str, job_id: int) -> None:
        """The job's record goes once every part of it has."""
        record = self.records.get((node, job_id))
        if record is not None and record.gone():
            del self.records[(node, job_id)]

    def step_groups(self, node: str, job_id: int) -> set[int]:
        """The set its steps' tasks put their process groups in, kept until the job ends here."""
        record = self.make(node, job_id)
        if record.pgids is None:
            record.pgids = set()
        return record.pgids

    def drop_step_groups(self, node: str, job_id: int) -> set[int]:
        """Its steps' process groups, forgotten (the job is over here)."""
        record = self.records.get((node, job_id))
        if record is None or record.pgids is None:
            return set()
        pgids, record.pgids = record.pgids, None
        self.tidy(node, job_id)
        return pgids

    def over(self, node: str, job_id: int) -> None:
        """The job is over on the node (the oldest such are forgotten past ENDED_KEPT)."""
        self.ended[(node, job_id)] = None
        while len(self.ended) > ENDED_KEPT:
            self.ended.pop(next(iter(self.ended)))

    def again(self, node: str, job_id: int) -> None:
        """The job runs on the node again (requeued)."""
        self.ended.pop((node, job_id), None)

    def is_over(self, node: str, job_id: int) -> bool:
        return (node, job_id) in self.ended

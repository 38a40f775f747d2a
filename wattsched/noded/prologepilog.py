"""Prolog and Epilog on an agent's nodes, as root, as slurmd runs them. A job's Prolog runs when
its allocation arrives, before anything of it starts on the node; a failure is reported (the
controller drains the node and requeues the job held) and nothing of the job starts there. Its
Epilog runs when it is over on the node, which is not clean of it until the Epilog is done (the
controller keeps it COMPLETING there). An Epilog owed is saved with the allocation, so that one
whose agent died before or while it ran runs after the restart: it is never skipped, and may run
twice (Epilogs must be idempotent)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable

from wattsched import prologs
from wattsched.api import JobAllocation, JobEvent
from wattsched.config import Config
from wattsched.noded.jobshere import JobsHere

log = logging.getLogger("wattsched.noded")


class PrologEpilog:
    """The Prologs and Epilogs of the jobs on an agent's nodes (see the module docstring);
    ``report`` sends an end to the controller, ``release`` ends a job on a node whose Prolog failed."""

    def __init__(self, config: Config, spool: str, jobs: JobsHere, report: Callable[[JobEvent], None],
                 release: Callable[[str, int], None]):
        self.config = config  # (scontrol reconfigure replaces it: the programs and their timeout)
        self.spool = spool
        self.jobs = jobs
        self.report = report
        self.release = release

    def _environment(self, context: str, node: str, alloc: JobAllocation) -> dict[str, str]:
        return prologs.environment(context, job_id=alloc.job_id, uid=alloc.uid, gid=alloc.gid, user=alloc.user,
                                   account=alloc.account, partition=alloc.partition, node_list=alloc.node_list,
                                   job_name=alloc.job_name, cluster=self.config.cluster_name, node=node)

    # --- Prolog -----------------------------------------------------------------------------------

    def start_prolog(self, node: str, alloc: JobAllocation) -> None:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.jobs.make(node, alloc.job_id).prolog = future
        asyncio.get_running_loop().create_task(self._prolog(node, alloc, future))

    async def _prolog(self, node: str, alloc: JobAllocation, future: asyncio.Future[bool]) -> None:
        code, error = await asyncio.to_thread(prologs.run_program, self.config.prolog,
                                              self._environment("prolog_slurmd", node, alloc),
                                              self.config.prolog_epilog_timeout_s)
        future.set_result(code == 0)
        if code:
            log.error("prolog failed", extra={"job": alloc.job_id, "node": node, "error": error})
            self.report(JobEvent(job_id=alloc.job_id, node=node, run=alloc.run, step_id="prolog",
                                 exit_code=code, end_time=time.time(), error=error[:1024]))
            self.release(node, alloc.job_id)

    async def prolog_ok(self, node: str, job_id: int) -> bool:
        """Whether the job's Prolog on the node succeeded (waiting for it; True without a Prolog)."""
        future = self.jobs.get(node, job_id).prolog
        return True if future is None else await asyncio.shield(future)

    # --- Epilog -----------------------------------------------------------------------------------

    def _saved(self, node: str, job_id: int) -> str:
        return os.path.join(self.spool, node, "epilog", f"{int(job_id)}.json")

    def owe_epilog(self, node: str, alloc: JobAllocation) -> None:
        """The job's Epilog is owed on the node: saved, so that a restart of the agent runs it."""
        path = self._saved(node, alloc.job_id)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path + ".tmp", "w") as handle:
            handle.write(alloc.model_dump_json())
        os.replace(path + ".tmp", path)

    def recover(self, nodes: Iterable[str], allocated: Callable[[str, int], bool]) -> None:
        """After a restart: the Epilogs owed. A job still allocated here gets its Epilog when it
        ends; one that ended while its Epilog was due or running gets it now."""
        for node in nodes:
            folder = os.path.join(self.spool, node, "epilog")
            for name in os.listdir(folder) if os.path.isdir(folder) else ():
                try:
                    with open(os.path.join(folder, name)) as handle:
                        alloc = JobAllocation.model_validate_json(handle.read())
                except (OSError, ValueError):
                    continue
                if allocated(node, alloc.job_id):
                    self.jobs.make(node, alloc.job_id).alloc = alloc
                else:
                    self.start_epilog(node, alloc)

    def start_epilog(self, node: str, alloc: JobAllocation) -> None:
        self.jobs.make(node, alloc.job_id).epilog = asyncio.get_running_loop().create_task(self._epilog(node, alloc))

    async def _epilog(self, node: str, alloc: JobAllocation) -> None:
        code, error = await asyncio.to_thread(prologs.run_program, self.config.epilog,
                                              self._environment("epilog_slurmd", node, alloc),
                                              self.config.prolog_epilog_timeout_s)
        if code:  # the controller drains the node
            log.error("epilog failed", extra={"job": alloc.job_id, "node": node, "error": error})
        # its end (success too) tells the controller the node is clean of the job
        self.report(JobEvent(job_id=alloc.job_id, node=node, run=alloc.run, step_id="epilog",
                             exit_code=code, end_time=time.time(), error=error[:1024]))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._saved(node, alloc.job_id))
        self.jobs.get(node, alloc.job_id).epilog = None
        self.jobs.tidy(node, alloc.job_id)

"""Batch scripts on a node: launch, signal, kill with KillWait, and survive agent restarts.

A script runs under a tiny ``/bin/sh`` supervisor that writes the script's pid and, when it
ends, its exit status to the job's spool folder. The agent normally learns the end from
the supervisor's exit; after an agent restart it adopts running supervisors and picks up
the status files of scripts that ended while it was away, so no job's end is lost.

The supervisor ignores the termination signals it forwards, which keeps it alive to record
the status; ``wait`` reports a signalled script as 128+N, which we report as signal N.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wattsched.api import BatchLaunch, JobEvent
from wattsched.noded import procs

log = logging.getLogger("wattsched.noded")

SUPERVISOR = (
    '"$@" & child=$!\n'
    'trap "" TERM INT HUP QUIT USR1 USR2 ALRM\n'
    'echo "$child" > "$WATTSCHED_SPOOL/script.pid"\n'
    'wait "$child"; rc=$?\n'
    'echo "$rc" > "$WATTSCHED_SPOOL/status.tmp" && mv "$WATTSCHED_SPOOL/status.tmp" "$WATTSCHED_SPOOL/status"\n'
)


@dataclass
class BatchJob:
    job_id: int
    node: str
    run: int
    spool: str
    supervisor_pid: int
    start: float
    signalled: bool = False
    adopted: bool = False
    kill_task: asyncio.Task | None = None
    step_pgids: set[int] = field(default_factory=set)


class BatchRunner:
    """The batch scripts of the nodes one agent hosts."""

    def __init__(self, spool_root: str, kill_wait_s: int, on_end: Callable[[JobEvent], None]):
        self.spool_root = spool_root
        self.kill_wait_s = kill_wait_s
        self.on_end = on_end
        self.jobs: dict[int, BatchJob] = {}

    def job_dir(self, node: str, job_id: int, run: int) -> str:
        return os.path.join(self.spool_root, node, f"job{job_id:08d}" + (f".{run}" if run else ""))

    def launch(self, req: BatchLaunch) -> None:
        if req.job_id in self.jobs:
            return
        spool = self.job_dir(req.node, req.job_id, req.run)
        if os.path.exists(os.path.join(spool, "status")):
            return  # already ran; its end is in the event outbox
        os.makedirs(spool, exist_ok=True)
        script = os.path.join(spool, "script")
        with open(script, "w") as handle:
            handle.write(req.script)
        os.chmod(script, 0o700)
        if os.geteuid() == 0 and req.uid != 0:
            os.chown(spool, req.uid, req.gid)
            os.chown(script, req.uid, req.gid)
        env = dict(req.environment, WATTSCHED_SPOOL=spool)
        fds: list[int] = []
        try:
            stdin = os.open(req.std_in, os.O_RDONLY) if req.std_in else os.open(os.devnull, os.O_RDONLY)
            fds.append(stdin)
            out = procs.open_output(req.std_out, req.open_mode, req.uid, req.gid)
            fds.append(out)
            err = out if req.std_err == req.std_out else procs.open_output(req.std_err, req.open_mode,
                                                                           req.uid, req.gid)
            fds.append(err)
            work_dir = req.work_dir if os.path.isdir(req.work_dir) else "/tmp"
            proc = procs.spawn(["/bin/sh", "-c", SUPERVISOR, "slurm_script", script, *req.argv], env=env,
                               cwd=work_dir, uid=req.uid, gid=req.gid, stdin=stdin, stdout=out, stderr=err)
        except OSError as exc:
            log.warning("batch launch failed", extra={"job": req.job_id, "error": str(exc)})
            self._write_status(spool, 1)
            self.on_end(JobEvent(job_id=req.job_id, node=req.node, run=req.run, exit_code=1, end_time=time.time()))
            return
        finally:
            for fd in set(fds):
                os.close(fd)
        with open(os.path.join(spool, "job.json"), "w") as handle:
            json.dump({"job_id": req.job_id, "node": req.node, "run": req.run, "supervisor": proc.pid,
                       "start": time.time()}, handle)
        job = BatchJob(req.job_id, req.node, req.run, spool, proc.pid, time.time())
        self.jobs[req.job_id] = job
        procs.reap(proc, asyncio.get_running_loop()).add_done_callback(
            lambda fut: self._ended(job, fut.result()))

    def _write_status(self, spool: str, code: int) -> None:
        with open(os.path.join(spool, "status"), "w") as handle:
            handle.write(f"{code}\n")

    def _ended(self, job: BatchJob, sup: procs.Exit) -> None:
        code, sig = self._script_status(job, sup)
        procs.killpg(job.supervisor_pid, signal.SIGKILL)  # the script's leftover processes die with it
        for pgid in job.step_pgids:
            procs.killpg(pgid, signal.SIGKILL)
        if job.kill_task:
            job.kill_task.cancel()
        self.jobs.pop(job.job_id, None)
        self.on_end(JobEvent(job_id=job.job_id, node=job.node, run=job.run, exit_code=code, term_signal=sig,
                             end_time=time.time(), total_cpu_s=sup.cpu_s, max_rss_kb=sup.max_rss_kb))

    def _script_status(self, job: BatchJob, sup: procs.Exit) -> tuple[int, int]:
        try:
            with open(os.path.join(job.spool, "status")) as handle:
                rc = int(handle.read().strip())
        except (OSError, ValueError):
            return (sup.exit_code, sup.term_signal) if sup.term_signal else (sup.exit_code or 1, 0)
        if rc > 128 and (job.signalled or rc - 128 in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT,
                                                      signal.SIGBUS, signal.SIGFPE, signal.SIGILL)):
            return 0, rc - 128
        return rc, 0

    def script_pid(self, job: BatchJob) -> int | None:
        try:
            with open(os.path.join(job.spool, "script.pid")) as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):
            return None

    def signal(self, job_id: int, sig: int, batch_only: bool) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        job.signalled = True
        if batch_only:
            pid = self.script_pid(job)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            return
        procs.killpg(job.supervisor_pid, sig)
        for pgid in job.step_pgids:
            procs.killpg(pgid, sig)

    def terminate(self, job_id: int) -> bool:
        """SIGTERM now, SIGKILL after KillWait; True when nothing of the job is left here."""
        job = self.jobs.get(job_id)
        if job is None:
            return True
        self.signal(job_id, signal.SIGTERM, False)
        if job.kill_task is None:
            job.kill_task = asyncio.get_running_loop().create_task(self._kill_later(job))
        return False

    async def _kill_later(self, job: BatchJob) -> None:
        await asyncio.sleep(self.kill_wait_s)
        self.signal(job.job_id, signal.SIGKILL, False)

    def recover(self, nodes: list[str]) -> None:
        """After a restart: report scripts that ended meanwhile, adopt those still running."""
        for node in nodes:
            node_dir = os.path.join(self.spool_root, node)
            if not os.path.isdir(node_dir):
                continue
            for entry in sorted(os.listdir(node_dir)):
                if not entry.startswith("job"):
                    continue  # the node's other state: cpufreq tree, allocations, BMC files
                spool = os.path.join(node_dir, entry)
                try:
                    with open(os.path.join(spool, "job.json")) as handle:
                        info = json.load(handle)
                except (OSError, ValueError):
                    shutil.rmtree(spool, ignore_errors=True)
                    continue
                job = BatchJob(info["job_id"], node, info.get("run", 0), spool, info["supervisor"], info["start"],
                               adopted=True)
                if os.path.exists(os.path.join(spool, "status")) or not procs.alive(job.supervisor_pid):
                    code, sig = self._script_status(job, procs.Exit(1, 0, 0.0, 0))
                    self.on_end(JobEvent(job_id=job.job_id, node=node, run=job.run, exit_code=code,
                                         term_signal=sig, end_time=time.time()))
                else:
                    self.jobs[job.job_id] = job

    async def poll_adopted(self) -> None:
        """Adopted supervisors are not our children: watch for their status files instead."""
        for job in [j for j in self.jobs.values() if j.adopted]:
            if os.path.exists(os.path.join(job.spool, "status")) or not procs.alive(job.supervisor_pid):
                self._ended(job, procs.Exit(1, 0, 0.0, 0))

    def forget(self, event: JobEvent) -> None:
        """The controller has the run's end: drop its spool folder."""
        shutil.rmtree(self.job_dir(event.node, event.job_id, event.run), ignore_errors=True)

    def running_on(self, node: str) -> list[int]:
        return [j.job_id for j in self.jobs.values() if j.node == node]

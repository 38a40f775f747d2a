"""Batch scripts on a node: launch, signal, kill with KillWait, and survive agent restarts.

Each script runs under a root supervisor, the step daemon (:mod:`wattsched.noded.stepd`), which
becomes the user before it opens the script's files and records the script's pid and exit status.
Two folders per run keep trust apart:

* ``<spool>/<node>/jobNNNNNNNN[.run]/``, root's (0700): ``job.json`` (the supervisor's pid and start
  time, written by the agent), ``script.pid`` and ``status`` (written by the supervisor). Only these
  are believed, also after an agent restart.
* ``<spool>/<node>/scratch/jobNNNNNNNN[.run]/``, root's (0711): the script itself, root's with a POSIX
  ACL that lets its user (alone) read and run it. The user can write nothing there, so no job fills
  the spool's filesystem through it; the agent never reads the script again. (Without ACLs on that
  filesystem the folder and script are handed to the user instead.)

A pid is signalled only while the process that bears it is verifiably the one recorded (pid and
start time), so a restarted agent never signals a stranger that reused the number.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from wattsched.api import BatchLaunch, JobEvent, TaskUsage
from wattsched.noded import procs, stepd

log = logging.getLogger("wattsched.noded")

ERROR_MAX = 1000  # characters of a launch error carried to the controller


@dataclass
class BatchJob:
    job_id: int
    node: str
    run: int
    spool: str
    supervisor_pid: int
    supervisor_start: int
    start: float
    signalled: bool = False
    adopted: bool = False
    kill_task: asyncio.Task | None = None
    script: tuple[int, int] | None = None  # the script's (pid, start time), once the supervisor wrote it

    def supervisor_alive(self) -> bool:
        return procs.same_process(self.supervisor_pid, self.supervisor_start)


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_ACL_XATTR = "system.posix_acl_access"
_ACL = struct.Struct("<HHI")  # one entry of the kernel's ACL xattr: tag, permissions, id
_ACL_UNDEFINED_ID = 0xFFFFFFFF
_acl_warned = False


def _grant_read_exec(fd: int, uid: int) -> bool:
    """Give ``uid`` read and execute on a root-owned file of mode 0700 through a POSIX ACL (owner rwx,
    that user r-x, group and others nothing); False where the filesystem keeps no ACLs."""
    global _acl_warned
    entries = ((0x01, 7, _ACL_UNDEFINED_ID), (0x02, 5, uid), (0x04, 0, _ACL_UNDEFINED_ID),
               (0x10, 5, _ACL_UNDEFINED_ID), (0x20, 0, _ACL_UNDEFINED_ID))  # USER_OBJ USER GROUP_OBJ MASK OTHER
    try:
        os.setxattr(fd, _ACL_XATTR, struct.pack("<I", 2) + b"".join(_ACL.pack(*e) for e in entries))
    except OSError as exc:
        if not _acl_warned:
            log.warning("no POSIX ACLs under SlurmdSpoolDir: batch scripts' folders are their users'",
                        extra={"error": exc.strerror})
            _acl_warned = True
        return False
    return True


def _private_dir(path: str) -> None:
    """A root-owned folder only root may enter, made afresh."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)


class BatchRunner:
    """The batch scripts of the nodes one agent hosts."""

    def __init__(self, spool_root: str, kill_wait_s: int, on_end: Callable[[JobEvent], None],
                 confine: Callable[[str, int, int, int], dict] = lambda _node, _job, _uid, _gid: {},
                 task_scripts: dict[str, str] | None = None,
                 propagated: Callable[[dict[str, int]], dict[str, int]] = lambda _limits: {}):
        self.spool_root = spool_root
        self.propagated = propagated  # of the submitting shell's limits, those the site propagates
        self.kill_wait_s = kill_wait_s
        self.on_end = on_end
        self.confine = confine  # (node, job, uid, gid) -> what the script does first: cgroups, a virtual host, CPUs
        self.task_scripts = task_scripts or {}  # TaskProlog / TaskEpilog, run as the user around the script
        self.jobs: dict[int, BatchJob] = {}

    def job_dir(self, node: str, job_id: int, run: int) -> str:
        return os.path.join(self.spool_root, node, self._name(job_id, run))

    def scratch_dir(self, node: str, job_id: int, run: int) -> str:
        return os.path.join(self.spool_root, node, "scratch", self._name(job_id, run))

    @staticmethod
    def _name(job_id: int, run: int) -> str:
        return f"job{job_id:08d}" + (f".{run}" if run else "")

    def _prepare_scratch(self, req: BatchLaunch) -> str:
        """The folder with the script in it, root's (0711): the user may read and run the script (a
        POSIX ACL names them) but write nothing there, so no job can fill the spool's filesystem
        through it. Where the filesystem has no ACLs the folder and script are handed to the user,
        as before. Returns the script's path."""
        parent = os.path.join(self.spool_root, req.node, "scratch")
        os.makedirs(parent, exist_ok=True)
        for folder in (os.path.dirname(parent), parent):
            os.chmod(folder, 0o711)  # users reach their own run's folder, list nobody's
        scratch = self.scratch_dir(req.node, req.job_id, req.run)
        shutil.rmtree(scratch, ignore_errors=True)  # symlink-safe: it never follows a link
        os.mkdir(scratch, 0o700)
        os.chmod(scratch, 0o711)  # not by mkdir's mode: the agent's umask is 077
        script = os.path.join(scratch, "slurm_script")
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(req.script)
            if os.geteuid() == 0 and req.uid != 0 and not _grant_read_exec(handle.fileno(), req.uid):
                os.fchown(handle.fileno(), req.uid, req.gid)
                os.chmod(scratch, 0o700)
                os.chown(scratch, req.uid, req.gid)
        return script

    def launch(self, req: BatchLaunch) -> None:
        if req.job_id in self.jobs:
            return
        spool = self.job_dir(req.node, req.job_id, req.run)
        if os.path.exists(os.path.join(spool, "status")):
            return  # already ran; its end is in the event outbox
        try:
            _private_dir(spool)
            script = self._prepare_scratch(req)
            spec = {"uid": req.uid, "gid": req.gid, "groups": procs.user_groups(req.user, req.gid),
                    "umask": procs.umask_of(req.environment), "work_dir": req.work_dir, "stdin": req.std_in,
                    "stdout": req.std_out, "stderr": req.std_err, "open_mode": req.open_mode,
                    "argv": [script, *req.argv], "env": req.environment, "spool": spool,
                    "rlimits": self.propagated(req.rlimits),
                    **self.confine(req.node, req.job_id, req.uid, req.gid), **self.task_scripts}
            with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
                proc = procs.spawn_stepd("batch", spec, cwd=spool, stdin=null_in.fileno(),
                                         stdout=null_out.fileno(), stderr=null_out.fileno())
        except OSError as exc:
            log.warning("batch launch failed", extra={"job": req.job_id, "error": str(exc)})
            if os.path.isdir(spool):  # a repeated launch of this run finds it over
                stepd.write_private(os.path.join(spool, "status"), {"exit_code": 1, "signal": 0})
            self.on_end(JobEvent(job_id=req.job_id, node=req.node, run=req.run, exit_code=1, end_time=time.time(),
                                 error=f"launch failed: {exc}"[:ERROR_MAX]))
            return
        job = BatchJob(req.job_id, req.node, req.run, spool, proc.pid, proc.start, time.time())
        with open(os.path.join(spool, "job.json"), "w") as handle:
            json.dump({"job_id": req.job_id, "node": req.node, "run": req.run, "supervisor": proc.pid,
                       "supervisor_start": job.supervisor_start, "start": job.start}, handle)
        self.jobs[req.job_id] = job
        procs.reap(proc, asyncio.get_running_loop()).add_done_callback(
            lambda fut: self._ended(job, fut.result()))

    def _ended(self, job: BatchJob, sup: procs.Exit) -> None:
        if job.kill_task:
            job.kill_task.cancel()
        if self.jobs.get(job.job_id) is not job:
            return
        self.jobs.pop(job.job_id, None)
        record = _read_json(os.path.join(job.spool, "status"))
        if record is None:
            # the supervisor itself was killed: its script may live on, orphaned; it dies now
            script = self.script_process(job)
            if script and procs.same_process(*script):
                procs.killpg(script[0], signal.SIGKILL)
            code, sig = (0, sup.term_signal or signal.SIGKILL) if sup.term_signal or job.signalled else \
                (sup.exit_code or 1, 0)
            record = {"exit_code": code, "signal": sig}
        error = str(record.get("error", ""))[:ERROR_MAX]
        if error:
            log.warning("batch launch failed", extra={"job": job.job_id, "node": job.node, "error": error})
        tasks = []
        with contextlib.suppress(TypeError, ValueError):  # an older supervisor's record has no usage
            tasks = [TaskUsage(node=job.node, **record["usage"])] if "usage" in record else []
        self.on_end(JobEvent(job_id=job.job_id, node=job.node, run=job.run, exit_code=int(record["exit_code"]),
                             term_signal=int(record.get("signal", 0)), end_time=time.time(), tasks=tasks,
                             error=error))

    def script_process(self, job: BatchJob) -> tuple[int, int] | None:
        """The script's (pid, start time), as its supervisor recorded it."""
        if job.script is None:
            data = _read_json(os.path.join(job.spool, "script.pid"))
            if data is not None:
                job.script = (int(data["pid"]), int(data["start"]))
        return job.script

    def script_pgid(self, job: BatchJob) -> int | None:
        """The script's process group while its supervisor is alive (so the number is still the job's).
        Our own child cannot have been replaced before we reap it, so only an adopted supervisor is
        checked in /proc (the throttle asks twice a period for every job)."""
        script = self.script_process(job)
        return script[0] if script and (not job.adopted or job.supervisor_alive()) else None

    def signal(self, job_id: int, sig: int, batch_only: bool) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        job.signalled = True
        pgid = self.script_pgid(job)
        if pgid is None:
            # not started yet: a termination stops it from starting (its supervisor dies before the exec)
            if sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT) and job.supervisor_alive():
                procs.killpg(job.supervisor_pid, signal.SIGKILL)
            return
        if batch_only:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pgid, sig)
            return
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
        """After a restart: report scripts that ended meanwhile, adopt those still running. Only the
        root-owned records are read, and a supervisor counts as running only if its pid still names
        the process that started at the recorded time."""
        for node in nodes:
            node_dir = os.path.join(self.spool_root, node)
            if not os.path.isdir(node_dir):
                continue
            for entry in sorted(os.listdir(node_dir)):
                if not entry.startswith("job"):
                    continue  # the node's other state: scratch, cpufreq tree, allocations, BMC files
                spool = os.path.join(node_dir, entry)
                info = _read_json(os.path.join(spool, "job.json")) or {}
                try:
                    job = BatchJob(int(info["job_id"]), node, int(info.get("run", 0)), spool,
                                   int(info["supervisor"]), int(info.get("supervisor_start", 0)),
                                   float(info["start"]), adopted=True)
                except (TypeError, KeyError, ValueError):
                    shutil.rmtree(spool, ignore_errors=True)
                    continue
                if os.path.exists(os.path.join(spool, "status")) or not job.supervisor_alive():
                    self.jobs[job.job_id] = job
                    self._ended(job, procs.Exit(1, 0))
                else:
                    self.jobs[job.job_id] = job

    async def poll_adopted(self) -> None:
        """Adopted supervisors are not our children: watch for their status files instead."""
        for job in [j for j in self.jobs.values() if j.adopted]:
            if os.path.exists(os.path.join(job.spool, "status")) or not job.supervisor_alive():
                self._ended(job, procs.Exit(1, 0))

    def forget(self, event: JobEvent) -> None:
        """The controller has the run's end: drop its folders (rmtree never follows the user's links)."""
        shutil.rmtree(self.job_dir(event.node, event.job_id, event.run), ignore_errors=True)
        shutil.rmtree(self.scratch_dir(event.node, event.job_id, event.run), ignore_errors=True)

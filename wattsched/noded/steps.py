"""Step tasks on a node: started for srun, their output streamed back to it as NDJSON.

srun posts one request per node with the step credential the controller signed. The
answer is a stream of lines ``{"task": N, "fd": 1|2, "data": "..."}`` while tasks run, then
one ``{"task": N, "exit": code, "signal": sig}`` per task. If srun goes away the tasks get
SIGTERM, then SIGKILL after KillWait, as Slurm does. However the tasks end, their usage goes to
the controller from the agent (``on_end``), not through srun, which may be gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wattsched import hostlist, multiprog, patterns
from wattsched.api import JobEvent, TaskLaunch, TaskUsage
from wattsched.config import LOG_LEVELS
from wattsched.cpubind import TaskBinding
from wattsched.noded import procs

if TYPE_CHECKING:
    from wattsched.plugins.mpi import MpiServer

log = logging.getLogger("wattsched.noded")


@dataclass
class LiveStep:
    """A step's tasks on a node while they run, as the agent's routes reach them: ``terminate``
    ends them for a failure elsewhere in the step (srun -K, an MPI abort); ``signal`` sends them a
    signal (scancel JOB.STEP: SIGKILL cancels); ``mpi`` is the step's MPI server here (srun --mpi),
    which srun hands the other nodes' fence parts."""

    terminate: Callable[[str], None]
    signal: Callable[[int], None]
    aborted: Callable[[], None]  # the job ends under the step (scancel, its time limit): srun is told
    mpi: MpiServer | None = None
    # sattach's: each gets the tasks' output from when it came, then None when the step is over
    watchers: list[asyncio.Queue[bytes | None]] = field(default_factory=list)


def unreported(_event: JobEvent) -> None:
    """The end of a step of no job (srun -Z): nothing to account, no one to tell but srun."""


MAX_WATCHERS = 8  # sattach clients of one step on one node at once
WATCHER_BACKLOG = 10_000  # output lines a sattach may fall behind by before it is let go
IDENTITY = ("hostname", "hosts_file", "tmp_dir")  # a virtual node's, as extra_spec holds it


class Helper:
    """A step daemon an MPI plugin asked for (mpi.StepInfo.spawn), in a mode of its own, as the
    step's user on the task's node: its pipes, and its end. What it writes on standard error goes
    to the agent's log."""

    def __init__(self, mode: str, spec: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        self.daemon = procs.spawn_stepd(mode, spec, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        self.pid, self.stdin, self.stdout = self.daemon.pid, self.daemon.stdin, self.daemon.stdout
        self.reaped = procs.reap(self.daemon, loop)
        self.loop = loop
        threading.Thread(target=_log_lines, args=(self.daemon.stderr, mode), daemon=True).start()

    def end(self, grace: float) -> None:
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                self.stdin.close()
        self.loop.call_later(grace, self._kill)

    def _kill(self) -> None:
        if not self.reaped.done():  # (until reaped, its pid and group are still its own)
            procs.killpg(self.pid, signal.SIGKILL)


def _log_lines(pipe: Any, mode: str) -> None:
    with contextlib.suppress(ValueError, OSError):
        for line in pipe:
            log.warning("step helper said", extra={"mode": mode, "line": line[:1000].decode(errors="replace").rstrip()})
    with contextlib.suppress(OSError):
        pipe.close()


def task_environment(req: TaskLaunch, layout: dict[str, list[int]], task_id: int, local_id: int,
                     node_index: int) -> dict[str, str]:
    nodes = list(layout)
    env = dict(req.environment)
    ntasks = str(sum(len(t) for t in layout.values()))
    if not req.preserve_env:  # srun -E keeps the allocation's, as Slurm's
        env.update(SLURM_NNODES=str(len(nodes)), SLURM_NTASKS=ntasks, SLURM_NPROCS=ntasks)
    env.update({
        "SLURM_STEP_ID": str(req.step_id), "SLURM_STEPID": str(req.step_id),
        "SLURM_PROCID": str(task_id), "SLURM_LOCALID": str(local_id), "SLURM_NODEID": str(node_index),
        "SLURM_STEP_NODELIST": hostlist.compress(nodes), "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NUM_TASKS": ntasks,
        "SLURM_STEP_TASKS_PER_NODE": ",".join(str(len(t)) for t in layout.values()),
        "SLURM_GTIDS": ",".join(str(t) for t in layout[req.node]),
        "SLURMD_NODENAME": req.node, "SLURM_JOB_ID": str(req.job_id), "SLURM_JOBID": str(req.job_id),
        # Slurm's without a topology plugin: each node is its own address, of the one level "node"
        "SLURM_TOPOLOGY_ADDR": req.node, "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
    })
    return env


async def run_tasks(req: TaskLaunch, layout: dict[str, list[int]], uid: int, gid: int, user: str,
                    kill_wait_s: int, pgids: set[int], on_end: Callable[[JobEvent], None],
                    inputs: list, cgroup_procs: list[str] | None = None,
                    extra_spec: dict[str, Any] | None = None,
                    binding: TaskBinding | None = None,
                    live: dict[tuple[int, int, str], LiveStep] | None = None) -> AsyncIterator[bytes]:
    """Start this node's tasks and yield their output and exits as NDJSON lines; report their
    end and usage with ``on_end`` once all are reaped (or killed). The stdin pipes of the tasks
    that read srun's input (srun -i, --pty) are put in ``inputs`` for the stdin endpoint; each
    task enters the step's cgroups (``cgroup_procs``) before it becomes the user; ``extra_spec``
    holds TaskProlog, TaskEpilog and a virtual node's hostname; ``binding`` each local task's CPUs
    and the SLURM_CPU_BIND* variables (wattsched.cpubind); ``live``, where the running step is found
    (LiveStep). Each task's exit is told as soon as it is reaped, so that srun -K can act on it."""
    loop = asyncio.get_running_loop()
    results: dict[int, procs.Exit] = {}
    fed = set(req.stdin_tasks) | ({0} if req.pty else set())
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    node_index = list(layout).index(req.node)
    running: list[tuple[int, procs.StepDaemon, asyncio.Future]] = []
    readers: list[threading.Thread] = []
    groups = procs.user_groups(user, gid)
    key = (req.job_id, req.step_id, req.node)

    # how the step was ended, once: SIGTERM (a task's failure) or SIGKILL (scancel); a task
    # started after that gets the same at once
    ended_by: list[int] = []

    def alive() -> list[procs.StepDaemon]:
        return [proc for _task, proc, fut in running if not fut.done()]

    def terminate(reason: str) -> None:
        """The step ends here for a task's failure (Slurm's SIG_TERM_KILL): SIGTERM, SIGKILL after
        KillWait; the step's first node says so in Slurm's words, once (23.11's: later releases
        add "DUE TO TASK FAILURE")."""
        if ended_by:
            return
        ended_by.append(signal.SIGTERM)
        cancelled_line()
        log.info("step terminated", extra={"job": req.job_id, "step": req.step_id, "node": req.node,
                                           "reason": reason})
        for proc in alive():
            procs.killpg(proc.pid, signal.SIGTERM)
        loop.call_later(kill_wait_s, lambda: _kill_all(alive()))

    def cancelled_line() -> None:
        """slurmstepd's word that the step is cancelled, from the step's first node only."""
        if node_index == 0:
            when = time.strftime("%Y-%m-%dT%H:%M:%S")
            queue.put_nowait(_line({"stepd": f"slurmstepd: error: *** STEP {req.job_id}.{req.step_id} ON "
                                             f"{req.node} CANCELLED AT {when} ***\n"}))

    def signal_tasks(sig: int) -> None:
        """scancel JOB.STEP [--signal]: SIGKILL ends the tasks (and what they started), as Slurm's."""
        if sig != signal.SIGKILL:
            for proc in alive():
                procs.killpg(proc.pid, sig)
        elif not ended_by:
            ended_by.append(signal.SIGKILL)
            cancelled_line()
            _kill_all(alive())

    def aborted() -> None:
        """The job ends under the step: srun hears it first (Slurm's "Job step aborted"), then the
        first node says the step is cancelled; the agent ends the tasks as it ends the job's."""
        if not ended_by:
            ended_by.append(signal.SIGTERM)
            queue.put_nowait(_line({"aborted": True}))
            cancelled_line()

    def started_late(proc: procs.StepDaemon) -> None:
        """A task whose daemon was started as the step ended: it ends as the others did."""
        procs.killpg(proc.pid, ended_by[0])
        if ended_by[0] == signal.SIGTERM:
            loop.call_later(kill_wait_s, _kill_all, [proc])

    def said(level: str, text: str) -> None:
        """The step daemon's log at srun --slurmd-debug's level, on the step's standard error."""
        if req.slurmd_debug >= LOG_LEVELS.index(level):
            prefix = "" if level == "verbose" else f"{level}:  "
            queue.put_nowait(_line({"stepd": f"slurmstepd: {prefix}{text}\n"}))

    def exited(task_id: int, proc: procs.StepDaemon, reaped: asyncio.Future) -> None:
        if not reaped.cancelled() and reaped.exception() is None:
            result = results[task_id] = reaped.result()
            pgids.discard(proc.pid)
            said("verbose", f"task {task_id} ({proc.pid}) exited. Killed by signal {result.term_signal}."
                 if result.term_signal else f"task {task_id} ({proc.pid}) exited with exit code {result.exit_code}.")
            queue.put_nowait(_line({"task": task_id, "exit": result.exit_code, "signal": result.term_signal}))
        queue.put_nowait(None)

    server = None
    if req.mpi != "none":
        from wattsched.plugins import mpi

        def send(message: dict[str, Any]) -> None:
            queue.put_nowait(_line({"pmi": message}))

        def spawn(mode: str, spec: dict[str, Any]) -> Helper:
            identity = {k: v for k, v in (extra_spec or {}).items() if k in IDENTITY}
            return Helper(mode, {**spec, **identity, "uid": uid, "gid": gid, "groups": groups}, loop)

        server = mpi.load(req.mpi, mpi.StepInfo(job_id=req.job_id, step_id=req.step_id, node=req.node,
                                                layout=layout, abort=terminate, send=send, spawn=spawn,
                                                secret=hashlib.sha256(req.credential.encode()).hexdigest()[:16]))
    step = LiveStep(terminate, signal_tasks, aborted, server)
    if live is not None:
        live[key] = step
    try:
        if server is not None:
            try:
                await server.start()
            except mpi.MpiError as exc:  # no task runs without its MPI service: each fails, saying why
                yield _line({"stepd": f"slurmstepd: error: {exc}\n"})
                for task_id in layout[req.node]:
                    results[task_id] = procs.Exit(2, 0)
                    yield _line({"task": task_id, "exit": 2, "signal": 0})
                return
        said("verbose", f"debug levels are stderr='{LOG_LEVELS[req.slurmd_debug]}', logfile='quiet', "
             "syslog='quiet'")
        said("verbose", f"starting {len(layout[req.node])} tasks")
        said("debug", f"step {req.job_id}.{req.step_id} on {req.node}: tasks {','.join(map(str, layout[req.node]))}")
        for local_id, task_id in enumerate(layout[req.node]):
            env = task_environment(req, layout, task_id, local_id, node_index)
            argv, failure = req.argv, ""
            if req.multi_prog:  # srun checked the file; a task it leaves out is stepd's error there too
                try:
                    argv = multiprog.task_argv(req.multi_prog, task_id, req.argv[1:])
                except multiprog.MultiProgError as exc:
                    failure = f"slurmstepd: error: {exc}\n"
            keep_fd = None
            if server is not None:
                mpi_env, keep_fd = server.task_setup(local_id)
                env.update(mpi_env)
            cpus = binding.cpus[local_id] if binding else []
            env.update(binding.env if binding else {})
            spec: dict[str, Any] = {
                    "uid": uid, "gid": gid, "groups": groups, "umask": procs.umask_of(env), "work_dir": req.work_dir,
                    "stdout": _task_path(req, req.output, task_id, node_index, user) if req.output else "",
                    "stderr": _task_path(req, req.error, task_id, node_index, user) if req.error else "",
                    "open_mode": req.open_mode, "argv": argv, "env": env, "cgroup_procs": cgroup_procs or [],
                    "cpu_bind": cpus, **(extra_spec or {})}
            if keep_fd is not None:
                spec["keep_fd_env"] = "PMI_FD"
            if cpus and binding and binding.verbose:
                spec["cpu_bind_report"] = f"cpu-bind=MASK - {req.node}, task {task_id:2d} {local_id:2d}"
            if spec["stdout"] and not spec["stderr"]:
                spec["stderr"] = spec["stdout"]
            if req.input and task_id not in fed:
                spec["stdin"] = _task_path(req, req.input, task_id, node_index, user)
            if req.pty:  # task 0 on a terminal; the others' output is dropped, as with Slurm's --pty
                if task_id == 0:
                    spec.update(pty={"rows": req.rows, "cols": req.cols}, stdout="", stderr="")
                else:
                    spec.update(stdout="/dev/null", stderr="/dev/null")
            status_r, status_w = os.pipe2(os.O_CLOEXEC)
            proc = None
            if not failure:
                try:
                    # the step daemon becomes the user, then opens the task's files and runs it
                    proc = procs.spawn_stepd("exec", spec, cwd="/",
                                             stdin=subprocess.PIPE if task_id in fed else subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, status_fd=status_w,
                                             keep_fd=keep_fd)
                except OSError as exc:
                    failure = f"slurmstepd: error: execve(): {argv[0]}: {exc.strerror}\n"
            if proc is None:
                if server is not None:
                    server.task_started(local_id)
                os.close(status_r)
                os.close(status_w)
                results[task_id] = procs.Exit(2, 0)
                yield _line({"task": task_id, "fd": 2, "data": failure})
                yield _line({"task": task_id, "exit": 2, "signal": 0})
                continue
            os.close(status_w)
            pgids.add(proc.pid)
            if proc.stdin is not None:
                inputs.append(proc.stdin)
            reaped = procs.reap(proc, loop, status_r)
            if server is not None:
                server.task_started(local_id)
                reaped.add_done_callback(functools.partial(_task_ended, server, local_id))
            reaped.add_done_callback(functools.partial(exited, task_id, proc))
            running.append((task_id, proc, reaped))
            said("verbose", f"task {task_id} ({proc.pid}) started {time.strftime('%Y-%m-%dT%H:%M:%S')}")
            if ended_by:
                started_late(proc)
            for fd_no, pipe in ((1, proc.stdout), (2, proc.stderr)):
                if pipe is not None:
                    reader = threading.Thread(target=_pump, args=(pipe, task_id, fd_no, queue, loop,
                                                                  req.unbuffered or req.pty), daemon=True)
                    reader.start()
                    readers.append(reader)
        open_ends = len(readers) + len(running)  # each pipe's end, and each task's (``exited``)
        while open_ends:
            item = await queue.get()
            if item is None:
                open_ends -= 1
            else:
                if step.watchers and item.startswith(b'{"task"') and b'"fd"' in item:  # output, for sattach
                    for watcher in list(step.watchers):
                        if watcher.qsize() >= WATCHER_BACKLOG:  # one that does not read is let go
                            step.watchers.remove(watcher)
                            watcher.put_nowait(None)
                        else:
                            watcher.put_nowait(item)
                yield item
    finally:
        if server is not None:
            server.close()
        for watcher in step.watchers:
            watcher.put_nowait(None)
        if live is not None and live.get(key) is step:
            del live[key]
        for _task, proc, fut in running:
            if not fut.done():
                procs.killpg(proc.pid, signal.SIGTERM)
        for pipe in inputs:
            with contextlib.suppress(OSError):
                pipe.close()
        inputs.clear()
        # The rest waits, and may run after srun went away: the server then cancels this generator,
        # and under its (anyio) cancel scope every further await here would raise again. So the
        # wait and the report are a task of their own.
        task = loop.create_task(_finish(req, running, results, pgids, kill_wait_s, on_end))
        _FINISHING.add(task)
        task.add_done_callback(_FINISHING.discard)


def _task_ended(server: MpiServer, local_id: int, _reaped: asyncio.Future) -> None:
    server.task_ended(local_id)


def _kill_all(daemons: list[procs.StepDaemon]) -> None:
    for daemon in daemons:
        procs.kill_tasks(daemon.pid)


_FINISHING: set[asyncio.Task] = set()  # strong references until they are done
STEPD_GRACE_S = 5.0  # how long a step daemon has to report its killed tasks before it is killed too


async def _finish(req: TaskLaunch, running: list, results: dict[int, procs.Exit], pgids: set[int],
                  kill_wait_s: int, on_end: Callable[[JobEvent], None]) -> None:
    """SIGKILL the tasks still there after KillWait, then report every task's end and usage."""
    leftover = [(proc, fut) for _, proc, fut in running if not fut.done()]
    if leftover:
        done, _ = await asyncio.wait([f for _, f in leftover], timeout=kill_wait_s)
        for proc, fut in leftover:
            if fut not in done:
                procs.kill_tasks(proc.pid)  # the step daemon stays to reap them and report their usage
        # a killed task is reaped at once: wait for it so that its usage is reported too
        done, _ = await asyncio.wait([f for _, f in leftover], timeout=STEPD_GRACE_S)
        for proc, fut in leftover:
            if fut not in done:  # a step daemon that does not end with its tasks
                procs.killpg(proc.pid, signal.SIGKILL)
    for task_id, proc, fut in running:
        pgids.discard(proc.pid)
        if fut.done() and task_id not in results:
            results[task_id] = fut.result()
    on_end(step_event(req, results))


def feed(pipes: list, data: bytes, eof: bool) -> None:
    """Write srun's input to the tasks' stdin pipes (in a worker thread: a full pipe blocks); a task
    that has ended or closed its stdin no longer gets any."""
    for pipe in list(pipes):
        try:
            if data:
                pipe.write(data)
                pipe.flush()
            if eof:
                pipe.close()
        except (OSError, ValueError):  # BrokenPipeError, or already closed
            with contextlib.suppress(ValueError):
                pipes.remove(pipe)


def step_event(req: TaskLaunch, results: dict[int, procs.Exit]) -> JobEvent:
    """This node's part of a step, ended: the worst exit, and each task's usage."""
    tasks = [TaskUsage(task=task, node=req.node, **result.usage) for task, result in sorted(results.items())
             if result.usage]
    return JobEvent(job_id=req.job_id, node=req.node, step_id=str(req.step_id),
                    exit_code=max((r.exit_code for r in results.values()), default=0),
                    term_signal=max((r.term_signal for r in results.values()), default=0),
                    end_time=time.time(), tasks=tasks)


def _task_path(req: TaskLaunch, pattern: str, task_id: int, node_index: int, user: str) -> str:
    return patterns.expand(pattern, job_id=req.job_id, job_name=req.job_name, user=user, node=req.node,
                           array_job_id=req.array_job_id, array_task_id=req.array_task_id,
                           step_id=str(req.step_id), task_id=task_id, node_id=node_index, work_dir=req.work_dir)


def _pump(pipe, task_id: int, fd_no: int, queue: asyncio.Queue, loop: asyncio.AbstractEventLoop,
          unbuffered: bool) -> None:
    read = pipe.read1 if unbuffered else pipe.readline
    with contextlib.suppress(ValueError, OSError):
        while chunk := read(65536) if unbuffered else read():
            line = _line({"task": task_id, "fd": fd_no, "data": chunk.decode(errors="replace")})
            loop.call_soon_threadsafe(queue.put_nowait, line)
    pipe.close()
    loop.call_soon_threadsafe(queue.put_nowait, None)


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()

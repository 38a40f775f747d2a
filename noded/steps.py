"""Step tasks on a node: started for srun, their output streamed back to it as NDJSON.

srun posts one request per node with the step credential the controller signed. The
answer is a stream of lines ``{"task": N, "fd": 1|2, "data": "..."}`` while tasks run, then
one ``{"task": N, "exit": code, "signal": sig, "cpu": s, "rss": kb}`` per task. If srun goes
away the tasks get SIGTERM, then SIGKILL after KillWait, as Slurm does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import threading
from collections.abc import AsyncIterator

from wattsched import hostlist, patterns
from wattsched.api import TaskLaunch
from wattsched.noded import procs


def task_environment(req: TaskLaunch, layout: dict[str, list[int]], task_id: int, local_id: int,
                     node_index: int) -> dict[str, str]:
    nodes = list(layout)
    env = dict(req.environment)
    env.update({
        "SLURM_STEP_ID": str(req.step_id), "SLURM_STEPID": str(req.step_id),
        "SLURM_PROCID": str(task_id), "SLURM_LOCALID": str(local_id), "SLURM_NODEID": str(node_index),
        "SLURM_STEP_NODELIST": hostlist.compress(nodes), "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NUM_TASKS": str(sum(len(t) for t in layout.values())),
        "SLURM_NTASKS": str(sum(len(t) for t in layout.values())),
        "SLURM_NPROCS": str(sum(len(t) for t in layout.values())),
        "SLURM_STEP_TASKS_PER_NODE": ",".join(str(len(t)) for t in layout.values()),
        "SLURM_GTIDS": ",".join(str(t) for t in layout[req.node]),
        "SLURMD_NODENAME": req.node, "SLURM_JOB_ID": str(req.job_id), "SLURM_JOBID": str(req.job_id),
    })
    return env


async def run_tasks(req: TaskLaunch, layout: dict[str, list[int]], uid: int, gid: int, user: str,
                    kill_wait_s: int, pgids: set[int]) -> AsyncIterator[bytes]:
    """Start this node's tasks and yield their output and exits as NDJSON lines."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    node_index = list(layout).index(req.node)
    running: list[tuple[int, subprocess.Popen, asyncio.Future]] = []
    readers: list[threading.Thread] = []
    groups = procs.user_groups(user, gid)
    try:
        for local_id, task_id in enumerate(layout[req.node]):
            env = task_environment(req, layout, task_id, local_id, node_index)
            spec = {"uid": uid, "gid": gid, "groups": groups, "umask": procs.umask_of(env), "work_dir": req.work_dir,
                    "stdout": _task_path(req, req.output, task_id, node_index, user) if req.output else "",
                    "stderr": _task_path(req, req.error, task_id, node_index, user) if req.error else "",
                    "open_mode": req.open_mode, "argv": req.argv, "env": env}
            if spec["stdout"] and not spec["stderr"]:
                spec["stderr"] = spec["stdout"]
            try:
                # the step daemon becomes the user, then opens the task's files and execs it
                proc = procs.spawn_stepd("exec", spec, cwd="/", stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except OSError as exc:
                message = f"slurmstepd: error: execve(): {req.argv[0]}: {exc.strerror}\n"
                yield _line({"task": task_id, "fd": 2, "data": message})
                yield _line({"task": task_id, "exit": 2, "signal": 0, "cpu": 0.0, "rss": 0})
                continue
            pgids.add(proc.pid)
            running.append((task_id, proc, procs.reap(proc, loop)))
            for fd_no, pipe in ((1, proc.stdout), (2, proc.stderr)):
                if pipe is not None:
                    reader = threading.Thread(target=_pump, args=(pipe, task_id, fd_no, queue, loop,
                                                                  req.unbuffered), daemon=True)
                    reader.start()
                    readers.append(reader)
        open_pipes = len(readers)
        while open_pipes:
            item = await queue.get()
            if item is None:
                open_pipes -= 1
            else:
                yield item
        for task_id, proc, future in running:
            result = await future
            pgids.discard(proc.pid)
            yield _line({"task": task_id, "exit": result.exit_code, "signal": result.term_signal,
                         "cpu": result.cpu_s, "rss": result.max_rss_kb})
    finally:
        leftover = [(proc, fut) for _, proc, fut in running if not fut.done()]
        if leftover:
            for proc, _ in leftover:
                procs.killpg(proc.pid, signal.SIGTERM)
            await asyncio.sleep(0)
            done, _ = await asyncio.wait([f for _, f in leftover], timeout=kill_wait_s)
            for proc, fut in leftover:
                if fut not in done:
                    procs.killpg(proc.pid, signal.SIGKILL)
                pgids.discard(proc.pid)


def _task_path(req: TaskLaunch, pattern: str, task_id: int, node_index: int, user: str) -> str:
    return patterns.expand(pattern, job_id=req.job_id, job_name="", user=user, node=req.node,
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

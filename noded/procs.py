"""Starting and reaping processes with their resource usage.

Each child is reaped by ``os.wait4`` in a small thread, which gives its CPU time and peak
RSS (asyncio's child watchers give neither); the result is handed to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Exit:
    exit_code: int
    term_signal: int
    cpu_s: float
    max_rss_kb: int


def decode_status(status: int) -> tuple[int, int]:
    """A wait status as Slurm reports it: (exit code, terminating signal)."""
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), 0


def spawn(argv: list[str], *, env: dict[str, str], cwd: str, uid: int | None, gid: int | None,
          stdin: int | None, stdout: int | None, stderr: int | None) -> subprocess.Popen:
    """Start a process in a session of its own, as ``uid`` when the agent runs as root."""
    as_user = {}
    if os.geteuid() == 0 and uid is not None and uid != 0:
        as_user = {"user": uid, "group": gid, "extra_groups": []}
    return subprocess.Popen(argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                            start_new_session=True, close_fds=True, **as_user)


def reap(proc: subprocess.Popen, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Exit]:
    """A future that resolves when ``proc`` ends."""
    future: asyncio.Future[Exit] = loop.create_future()

    def wait() -> None:
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = status  # keep Popen from waiting on a pid that is gone
        code, sig = decode_status(status)
        result = Exit(code, sig, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(result))

    threading.Thread(target=wait, name=f"reap-{proc.pid}", daemon=True).start()
    return future


def killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs. An exited process whose parent is gone stays a zombie where
    nobody reaps orphans (a container's init may not): a zombie has ended, so it counts as dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    # the state follows the command name, which is in parentheses and may hold spaces or ')'
    state = stat[stat.rindex(b")") + 2:][:1]
    return state not in (b"Z", b"X")


def open_output(path: str, mode: str, uid: int, gid: int) -> int:
    """Open a job's output file as Slurm does (truncate or append), owned by the job's user."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "append" else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    if os.geteuid() == 0 and uid != 0:
        with contextlib.suppress(OSError):
            os.fchown(fd, uid, gid)
    return fd


TERM_SIGNALS = (signal.SIGTERM, signal.SIGKILL)

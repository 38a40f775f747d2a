"""Starting and reaping processes with their resource usage.

Each child is reaped by ``os.wait4`` in a small thread, which gives its CPU time and peak
RSS (asyncio's child watchers give neither); the result is handed to the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from wattsched.noded import stepd
from wattsched.noded.stepd import proc_start as start_time
from wattsched.noded.stepd import usage_record


@dataclass(frozen=True, slots=True)
class Exit:
    exit_code: int
    term_signal: int
    usage: dict = field(default_factory=dict)  # stepd.usage_record of the process, when reaped


def decode_status(status: int) -> tuple[int, int]:
    """A wait status as Slurm reports it: (exit code, terminating signal)."""
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), 0


# The step daemon's whole environment: it runs as root, so nothing of the user's may reach it.
STEPD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def user_groups(user: str, gid: int) -> list[int]:
    """The job's supplementary groups, as initgroups(3) would set them."""
    try:
        return os.getgrouplist(user, gid)
    except (KeyError, OSError):
        return [gid]


def umask_of(environment: dict[str, str]) -> int:
    """The submitter's umask, which sbatch and srun pass as SLURM_UMASK (as Slurm does)."""
    try:
        return int(environment.get("SLURM_UMASK", "0022"), 8) & 0o777
    except ValueError:
        return 0o022


_STEPD_MAIN = (f"import sys; sys.path.insert(0, {os.path.dirname(stepd.__file__)!r}); import stepd; "
               "sys.exit(stepd.main(sys.argv))")


def spawn_stepd(mode: str, spec: dict, *, cwd: str, stdin: int | None, stdout: int | None,
                stderr: int | None, status_fd: int | None = None) -> subprocess.Popen:
    """Start the step daemon (:mod:`wattsched.noded.stepd`) in a session of its own, with ``spec``
    on an inherited memfd; the daemon changes to the user before touching any path of theirs.
    ``status_fd``: the write end of a pipe on which an exec-mode daemon reports its task's end."""
    if status_fd is not None:
        spec = dict(spec, status_fd=status_fd)
    fd = os.memfd_create("wattsched-launch", os.MFD_CLOEXEC)
    try:
        data = json.dumps(spec).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        # without site (-S): the daemon needs only the standard library, and site with the package's
        # import hooks cost each job and task ~15-20 ms of CPU at start; imported from its own
        # (root-owned) folder rather than run as a script, so that its byte code is cached
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _STEPD_MAIN, mode, str(fd)],
                                env=STEPD_ENV, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                                start_new_session=True, close_fds=True,
                                pass_fds=(fd,) if status_fd is None else (fd, status_fd))
    finally:
        os.close(fd)


def reap(proc: subprocess.Popen, loop: asyncio.AbstractEventLoop, status_fd: int | None = None
         ) -> asyncio.Future[Exit]:
    """A future that resolves when ``proc`` ends; with ``status_fd`` (the read end of the pipe the
    step daemon reports on) the task's own status and usage, when the daemon lived to report them."""
    future: asyncio.Future[Exit] = loop.create_future()

    def wait() -> None:
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = status  # keep Popen from waiting on a pid that is gone
        code, sig = decode_status(status)
        result = Exit(code, sig, usage_record(usage))
        if status_fd is not None:
            result = _reported(status_fd) or Exit(code, sig)  # killed daemon: the task's usage is unknown
        loop.call_soon_threadsafe(_settle, future, result)

    threading.Thread(target=wait, name=f"reap-{proc.pid}", daemon=True).start()
    return future


def _settle(future: asyncio.Future[Exit], result: Exit) -> None:
    if not future.done():  # a cancelled wait has no one to tell
        future.set_result(result)


def _reported(fd: int) -> Exit | None:
    try:
        with os.fdopen(fd, "rb") as handle:
            record = json.loads(handle.read(65536) or b"null")
        return Exit(int(record["exit_code"]), int(record["signal"]), dict(record["usage"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def kill_tasks(pgid: int) -> None:
    """SIGKILL a step's tasks: every process of its group but the leader, the step daemon, which
    then reaps them and reports their usage (killed together with them, under load it may die
    before it has written a word, and the step's CPU time is lost). Found in /proc: a process's
    group is field 5 of its stat."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pgid:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to signal


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


def same_process(pid: int, started: int) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (and has not ended)."""
    return pid > 1 and started > 0 and start_time(pid) == started and alive(pid)


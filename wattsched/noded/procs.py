"""Starting step daemons through the fork server, learning their ends, and the processes of steps.

A daemon is forked by :mod:`wattsched.noded.forkserver` rather than started as an interpreter of its
own; the server tells its end on a socket, read by one thread that hands each end to the event loop.
The daemons themselves report their tasks' status and usage (``os.wait4`` gives CPU time and peak RSS).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from wattsched.noded import stepd
from wattsched.noded.stepd import proc_start as start_time

log = logging.getLogger("wattsched.noded")


@dataclass(frozen=True, slots=True)
class Exit:
    exit_code: int
    term_signal: int
    usage: dict = field(default_factory=dict)  # stepd.usage_record of the task, when its daemon reported it


# The step daemon's whole environment: it runs as root, so nothing of the user's may reach it.
STEPD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def gid_of(uid: int) -> int:
    """The user's primary group (the uid itself for a user the host does not know)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


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


_SERVER_MAIN = (f"import sys; sys.path.insert(0, {os.path.dirname(stepd.__file__)!r}); import forkserver; "
                "sys.exit(forkserver.main(sys.argv))")
MESSAGE_MAX = 4096  # forkserver.MESSAGE_MAX (the server runs apart from the package: not importable here)
ORPHAN_POLL_S = 0.2  # how often the daemons of a fork server that died are looked for in /proc


@dataclass(eq=False)
class StepDaemon:
    """A step daemon the fork server started: its pid (also its session and process group), its start
    time, and the agent's ends of the streams asked for as ``subprocess.PIPE``."""
    pid: int
    start: int
    server: int  # the pid of the fork server that started it
    stdin: BinaryIO | None = None
    stdout: BinaryIO | None = None
    stderr: BinaryIO | None = None
    on_end: Callable[[int, int], None] | None = None  # (exit code, signal), called in the server's reader


class ForkServer:
    """The agent's side of :mod:`wattsched.noded.forkserver`: started on first use (again if it died),
    asked for a daemon per launch, told when the agent has taken a daemon's end in."""

    def __init__(self) -> None:
        self._asking = threading.Lock()  # one request and its answer at a time
        self._table = threading.Lock()  # the daemons awaiting their end, shared with the reader thread
        self._daemons: dict[int, StepDaemon] = {}
        self._early: dict[int, tuple[int, int]] = {}  # ends that came before their daemon was entered
        self._proc: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._events: socket.socket | None = None

    def _start(self) -> socket.socket:
        self._stop()  # a server found dead leaves its sockets behind
        control, control_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        events, events_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # without site (-S): only the standard library, and site with the package's import hooks
            # costs ~15-20 ms; imported from its own (root-owned) folder, so its byte code is cached
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _SERVER_MAIN, str(control_theirs.fileno()),
                 str(events_theirs.fileno())], env=STEPD_ENV, cwd="/", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True,
                pass_fds=(control_theirs.fileno(), events_theirs.fileno()))
        finally:
            control_theirs.close()
            events_theirs.close()
        self._control, self._events = control, events
        threading.Thread(target=self._read_events, args=(self._proc, events), name="forkserver-events",
                         daemon=True).start()
        return control

    def spawn(self, mode: str, spec: dict, cwd: str, streams: list[int], status_fd: int | None,
              keep_fd: int | None = None) -> tuple[int, int, int]:
        """A daemon started with ``streams`` (stdin, stdout, stderr) and the spec on a memfd: its pid,
        its start time and its server's pid. ``keep_fd``: a descriptor its task inherits."""
        fd = os.memfd_create("wattsched-launch", os.MFD_CLOEXEC)
        try:
            data = json.dumps(spec).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            extra = [d for d in (status_fd, keep_fd) if d is not None]
            fds = [fd, *streams, *extra]
            request = json.dumps({"mode": mode, "cwd": cwd, "status": status_fd is not None,
                                  "keep": keep_fd is not None}).encode()
            with self._asking:
                for attempt in (1, 2):  # a server found dead is started again, once
                    alive = self._proc is not None and self._proc.poll() is None
                    control = self._control if alive and self._control else self._start()
                    server = self._proc.pid  # type: ignore[union-attr]
                    try:
                        control.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                        answer = control.recv(MESSAGE_MAX)
                    except OSError:
                        answer = b""
                    if answer or attempt == 2:
                        break
                    self._stop()
        finally:
            os.close(fd)
        if not answer:
            raise OSError(errno.EPIPE, "the step daemons' fork server does not answer")
        reply = json.loads(answer)
        if "error" in reply:
            raise OSError(errno.EINVAL, f"fork server: {reply['error']}")
        return int(reply["pid"]), int(reply["start"]), server

    def watch(self, daemon: StepDaemon) -> None:
        """Call ``daemon.on_end`` when it ends (at once if it already has)."""
        with self._table:
            early = self._early.pop(daemon.pid, None)
            if early is None:
                self._daemons[daemon.pid] = daemon
        if early is not None:
            self._ended(daemon, *early)

    def release(self, pid: int) -> None:
        """The agent has taken ``pid``'s end in: the server may reap it (its number is then free)."""
        with contextlib.suppress(OSError, AttributeError):
            self._events.send(json.dumps({"release": pid}).encode())  # type: ignore[union-attr]

    def _stop(self) -> None:
        for sock in (self._control, self._events):
            if sock is not None:
                sock.close()
        if self._proc is not None:
            self._proc.kill()
        self._proc = self._control = self._events = None

    @staticmethod
    def _ended(daemon: StepDaemon, code: int, sig: int) -> None:
        if daemon.on_end is not None:
            daemon.on_end(code, sig)

    def _read_events(self, proc: subprocess.Popen, events: socket.socket) -> None:
        while True:
            try:
                data = events.recv(MESSAGE_MAX)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            pid, end = int(message["pid"]), (int(message["code"]), int(message["signal"]))
            with self._table:
                daemon = self._daemons.pop(pid, None)
                if daemon is None:
                    self._early[pid] = end
            if daemon is not None:
                self._ended(daemon, *end)
        proc.wait()
        with self._table:  # only this server's daemons: a new one may have started meanwhile
            orphans = [d for d in self._daemons.values() if d.server == proc.pid]
            for daemon in orphans:
                del self._daemons[daemon.pid]
        if orphans:
            log.error("the step daemons' fork server ended; its daemons are watched in /proc",
                      extra={"daemons": len(orphans), "exit": proc.returncode})
            self._watch_orphans(orphans)

    def _watch_orphans(self, orphans: list[StepDaemon]) -> None:
        """Daemons whose server died: they end unseen by any wait, so /proc is watched for them
        (their own reports, the status file or pipe, still give how they ended)."""
        while orphans:
            for daemon in [d for d in orphans if not same_process(d.pid, d.start)]:
                orphans.remove(daemon)
                self._ended(daemon, 1, 0)
            time.sleep(ORPHAN_POLL_S)


_SERVER = ForkServer()


def spawn_stepd(mode: str, spec: dict, *, cwd: str, stdin: int, stdout: int, stderr: int,
                status_fd: int | None = None, keep_fd: int | None = None) -> StepDaemon:
    """Start the step daemon (:mod:`wattsched.noded.stepd`) in a session of its own, with ``spec``
    on a memfd; the daemon changes to the user before touching any path of theirs. Each stream is a
    descriptor, ``subprocess.DEVNULL`` or ``subprocess.PIPE`` (whose other end the result holds).
    ``status_fd``: the write end of a pipe on which an exec-mode daemon reports its task's end;
    ``keep_fd``: a descriptor the task inherits, its number in ``spec["keep_fd_env"]`` (PMI_FD)."""
    theirs, ours, opened = [], [], []
    try:
        for index, stream in enumerate((stdin, stdout, stderr)):
            if stream == subprocess.PIPE:
                read, write = os.pipe2(os.O_CLOEXEC)
                theirs.append(read if index == 0 else write)
                ours.append(write if index == 0 else read)
                opened.append(theirs[-1])
            elif stream == subprocess.DEVNULL:
                theirs.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
                opened.append(theirs[-1])
                ours.append(-1)
            else:
                theirs.append(int(stream))
                ours.append(-1)
        pid, start, server = _SERVER.spawn(mode, spec, cwd, theirs, status_fd, keep_fd)
    except BaseException:
        for fd in opened + [o for o in ours if o >= 0]:
            os.close(fd)
        raise
    for fd in opened:
        os.close(fd)
    stdin_, stdout_, stderr_ = (None if fd < 0 else os.fdopen(fd, "wb" if index == 0 else "rb")
                                for index, fd in enumerate(ours))
    return StepDaemon(pid, start, server, stdin_, stdout_, stderr_)


def reap(proc: StepDaemon, loop: asyncio.AbstractEventLoop, status_fd: int | None = None
         ) -> asyncio.Future[Exit]:
    """A future that resolves when the daemon ends; with ``status_fd`` (the read end of the pipe the
    daemon reports on) the task's own status and usage, when the daemon lived to report them. Once
    the future's callbacks have run, the server may reap the daemon and its pid be reused."""
    future: asyncio.Future[Exit] = loop.create_future()

    def ended(code: int, sig: int) -> None:
        result = Exit(code, sig)
        if status_fd is not None:
            result = _reported(status_fd) or result  # killed daemon: the task's usage is unknown
        loop.call_soon_threadsafe(_settle, future, result, proc.pid)

    proc.on_end = ended
    _SERVER.watch(proc)
    return future


def _settle(future: asyncio.Future[Exit], result: Exit, pid: int) -> None:
    if not future.done():  # a cancelled wait has no one to tell
        future.set_result(result)
    # after the callbacks set_result has just scheduled: until they have run, the pid stays ours
    asyncio.get_running_loop().call_soon(_SERVER.release, pid)


def _reported(fd: int) -> Exit | None:
    """The task's end as its daemon wrote it; read without waiting: the daemon has ended, and only
    it held the pipe's other end."""
    try:
        os.set_blocking(fd, False)
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


"""The step daemons' fork server: one root process per agent, started once, that forks a step daemon
(:mod:`wattsched.noded.stepd`) for every batch job and task the agent launches.

A step daemon used to be an interpreter started per job (~40 ms of CPU here, most of a trivial job's
launch); a fork of this already-started process costs ~2 ms. Nothing else changes: the forked daemon
runs the same code with the same rules (a root supervisor; the child becomes the user before it
touches anything the user named), in a session of its own, with the clean environment and the
working directory the agent chose. Like the daemon it runs only the standard library, imported here
once (``python -I -S``, from its own root-owned folder).

It speaks only over two socket pairs the agent created and handed to it (no path anyone could
reach), in datagrams of JSON:

* ``control``: the agent asks ``{"mode", "cwd", "status", "keep"}`` with the descriptors [spec memfd,
  stdin, stdout, stderr, (status pipe), (a descriptor the task keeps: its PMI connection)]; the
  server forks and answers ``{"pid", "start"}`` once the daemon leads a session of its own (or
  ``{"error"}``).
* ``events``: the server tells ``{"pid", "code", "signal"}`` when a daemon has ended, and keeps it a
  zombie until the agent answers ``{"release": pid}``: until the agent has taken the end in, the pid
  (and the process group named by it, which the agent signals) cannot be reused, as with a child of
  its own.

It ends when the agent does (end of file on ``control``); the daemons it started live on in their
own sessions, as they always have, for the agent's next start to adopt.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import sys

import bcast  # noqa: F401 - sbcast's writer (stepd's bcast mode), imported while still root
import pmixhost  # noqa: F401 - a step's PMIx server (stepd's pmix mode): ctypes, imported while root
import stepd

TYPE_CHECKING = False  # not typing's: kept to the modules the daemons need
if TYPE_CHECKING:
    from typing import Any

MESSAGE_MAX = 4096  # a request or release: a few names and numbers
FDS_MAX = 6


def _fork(request: dict[str, Any], fds: list[int], own: list[int]) -> int:
    """A step daemon for ``request``: in the child, a new session, the streams in place, the server's
    own descriptors closed; then the daemon's code, which never returns here."""
    mode, cwd = str(request["mode"]), str(request["cwd"])
    status, keep = bool(request.get("status")), bool(request.get("keep"))
    if mode not in ("batch", "exec", "bcast", "pmix") or len(fds) != 4 + status + keep:
        raise ValueError(f"bad request: {mode} with {len(fds)} descriptors")
    # the answer waits for the child's own session: from then on the pid names a process group,
    # so a signal the agent sends the group at once (srun -K, scancel) cannot be lost
    in_session, said = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError:
        os.close(in_session)
        os.close(said)
        raise
    if pid:
        os.close(said)
        try:
            os.read(in_session, 1)  # a byte, or the end of file of a child that died first
        finally:
            os.close(in_session)
        return pid
    code = 2
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(in_session)
        for fd in own:
            os.close(fd)
        os.setsid()
        os.write(said, b"s")
        os.close(said)
        os.chdir(cwd)
        for target, fd in enumerate(fds[1:4]):
            os.dup2(fd, target)  # dup2's copy is inheritable: the task's streams
        for fd in fds[1:4]:
            if fd > 2:
                os.close(fd)
        status_fd = fds[4] if status else None
        code = stepd.run(mode, fds[0], status_fd, fds[-1] if keep else None)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # the child must never return into the server's loop
        os.write(2, f"slurmstepd: error: {exc}\n".encode())
    os._exit(code)


def _ended(children: set[int]) -> list[tuple[int, int, int]]:
    """Children that have ended, as (pid, exit code, signal), left unreaped."""
    ended = []
    for pid in list(children):
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            children.discard(pid)
            continue
        if info is None:
            continue
        children.discard(pid)
        if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            ended.append((pid, 0, info.si_status))
        else:
            ended.append((pid, info.si_status, 0))
    return ended


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def serve(control: socket.socket, events: socket.socket) -> int:
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)  # only to wake the loop through wake_w
    own = [control.fileno(), events.fileno(), wake_r, wake_w]
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([control.fileno(), events.fileno(), wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            for pid, code, sig in _ended(children):
                _send(events, {"pid": pid, "code": code, "signal": sig})
        if events.fileno() in readable:
            data = events.recv(MESSAGE_MAX)
            if not data:
                return 0
            pid = int(json.loads(data)["release"])
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if control.fileno() in readable:
            fds = array.array("i")
            data, ancillary, _flags, _addr = control.recvmsg(MESSAGE_MAX, socket.CMSG_SPACE(FDS_MAX * fds.itemsize))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
            if not data:
                return 0  # the agent has gone
            try:
                pid = _fork(json.loads(data), list(fds), own)
                children.add(pid)
                _send(control, {"pid": pid, "start": stepd.proc_start(pid)})
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _send(control, {"error": str(exc)})
            finally:
                for fd in fds:
                    os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: forkserver CONTROL_FD EVENTS_FD (started by the node agent)\n")
        return 2
    stepd.preload()
    control = socket.socket(fileno=int(argv[1]))
    events = socket.socket(fileno=int(argv[2]))
    return serve(control, events)

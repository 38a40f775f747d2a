"""How a daemon is started when it is started as Slurm's are (slurmctld, slurmd): in the background
with a pid file, at a nice value, logging louder for each -v, and telling systemd when it is ready.

:class:`Start` carries what the Slurm-named programs (wattsched.cli.slurmctld, wattsched.cli.slurmd)
read from their command line into the daemons' ``run``; ``wattsched controller`` and ``wattsched
noded`` start with its defaults (in the foreground, logging as the configuration says).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Start:
    log_file: str = ""  # -L; empty: the configuration's SlurmctldLogFile/SlurmdLogFile, else stderr or syslog
    verbose: int = 0  # each -v: one level louder than the configuration's
    syslog: bool = False  # in the background: where logs go without a log file
    clear_state: bool = False  # slurmctld -c
    notify: bool = False  # --systemd: tell systemd READY=1 once serving

    def ready(self) -> None:
        """The daemon listens: a unit of Type=notify may go on (sd_notify's datagram)."""
        if self.notify:
            notify_systemd("READY=1")


def notify_systemd(message: str) -> None:
    """sd_notify(3): one datagram to $NOTIFY_SOCKET (a path, or @ for the abstract namespace)."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.sendto(message.encode(), address)


def background() -> None:
    """Slurm's daemonize: the caller's process exits 0 at once; the daemon goes on in a session of
    its own, without a terminal (a second fork: it can never acquire one), in /, its standard
    streams on /dev/null."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


_pid_file_fd: list[int] = []  # the pid file, held open (and locked) for the daemon's life


def write_pid_file(path: str) -> None:
    """The daemon's pid in ``path`` (the configuration's, an administrator's path), written whole
    under another name and renamed over it; never through a symbolic link left in its place. As
    Slurm's daemons do, the file stays write-locked while the daemon lives: the next one started
    tells a live daemon from a stale file by that lock (:func:`stop_previous`)."""
    folder = os.path.dirname(path) or "."
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fchmod(fd, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _pid_file_fd.append(fd)


def stop_previous(path: str) -> int | None:
    """Slurm's daemons' start: the same daemon still running, by its locked pid file, is sent
    SIGTERM, and this one waits until it has gone (its lock released), so that a daemon restarted
    at once never finds its port, pid file or state held. Returns the old daemon's pid, or None
    where there was none (no file, or one no live daemon holds)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it: a file left by a daemon that is gone
        except OSError:
            pass
        text = os.read(fd, 32).decode(errors="replace").strip()
        if not text.isdigit() or int(text) in (0, os.getpid()):
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(text), signal.SIGTERM)
        fcntl.lockf(fd, fcntl.LOCK_SH)  # blocks until the old daemon has exited
        return int(text)
    finally:
        os.close(fd)


def without_unused_imports() -> None:
    """Two modules a daemon never uses, which its libraries import whenever they are installed:
    httpx's command-line client (rich and pygments with it: 5 MiB of a daemon's resident memory
    and 115 ms of its start) and pydantic.v1, which FastAPI loads only to ask whether each route's
    parameters are version 1 models (1.5 MiB; ours are all version 2). Both libraries take an
    ImportError as "not there", which a None in sys.modules makes it (the import system's
    documented way to block a module); measured on the controller, 2026-11-27."""
    for name in ("httpx._main", "pydantic.v1"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]

"""How a daemon is started when it is started as Slurm's are (slurmctld, slurmd): in the background
with a pid file, at a nice value, logging louder for each -v, and telling systemd when it is ready.

:class:`Start` carries what the Slurm-named programs (wattsched.cli.slurmctld, wattsched.cli.slurmd)
read from their command line into the daemons' ``run``; ``wattsched controller`` and ``wattsched
noded`` start with its defaults (in the foreground, logging as the configuration says).
"""

from __future__ import annotations

import os
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


def write_pid_file(path: str) -> None:
    """The daemon's pid in ``path`` (the configuration's, an administrator's path), written whole
    under another name and renamed over it; never through a symbolic link left in its place."""
    folder = os.path.dirname(path) or "."
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def without_unused_imports() -> None:
    """Two modules a daemon never uses, which its libraries import whenever they are installed:
    httpx's command-line client (rich and pygments with it: 5 MiB of a daemon's resident memory
    and 115 ms of its start) and pydantic.v1, which FastAPI loads only to ask whether each route's
    parameters are version 1 models (1.5 MiB; ours are all version 2). Both libraries take an
    ImportError as "not there", which a None in sys.modules makes it (the import system's
    documented way to block a module); measured on the controller, 2026-11-27."""
    for name in ("httpx._main", "pydantic.v1"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]

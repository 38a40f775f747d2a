"""File operations by directory descriptor that never follow a link: how a root daemon works in a
folder a user could once write (a profile folder from an older version), or whose files it hands over.

Every name is resolved relative to an open directory descriptor with ``O_NOFOLLOW``; files are
changed through the descriptor that was opened (``fchown``, ``fchmod``), never again by path;
``renameat``/``unlinkat`` act on the entry itself, not on what a link names. A file root reopens
must be root's own, a regular file with one link, so a planted link (symbolic or hard) to a file
elsewhere is never opened, written or handed over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a planted FIFO never blocks the open


class Untrusted(OSError):
    """A file a root daemon must not believe: not its own, not a regular file, or linked elsewhere."""


def plain_name(name: str) -> str:
    """A name that stays inside its folder (no separator, not . or ..), else ValueError."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    return name


@contextlib.contextmanager
def private_subdir(parent: str, name: str, mode: int = 0o711) -> Iterator[int]:
    """The folder ``parent/name`` as a descriptor, made if absent and, when this process is root,
    made root's with ``mode`` (no one else may write it) through the descriptor itself. ``parent``
    is the site's own path (ProfileHDF5Dir), trusted; ``name`` is a user's name."""
    if not os.path.isdir(parent):
        os.makedirs(parent, exist_ok=True)
        os.chmod(parent, mode)  # users traverse it to their own folder, and list nobody's
    parent_fd = os.open(parent, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(plain_name(name), mode, dir_fd=parent_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    try:
        info = os.fstat(fd)
        owner = info.st_uid
        if os.geteuid() == 0 and owner != 0:
            os.fchown(fd, 0, 0)  # a folder an older version gave its user: root's from now on
            owner = 0
        if stat.S_IMODE(info.st_mode) != mode and owner == os.geteuid():
            os.fchmod(fd, mode)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened_dir(path: str) -> Iterator[int]:
    """The folder ``path`` as a descriptor; its last component is never a link."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _own(fd: int) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        raise Untrusted(f"not this process's own plain file (uid {info.st_uid}, links {info.st_nlink})")
    return info


def open_own(dir_fd: int, name: str, flags: int = os.O_RDONLY) -> int:
    """Open an existing file of this process's user (regular, one link) in the folder; Untrusted
    or FileNotFoundError otherwise."""
    fd = os.open(plain_name(name), flags | _FILE_FLAGS, dir_fd=dir_fd)
    try:
        _own(fd)
    except OSError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd


def create_fresh(dir_fd: int, name: str, mode: int = 0o600) -> int:
    """A new, empty file of ours under ``name``: whatever entry held the name is removed first
    (the entry, not what a link points to)."""
    plain_name(name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, mode, dir_fd=dir_fd)
    os.set_blocking(fd, True)
    return fd


def open_or_create(dir_fd: int, name: str, mode: int = 0o600) -> tuple[int, bool]:
    """(descriptor, created): our own file under ``name`` reopened, else a fresh one in its place."""
    try:
        return open_own(dir_fd, name, os.O_RDWR), False
    except OSError as exc:
        # absent, not ours, a symbolic link (ELOOP), a socket (ENXIO): a fresh file takes the name
        if not isinstance(exc, (FileNotFoundError, Untrusted)) and exc.errno not in (errno.ELOOP, errno.ENXIO):
            raise
        return create_fresh(dir_fd, name, mode), True


def proc_path(fd: int) -> str:
    """A path that names exactly the open file (for libraries that take a path, as HDF5 does):
    the kernel resolves it to the descriptor's file, not by walking names again."""
    return f"/proc/self/fd/{fd}"

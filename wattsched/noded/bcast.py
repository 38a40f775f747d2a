"""sbcast's file on a node: written by a step daemon that has already become the job's user.

The agent starts a step daemon in ``bcast`` mode (wattsched.noded.stepd), which becomes the user
and calls :func:`receive`: the file's bytes come on its standard input, as sbcast sent them
(zlib-compressed with -C), and go to a new file beside the destination, which takes the source's
permission bits (and, with -p, its access and modification times). The finished file then takes
the destination's name in one step: ``link`` (an existing file is kept, as Slurm's O_EXCL) or, with
-f, ``rename`` over it. Never a half-written file under the destination's name.

Virtual nodes share their host's file system (``shared``): the same path is then broadcast to
once per agent, and an existing file with the very bytes and modes being sent counts as delivered
rather than as "File exists". Real nodes keep Slurm's rule.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zlib
from typing import Any

CHUNK = 1 << 20


class BcastError(Exception):
    """Why the file could not be written (strerror's words, as Slurm reports it)."""


def receive(spec: dict[str, Any], source: int = 0) -> None:
    """Write what ``source`` delivers to ``spec["dest"]``: ``force``, ``mode``, ``times`` (atime,
    mtime, or None), ``compress`` ("zlib" or "none"), ``size`` (the bytes sbcast said it sends),
    ``shared`` (virtual nodes: the file system is the host's)."""
    dest = str(spec["dest"])
    folder = os.path.dirname(dest) or "/"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.sbcast.", dir=folder)
    except OSError as exc:
        raise BcastError(exc.strerror or str(exc)) from exc
    try:
        with os.fdopen(fd, "wb") as out:
            _copy(source, out, spec)
            out.flush()  # before the times: a later write would move them
            os.fchmod(out.fileno(), int(spec["mode"]) & 0o7777)
            if spec.get("times"):
                atime, mtime = spec["times"]
                os.utime(out.fileno(), (int(atime), int(mtime)))
        _place(tmp, dest, bool(spec.get("force")), bool(spec.get("shared")))
    except OSError as exc:
        raise BcastError(exc.strerror or str(exc)) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _copy(source: int, out: Any, spec: dict[str, Any]) -> None:
    inflate = zlib.decompressobj() if spec.get("compress") == "zlib" else None
    written = 0
    size = int(spec["size"])
    while chunk := os.read(source, CHUNK):
        # (bounded by what sbcast declared: a small deflated stream may inflate without end)
        data = inflate.decompress(chunk, size - written + 1) if inflate else chunk
        written += len(data)
        if written > size or (inflate and inflate.unconsumed_tail):
            raise BcastError(f"received more than the {size} bytes announced")
        out.write(data)
    if inflate:
        rest = inflate.flush()
        written += len(rest)
        out.write(rest)
    if written != size:
        raise BcastError(f"received {written} of {size} bytes")


def _place(tmp: str, dest: str, force: bool, shared: bool) -> None:
    if force:
        os.replace(tmp, dest)
        return
    try:
        os.link(tmp, dest)
    except FileExistsError:
        if not (shared and _same(tmp, dest)):
            raise
    # hard links to the finished file only: the temporary name goes in receive's finally


def _same(path: str, other: str) -> bool:
    """Whether ``other`` is a regular file (links not followed) with ``path``'s bytes and modes."""
    try:
        fd = os.open(other, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as theirs, open(path, "rb") as ours:
        mine, info = os.fstat(ours.fileno()), os.fstat(theirs.fileno())
        if (info.st_size, info.st_mode) != (mine.st_size, mine.st_mode):
            return False
        while block := ours.read(CHUNK):
            if theirs.read(len(block)) != block:
                return False
        return True


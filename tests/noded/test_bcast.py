"""sbcast's writer on a node (wattsched.noded.bcast), fed through a pipe as the step daemon is: the
file appears whole under its name or not at all, an existing one is kept unless forced, and on
virtual nodes an identical one counts as delivered."""

from __future__ import annotations

import os
import stat
import threading
import zlib
from pathlib import Path

import pytest

from wattsched.noded.bcast import BcastError, receive


def feed(data: bytes, spec: dict) -> None:
    read, write = os.pipe()

    def send() -> None:
        try:
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        except BrokenPipeError:  # the writer stopped reading: what it said is the test's
            pass

    writer = threading.Thread(target=send)
    writer.start()
    try:
        receive(spec, read)
    finally:
        os.close(read)  # (a sender blocked on a full pipe is released)
        writer.join()


def spec(dest: Path, size: int, **extra) -> dict:
    return {"dest": str(dest), "size": size, "mode": 0o750, "times": None, "force": False, "compress": "none",
            **extra}


def test_the_file_takes_its_name_only_once_whole(tmp_path: Path) -> None:
    dest = tmp_path / "prog"
    feed(b"abc", spec(dest, 3, times=(1_600_000_000, 1_600_000_100)))
    assert dest.read_bytes() == b"abc" and stat.S_IMODE(dest.stat().st_mode) == 0o750
    assert int(dest.stat().st_mtime) == 1_600_000_100
    with pytest.raises(BcastError, match="received 2 of 5 bytes"):  # sbcast went away mid-file
        feed(b"ab", spec(tmp_path / "short", 5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog"]


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path) -> None:
    dest = tmp_path / "f"
    dest.write_bytes(b"old")
    with pytest.raises(BcastError, match="File exists"):
        feed(b"new", spec(dest, 3))
    assert dest.read_bytes() == b"old"
    feed(zlib.compress(b"new" * 1000), spec(dest, 3000, force=True, compress="zlib"))
    assert dest.read_bytes() == b"new" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_virtual_nodes_sharing_the_host_count_an_identical_file_as_delivered(tmp_path: Path) -> None:
    dest = tmp_path / "f"
    feed(b"same", spec(dest, 4, shared=True))
    feed(b"same", spec(dest, 4, shared=True))  # a sibling virtual node's copy: already there
    with pytest.raises(BcastError, match="File exists"):
        feed(b"same", spec(dest, 4))  # a real node keeps Slurm's rule
    with pytest.raises(BcastError, match="File exists"):
        feed(b"diff", spec(dest, 4, shared=True))
    link = tmp_path / "link"
    link.symlink_to(dest)
    with pytest.raises(BcastError, match="File exists"):  # a link is never taken for the file
        feed(b"same", spec(link, 4, shared=True))


def test_no_more_is_written_than_was_announced(tmp_path: Path) -> None:
    bomb = zlib.compress(b"\0" * (64 << 20))  # 64 KiB that inflate to 64 MiB
    with pytest.raises(BcastError, match="more than the 1000 bytes announced"):
        feed(bomb, spec(tmp_path / "f", 1000, compress="zlib"))
    with pytest.raises(BcastError, match="more than the 2 bytes announced"):
        feed(b"abc", spec(tmp_path / "g", 2))
    assert list(tmp_path.iterdir()) == []

"""Per-job power profiles in HDF5 (acct_gather_profile/hdf5), and the reading side of them.

During a job each node agent appends samples to its own file
``<ProfileHDF5Dir>/<user>/<jobid>_<node>.h5``: an ``Energy`` series (ElapsedTime, EpochTime,
Power W, Energy J since the job started, CPUFrequency kHz) and a ``Task`` series
(ElapsedTime, EpochTime, CPUFrequency, CPUTime s, CPUUtilization %, RSS KB of the job's
processes on the node). With the energy series comes a ``Signature`` series (ours: ElapsedTime,
EpochTime, CPUFrequency, CPI, MemBW GB/s, MemBound, Power W of the job's share of the node, and
PolicyFrequency, the kHz its energy policy chose: wattsched.energypolicy). Every append is
flushed, so a job killed mid-run leaves a readable file. When the job ends the node files are
merged into ``job_<jobid>.h5`` beside them, one group ``/Nodes/<node>`` per node holding its
series, as Georgiou et al. 2014 describes and as sh5util does.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Iterable, Iterator
from typing import TextIO

import h5py
import numpy as np

from wattsched.service import dirfd

SERIES = {
    "Energy": np.dtype([("ElapsedTime", "f8"), ("EpochTime", "f8"), ("Power", "f8"), ("Energy", "f8"),
                        ("CPUFrequency", "u4")]),
    "Task": np.dtype([("ElapsedTime", "f8"), ("EpochTime", "f8"), ("CPUFrequency", "u4"), ("CPUTime", "f8"),
                      ("CPUUtilization", "f8"), ("RSS", "u8")]),
    "Signature": np.dtype([("ElapsedTime", "f8"), ("EpochTime", "f8"), ("CPUFrequency", "u4"), ("CPI", "f8"),
                           ("MemBW", "f8"), ("MemBound", "f8"), ("Power", "f8"), ("PolicyFrequency", "u4")]),
}


def user_dir(profile_dir: str, user: str) -> str:
    return os.path.join(profile_dir, user)


def node_name(job_id: int, node: str) -> str:
    return f"{job_id}_{node}.h5"


def merged_name(job_id: int) -> str:
    return f"job_{job_id}.h5"


def merged_path(profile_dir: str, user: str, job_id: int) -> str:
    return os.path.join(user_dir(profile_dir, user), merged_name(job_id))


# ProfileHDF5Dir and its per-user folders are root's (0711): users traverse them but cannot list or
# write them, so no user can plant a link where root writes; each user reaches only the merged
# profiles handed to them. Root opens every file there by descriptor, never following a link
# (wattsched.service.dirfd), and reads back only files it wrote itself.
FOLDER_MODE = 0o711


class NodeProfile:
    """One node's profile of one job, appended to as samples arrive."""

    def __init__(self, profile_dir: str, job_id: int, node: str, user: str, start: float, series: Iterable[str],
                 attrs: dict[str, str | int | float] | None = None):
        self.start = start
        with dirfd.private_subdir(profile_dir, user, FOLDER_MODE) as folder:
            fd, fresh = dirfd.open_or_create(folder, node_name(job_id, node))
            try:
                self.file = h5py.File(dirfd.proc_path(fd), "w" if fresh else "a", libver="latest")
            finally:
                os.close(fd)
        if fresh:
            self.file.attrs.update({"JobId": job_id, "Node": node, "User": user, "StartTime": start,
                                    **(attrs or {})})
        for name in series:
            if name not in self.file:
                self.file.create_dataset(name, shape=(0,), maxshape=(None,), dtype=SERIES[name], chunks=(256,))
        self.file.flush()

    def append(self, series: str, when: float, **values: float) -> None:
        data = self.file.get(series)
        if data is None:
            return
        row = np.zeros(1, dtype=SERIES[series])
        row["ElapsedTime"], row["EpochTime"] = when - self.start, when
        for key, value in values.items():
            row[key] = value
        data.resize((data.shape[0] + 1,))
        data[-1] = row[0]
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def merge(profile_dir: str, user: str, job_id: int, keep: bool = False, owner_uid: int | None = None) -> str | None:
    """Merge the job's node files into ``job_<id>.h5`` (added to it if it is still this process's
    own); returns its path, or None when there is nothing to merge. Node files are removed unless
    ``keep``; ``owner_uid`` (root only) is given the merged file. A user who cannot list the folder
    (root's) gets the merged file if it is there."""
    folder_path = user_dir(profile_dir, dirfd.plain_name(user))
    target = merged_path(profile_dir, user, job_id)
    try:
        with dirfd.opened_dir(folder_path) as folder:
            return _merge_in(folder, user, job_id, keep, owner_uid, target)
    except PermissionError:
        return target if os.path.exists(target) else None
    except FileNotFoundError:
        return None


def _merge_in(folder: int, user: str, job_id: int, keep: bool, owner_uid: int | None, target: str) -> str | None:
    parts: dict[str, int] = {}
    try:
        for name in sorted(os.listdir(folder)):
            if name.startswith(f"{job_id}_") and name.endswith(".h5"):
                with contextlib.suppress(OSError):  # a link, a stranger's file: never read
                    parts[name] = dirfd.open_own(folder, name)
        if not parts:
            return target if os.path.exists(target) else None
        out_fd = dirfd.create_fresh(folder, merged_name(job_id) + ".tmp")
        try:
            with h5py.File(dirfd.proc_path(out_fd), "w") as out:
                out.attrs.update({"JobId": job_id, "User": user})
                _copy_previous(folder, job_id, out)
                for fd in parts.values():
                    with h5py.File(dirfd.proc_path(fd), "r") as src:
                        node = str(src.attrs["Node"])
                        group = out.require_group("Nodes").require_group(node)
                        group.attrs.update(dict(src.attrs))
                        for name in src:
                            if name in group:
                                del group[name]
                            src.copy(src[name], group, name=name)
            if owner_uid and os.geteuid() == 0:
                os.fchmod(out_fd, 0o600)
                os.fchown(out_fd, owner_uid, -1)
        finally:
            os.close(out_fd)
        os.rename(merged_name(job_id) + ".tmp", merged_name(job_id), src_dir_fd=folder, dst_dir_fd=folder)
        if not keep:
            for name in parts:
                os.unlink(name, dir_fd=folder)
        return target
    finally:
        for fd in parts.values():
            os.close(fd)


def _copy_previous(folder: int, job_id: int, out: h5py.File) -> None:
    """The nodes of an earlier merge, when that file is still ours (one handed to its user is not
    read back by root)."""
    try:
        fd = dirfd.open_own(folder, merged_name(job_id))
    except OSError:
        return
    try:
        with h5py.File(dirfd.proc_path(fd), "r") as old:
            for node in old.get("Nodes", {}):
                old.copy(old["Nodes"][node], out.require_group("Nodes"), name=node)
    finally:
        os.close(fd)


def nodes(path: str) -> list[str]:
    with h5py.File(path, "r") as handle:
        return sorted(handle.get("Nodes", {}))


def series_of(path: str, node: str, series: str) -> np.ndarray:
    """One node's series from a merged file (an empty array when absent)."""
    with h5py.File(path, "r") as handle:
        data = handle.get(f"Nodes/{node}/{series}")
        return data[()] if data is not None else np.zeros(0, dtype=SERIES[series])


def items(series: str) -> list[str]:
    if series not in SERIES:
        raise KeyError(series)
    return list(SERIES[series].names or ())


def rows(path: str, node: str | None = None, series: str | None = None) -> Iterator[tuple[str, str, np.void]]:
    """(node, series, row) for every sample of the chosen nodes and series."""
    for name in nodes(path):
        if node and name != node:
            continue
        for kind in SERIES:
            if series and kind != series:
                continue
            for row in series_of(path, name, kind):
                yield name, kind, row


def extract_csv(path: str, out: TextIO, job_id: int, node: str | None, series: str | None) -> int:
    """sh5util -E: every sample as CSV, one table per series; returns the rows written."""
    writer = csv.writer(out)
    count = 0
    for kind in [series] if series else list(SERIES):
        writer.writerow(["Job", "Node", "Series", *items(kind)])
        for name, _kind, row in rows(path, node, kind):
            writer.writerow([job_id, name, kind, *(_plain(row[f]) for f in items(kind))])
            count += 1
    return count


def item_extract_csv(path: str, out: TextIO, series: str, item: str) -> int:
    """sh5util -I: one item over time for all nodes, with min, average, max and total per
    sample index; returns the samples written."""
    if item not in items(series):
        raise KeyError(item)
    names = nodes(path)
    columns = {n: series_of(path, n, series) for n in names}
    length = max((len(c) for c in columns.values()), default=0)
    writer = csv.writer(out)
    writer.writerow(["ElapsedTime", "EpochTime", "Min", "Ave", "Max", "Total", *names])
    for i in range(length):
        present = [c[i] for c in columns.values() if i < len(c)]
        values = [float(r[item]) for r in present]
        per_node = [_plain(columns[n][i][item]) if i < len(columns[n]) else "" for n in names]
        writer.writerow([_plain(present[0]["ElapsedTime"]), _plain(present[0]["EpochTime"]), _plain(min(values)),
                         _plain(sum(values) / len(values)), _plain(max(values)), _plain(sum(values)), *per_node])
    return length


def _plain(value) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else f"{number:.3f}"

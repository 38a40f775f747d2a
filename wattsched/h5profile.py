"""Per-job power profiles in HDF5 (acct_gather_profile/hdf5), and the reading side of them.

During a job each node agent appends samples to its own file
``<ProfileHDF5Dir>/<user>/<jobid>_<node>.h5``: an ``Energy`` series (ElapsedTime, EpochTime,
Power W, Energy J since the job started, CPUFrequency kHz) and a ``Task`` series
(ElapsedTime, EpochTime, CPUFrequency, CPUTime s, CPUUtilization %, RSS KB of the job's
processes on the node). Every append is flushed, so a job killed mid-run leaves a readable
file. When the job ends the node files are merged into ``job_<jobid>.h5`` beside them, one
group ``/Nodes/<node>`` per node holding its series, as Georgiou et al. 2014 describes and as sh5util does.
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Iterable, Iterator
from typing import TextIO

import h5py
import numpy as np

SERIES = {
    "Energy": np.dtype([("ElapsedTime", "f8"), ("EpochTime", "f8"), ("Power", "f8"), ("Energy", "f8"),
                        ("CPUFrequency", "u4")]),
    "Task": np.dtype([("ElapsedTime", "f8"), ("EpochTime", "f8"), ("CPUFrequency", "u4"), ("CPUTime", "f8"),
                      ("CPUUtilization", "f8"), ("RSS", "u8")]),
}


def user_dir(profile_dir: str, user: str) -> str:
    return os.path.join(profile_dir, user)


def node_path(profile_dir: str, user: str, job_id: int, node: str) -> str:
    return os.path.join(user_dir(profile_dir, user), f"{job_id}_{node}.h5")


def merged_path(profile_dir: str, user: str, job_id: int) -> str:
    return os.path.join(user_dir(profile_dir, user), f"job_{job_id}.h5")


def _ensure_user_dir(path: str) -> None:
    """ProfileHDF5Dir and its per-user folders: root's, which users may traverse but not list, so each
    reaches only the files made theirs (a merged profile, chowned to its user)."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, exist_ok=True)
        for made in (folder, os.path.dirname(folder)):
            os.chmod(made, 0o711)


def _trusted(path: str) -> bool:
    """Whether this process may believe a profile file: root reads only files root wrote."""
    return os.geteuid() != 0 or os.stat(path).st_uid == 0


class NodeProfile:
    """One node's profile of one job, appended to as samples arrive."""

    def __init__(self, path: str, job_id: int, node: str, user: str, start: float, series: Iterable[str],
                 attrs: dict[str, str | int | float] | None = None):
        _ensure_user_dir(path)
        self.path, self.start = path, start
        fresh = not os.path.exists(path)
        self.file = h5py.File(path, "a", libver="latest")
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


def merge(profile_dir: str, user: str, job_id: int, keep: bool = False) -> str | None:
    """Merge the job's node files into ``job_<id>.h5`` (added to it if it exists); returns its
    path, or None when there is nothing to merge. Node files are removed unless ``keep``."""
    parts = [p for p in sorted(glob.glob(os.path.join(user_dir(profile_dir, user), f"{job_id}_*.h5")))
             if _trusted(p)]
    target = merged_path(profile_dir, user, job_id)
    if not parts:
        return target if os.path.exists(target) else None
    with h5py.File(target + ".tmp", "w") as out:
        out.attrs.update({"JobId": job_id, "User": user})
        if os.path.exists(target) and _trusted(target):  # one handed to its user is not read back by root
            with h5py.File(target, "r") as old:
                for node in old.get("Nodes", {}):
                    old.copy(old["Nodes"][node], out.require_group("Nodes"), name=node)
        for part in parts:
            with h5py.File(part, "r") as src:
                node = str(src.attrs["Node"])
                group = out.require_group("Nodes").require_group(node)
                group.attrs.update(dict(src.attrs))
                for name in src:
                    if name in group:
                        del group[name]
                    src.copy(src[name], group, name=name)
    os.replace(target + ".tmp", target)
    if not keep:
        for part in parts:
            os.unlink(part)
    return target


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

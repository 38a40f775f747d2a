"""sh5util: merge a job's per-node HDF5 profiles into one file, list a series' items, and
extract series to CSV, with Slurm's options.

- merge (default): ``sh5util -j JOB [-o FILE] [-p DIR] [-S] [--user U]``: writes ./job_JOB.h5
  (node files are removed unless -S, as Slurm does);
- ``-E/--extract [-i FILE] [-N NODE] [-s SERIES] [-o FILE]``: every sample as CSV
  (default ./extract_JOB.csv);
- ``-I/--item-extract -s SERIES -d ITEM [-i FILE] [-o FILE]``: one item of all nodes over time,
  with min, average, max and total (default ./JOB_SERIES_ITEM.csv);
- ``-L/--list [-i FILE] -s SERIES``: the items of a series.
"""

from __future__ import annotations

import os
import shutil
import sys

from wattsched.cli.common import CLIError, load_config
from wattsched.cli.options import NO, REQ, STANDARD, Command, Opt, run

COMMAND = Command("sh5util", "[<OPTION>]", [
    Opt("d", "data", REQ, "Name of data item to extract (with --item-extract)", metavar="name"),
    Opt("E", "extract", NO, "Extract data series from the merged file to CSV"),
    Opt("i", "input", REQ, "Merged file to extract from (default ./job_$jobid.h5)", metavar="path"),
    Opt("I", "item-extract", NO, "Extract one data item from all nodes to CSV"),
    Opt("j", "jobs", REQ, "Format is <job(.step)>. Merge this job/step (or a comma-separated list)",
        metavar="<job(.step)>"),
    Opt("L", "list", NO, "Print the items of a series"),
    Opt("l", "level", REQ, "Level of data to extract: Node:TimeSeries (Node:Totals is not kept)",
        metavar="[Node:TimeSeries|Node:Totals]"),
    Opt("N", "node", REQ, "Node name to extract (default is all)", metavar="nodename"),
    Opt("o", "output", REQ, "Path to a file into which to write (default ./job_$jobid.h5 or ./extract_$jobid.csv)",
        metavar="path"),
    Opt("p", "profiledir", REQ, "Profile directory location where node-step files exist (default from "
        "acct_gather.conf)", metavar="dir"),
    Opt("s", "series", REQ, "Name of series: Energy | Task", metavar="[Energy|Task]"),
    Opt("S", "savefiles", NO, "Don't remove node-step files after merging them"),
    Opt("u", "user", REQ, "User who profiled the job (default is the caller)", metavar="user"),
    Opt("v", "verbose", NO, "Increase verbosity", kind="count"),
    *STANDARD,
], operands=False)


def sh5util(argv: list[str]) -> None:
    """Merge and extract HDF5 job profiles."""
    opts, _ = COMMAND.parse(argv)
    job_text = (opts.get("jobs") or "").split(",")[0].split(".")[0]
    if job_text and not job_text.isdigit():
        raise CLIError(f"Invalid job id: {opts['jobs']}")
    jobs = int(job_text) if job_text else None
    output, profiledir, savefiles, user = opts.get("output"), opts.get("profiledir"), opts.get("savefiles"), \
        opts.get("user")
    extract, item_extract, list_, input_ = opts.get("extract"), opts.get("item_extract"), opts.get("list"), \
        opts.get("input")
    node, level, series, data = opts.get("node"), opts.get("level", "Node:TimeSeries"), opts.get("series"), \
        opts.get("data")
    from wattsched import auth
    from wattsched.profiles import h5profile

    if series is not None and series not in h5profile.SERIES:
        raise CLIError(f"Invalid series {series}: {', '.join(h5profile.SERIES)}")
    if level != "Node:TimeSeries":
        raise CLIError(f"Invalid level {level}: only Node:TimeSeries is recorded")
    if list_ or extract or item_extract:
        source = input_ or (f"job_{jobs}.h5" if jobs else None)
        if source is None or not os.path.exists(source):
            raise CLIError(f"{source or 'an input file (-i) or a job (-j)'}: no such file")
        if list_:
            if series is None:
                raise CLIError("--list needs --series")
            print("\n".join(h5profile.items(series)))
            return
        job_id = jobs or _job_of(source)
        if item_extract:
            if series is None or data is None:
                raise CLIError("--item-extract needs --series and --data")
            target = output or f"./{job_id}_{series}_{data}.csv"
            with open(target, "w", newline="") as out:
                try:
                    h5profile.item_extract_csv(source, out, series, data)
                except KeyError as exc:
                    raise CLIError(f"Invalid data item {data} for series {series}") from exc
        else:
            target = output or f"./extract_{job_id}.csv"
            with open(target, "w", newline="") as out:
                h5profile.extract_csv(source, out, job_id, node, series)
        sys.stderr.write(f"sh5util: wrote {target}\n")
        return
    if jobs is None:
        raise CLIError("a job id is required (-j)")
    directory = profiledir or load_config().profile_dir
    owner = user or auth.username(os.getuid())
    target = output or f"./job_{jobs}.h5"
    try:
        merged = h5profile.merge(directory, owner, jobs, keep=bool(savefiles))
        if merged is not None and os.path.abspath(target) != os.path.abspath(merged):
            shutil.copyfile(merged, target)
    except OSError as exc:  # another user's profiles (merged already or not), or none: said, not a traceback
        raise CLIError(f"Cannot read the profiles of job {jobs} in {os.path.join(directory, owner)}: "
                       f"{exc.strerror or exc}") from exc
    if merged is None:
        raise CLIError(f"No node-step files found for job {jobs} in {os.path.join(directory, owner)}")
    sys.stderr.write(f"sh5util: merged job {jobs} into {target}\n")


def _job_of(path: str) -> int:
    import h5py

    with h5py.File(path, "r") as handle:
        return int(handle.attrs.get("JobId", 0))


def main() -> None:
    run("sh5util", lambda: sh5util(sys.argv[1:]))

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
from typing import Annotated

import typer
from wattsched.cli.common import CLIError, die, load_config

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["-h", "--help"]})


@app.command()
def sh5util(
    jobs: Annotated[int | None, typer.Option("-j", "--jobs", help="Job id.")] = None,
    output: Annotated[str | None, typer.Option("-o", "--output", help="Output file.")] = None,
    profiledir: Annotated[str | None, typer.Option("-p", "--profiledir", help="Where the node files are "
                                                                              "(default ProfileHDF5Dir).")] = None,
    savefiles: Annotated[bool, typer.Option("-S", "--savefiles", help="Keep the node files.")] = False,
    user: Annotated[str | None, typer.Option("-u", "--user", help="The job's user (default: you).")] = None,
    extract: Annotated[bool, typer.Option("-E", "--extract", help="Extract series to CSV.")] = False,
    item_extract: Annotated[bool, typer.Option("-I", "--item-extract", help="Extract one item to CSV.")] = False,
    list_: Annotated[bool, typer.Option("-L", "--list", help="List a series' items.")] = False,
    input_: Annotated[str | None, typer.Option("-i", "--input", help="Merged file (default ./job_JOB.h5).")] = None,
    node: Annotated[str | None, typer.Option("-N", "--node", help="Node to extract (default all).")] = None,
    level: Annotated[str, typer.Option("-l", "--level", help="Node:TimeSeries (Node:Totals is not kept).")]
    = "Node:TimeSeries",
    series: Annotated[str | None, typer.Option("-s", "--series", help="Energy or Task.")] = None,
    data: Annotated[str | None, typer.Option("-d", "--data", help="Item of the series, e.g. Power.")] = None,
) -> None:
    """Merge and extract HDF5 job profiles."""
    from wattsched import auth, h5profile

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
    merged = h5profile.merge(directory, owner, jobs, keep=savefiles)
    if merged is None:
        raise CLIError(f"No node-step files found for job {jobs} in {os.path.join(directory, owner)}")
    target = output or f"./job_{jobs}.h5"
    if os.path.abspath(target) != os.path.abspath(merged):
        shutil.copyfile(merged, target)
    sys.stderr.write(f"sh5util: merged job {jobs} into {target}\n")


def _job_of(path: str) -> int:
    import h5py

    with h5py.File(path, "r") as handle:
        return int(handle.attrs.get("JobId", 0))


def main() -> None:
    try:
        app(prog_name="sh5util")
    except CLIError as exc:
        die("sh5util", str(exc))

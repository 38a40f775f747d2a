"""scancel: cancel or signal jobs by id (12, 12_3, 12_[1-4]) or by filters."""

from __future__ import annotations

import signal as signal_mod
import sys
from typing import Annotated

import typer
from wattsched.cli.common import Client, CLIError, die, split_list

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})


def parse_signal(name: str) -> int:
    text = name.upper().removeprefix("SIG")
    if text.isdigit():
        number = int(text)
    else:
        try:
            number = int(getattr(signal_mod, "SIG" + text))
        except AttributeError as exc:
            raise CLIError(f"Invalid job signal: {name}") from exc
    if not 1 <= number <= 64:
        raise CLIError(f"Invalid job signal: {name}")
    return number


@app.command()
def scancel(
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job ids: 12, 12_3, 12_[1-4].")] = None,
    users: Annotated[str | None, typer.Option("-u", "--user", help="Only jobs of these users.")] = None,
    name: Annotated[str | None, typer.Option("-n", "--name", "--jobname", help="Only jobs with this name.")]
    = None,
    state: Annotated[str | None, typer.Option("-t", "--state", help="Only jobs in these states.")] = None,
    partition: Annotated[str | None, typer.Option("-p", "--partition", help="Only jobs in these partitions.")]
    = None,
    signal: Annotated[str | None, typer.Option("-s", "--signal", help="Send this signal instead of cancelling.")]
    = None,
    batch: Annotated[bool, typer.Option("-b", "--batch", help="Signal only the batch shell.")] = False,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More messages.")] = 0,
) -> None:
    """Cancel (or signal) jobs."""
    from wattsched import states as st

    sig = parse_signal(signal) if signal else None
    client = Client()
    ids = [i for i in (job_ids or []) for i in i.split(",") if i]
    filters = users or name or state or partition
    if not ids and not filters:
        raise CLIError("No job identification provided")
    if filters:
        params = {"user": split_list([users]) if users else None, "partition": split_list([partition])
                  if partition else None, "job": ids or None}
        jobs = client.request("GET", "/v1/jobs", params=params)["jobs"]
        wanted = {st.parse_job_state(s) for s in split_list([state])} if state else {"PENDING", "RUNNING"}
        ids = [str(j["job_id"]) for j in jobs if j["state"] in wanted and (not name or j["name"] == name)]
        if not ids:
            return
    failed = False
    for job_ref in ids:
        body = {"job_ids": [job_ref], "batch_only": batch}
        if sig is not None:
            body["signal"] = sig
        try:
            client.request("POST", "/v1/jobs/cancel", body)
            if verbose:
                print(f"scancel: {'Signal ' + str(sig) + ' sent to' if sig else 'Terminating'} job {job_ref}")
        except CLIError as exc:
            if exc.status == 0:
                raise
            failed = True
            sys.stderr.write(f"scancel: error: Kill job error on job id {job_ref}: {exc}\n")
    if failed:
        raise typer.Exit(1)


def main() -> None:
    try:
        app(prog_name="scancel")
    except CLIError as exc:
        die("scancel", str(exc))

"""sdiag: the controller's scheduling statistics, in the layout of Slurm's sdiag (times in
microseconds), or as JSON."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from wattsched.cli.common import Client, CLIError, die, print_json

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})


def _when(epoch: float) -> str:
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(epoch))} ({int(epoch)})"


def _us(ms: float) -> int:
    return round(ms * 1000)


@app.command()
def sdiag(json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False) -> None:
    """Show scheduling statistics."""
    d = Client().request("GET", "/v1/diag")
    if json_:
        print_json(d)
        return
    minutes = max(1.0, (d["time"] - d["started"]) / 60)
    rule = "*" * 55
    print("\n".join([
        rule,
        f"sdiag output at {_when(d['time'])}",
        f"Data since      {_when(d['started'])}",
        rule,
        f"Jobs started:   {d['jobs_started']}",
        f"Jobs pending:   {d['jobs_pending']}",
        f"Jobs running:   {d['jobs_running']}",
        "",
        "Main schedule statistics (microseconds):",
        f"\tLast cycle:   {_us(d['last_cycle_ms'])}",
        f"\tMax cycle:    {_us(d['max_cycle_ms'])}",
        f"\tTotal cycles: {d['cycles']}",
        f"\tMean cycle:   {_us(d['mean_cycle_ms'])}",
        f"\tMean depth cycle:  {round(d['mean_depth'])}",
        f"\tCycles per minute: {round(d['cycles'] / minutes)}",
        f"\tLast queue length: {d['queue_depth']}",
        "",
        f"Backfilling stats ({d['scheduler_type']})",
        f"\tTotal backfilled jobs (since last slurm start): {d['bf_backfilled']}",
        f"\tTotal backfilled jobs (last cycle): {d['bf_last_backfilled']}",
        f"\tTotal cycles: {d['bf_cycles']}",
        f"\tLast cycle when: {_when(d['bf_last_time']) if d['bf_cycles'] else 'N/A'}",
        f"\tLast cycle: {_us(d['bf_last_ms'])}",
        f"\tMax cycle:  {_us(d['bf_max_ms'])}",
        f"\tMean cycle: {_us(d['bf_mean_ms'])}",
        f"\tLast depth cycle: {d['bf_last_depth']}",
        f"\tDepth Mean: {round(d['bf_mean_depth'])}",
        f"\tLast queue length: {d['bf_queue_len']}",
        "",
        "Accounting:",
        f"\tRecords waiting for the database: {d['accounting_backlog']}",
        f"\tRecords the database refused (set aside): {d['accounting_rejected']}",
        *[f"\t\t{_when(r['time'])} {r['kind']} {r['key']}: {r['error']}" for r in d["accounting_rejected_recent"]],
    ]))


def main() -> None:
    try:
        app(prog_name="sdiag")
    except CLIError as exc:
        die("sdiag", str(exc))

"""sdiag: the controller's scheduling statistics, in the layout of Slurm's sdiag (times in
microseconds), or as JSON."""

from __future__ import annotations

import sys
import time

from wattsched.cli.common import Client, CLIError, print_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard


def _when(epoch: float) -> str:
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(epoch))} ({int(epoch)})"


def _us(ms: float) -> int:
    return round(ms * 1000)


COMMAND = Command("sdiag", "[-arT] [--json]", [
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("r", "reset", NO, "reset statistics (not kept here: they cover the controller's lifetime)", kind="flag"),
    ignored("a", "all", NO), ignored("M", "cluster", REQ), ignored("T", "sort-by-time", NO),
    ignored("t", "sort-by-time2", NO), ignored(None, "sort-by-id", NO), ignored(None, "sort-by-name", NO),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    *standard(),
], operands=False)


def sdiag(argv: list[str]) -> None:
    """Show scheduling statistics."""
    opts, _ = COMMAND.parse(argv)
    if opts.get("reset"):
        raise CLIError("resetting statistics is not supported: they cover the controller's lifetime")
    json_ = "json" in opts
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
    run("sdiag", lambda: sdiag(sys.argv[1:]))

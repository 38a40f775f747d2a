"""``wattsched power``: switch nodes through their BMCs (on, off, status) over IPMI or Redfish
(BmcProtocol), the default Suspend/ResumeProgram, and the power-saving report from accounting."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

from wattsched.cli.common import CLIError, config_file
from wattsched.cli.plaintyper import typer

if TYPE_CHECKING:
    from wattsched.plugins.acct_gather_energy.ipmi import IpmiEnergy
    from wattsched.plugins.acct_gather_energy.redfish import RedfishEnergy

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Switch nodes through their BMCs; report what power saving saved.")


def _switch(nodes: str, config: str | None, target: str | None) -> None:
    from wattsched import hostlist
    from wattsched.config import ConfigError, load

    try:
        conf = load(config_file(config))
        names = hostlist.expand(nodes)
    except (ConfigError, hostlist.HostlistError) as exc:
        raise CLIError(str(exc)) from exc
    by_name = {n.name: n for n in conf.nodes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise CLIError(f"Invalid node name specified: {unknown[0]}")
    try:
        if conf.switching_protocol == "redfish":
            from wattsched.plugins.acct_gather_energy.redfish import SWITCH_RETRIES, RedfishEnergy

            client: IpmiEnergy | RedfishEnergy = RedfishEnergy(conf, [by_name[n] for n in names],
                                                               retries=SWITCH_RETRIES)
        else:
            from wattsched.plugins.acct_gather_energy.ipmi import IpmiEnergy

            client = IpmiEnergy(conf, [by_name[n] for n in names])
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    failed = []
    for name in names:
        try:
            state = client.chassis(name, target)
        except OSError as exc:
            sys.stderr.write(f"wattsched power: {exc}\n")
            failed.append(name)
            continue
        if target is None:
            sys.stdout.write(f"{name} {state}\n")
    if failed:
        raise CLIError(f"{len(failed)} of {len(names)} nodes failed: {hostlist.compress(failed)}")


ConfigOpt = Annotated[str | None, typer.Option("--config", help="Configuration file.")]
Nodes = Annotated[str, typer.Argument(help="Hostlist, e.g. leaf[1000-1009].")]


@app.command()
def on(nodes: Nodes, config: ConfigOpt = None) -> None:
    """Power the nodes on (IPMI chassis control or Redfish ComputerSystem.Reset)."""
    _switch(nodes, config, "on")


@app.command()
def off(nodes: Nodes, config: ConfigOpt = None) -> None:
    """Power the nodes off (IPMI chassis control or Redfish ComputerSystem.Reset)."""
    _switch(nodes, config, "off")


@app.command()
def status(nodes: Nodes, config: ConfigOpt = None) -> None:
    """Print each node's chassis power state."""
    _switch(nodes, config, None)


@app.command()
def report(start: Annotated[str | None, typer.Option("--starttime", "-S", help="Start of the period.")] = None,
           end: Annotated[str | None, typer.Option("--endtime", "-E", help="End of the period.")] = None,
           parsable: Annotated[bool, typer.Option("--parsable2", "-P", help="'|'-separated output.")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False) -> None:
    """What power saving saved over a period: energy against always-on, switches, waiting added."""
    import time

    from wattsched import timefmt
    from wattsched.cli.common import Client

    client = Client()
    params = {}
    try:
        if start:
            params["start"] = timefmt.parse_time(start, time.time())
        if end:
            params["end"] = timefmt.parse_time(end, time.time())
    except timefmt.TimeFormatError as exc:
        raise CLIError(str(exc)) from exc
    data = client.request("GET", "/v1/power/report", params=params)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    def num(value: float | None, digits: int = 0) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    rows = [("Start", timefmt.ts_str(data["start"])), ("End", timefmt.ts_str(data["end"])),
            ("Nodes", str(data["nodes"])), ("SwitchesOff", str(data["switches_off"])),
            ("SwitchesOn", str(data["switches_on"])), ("OffSeconds", num(data["off_s"])),
            ("SwitchingSeconds", num(data["switching_s"])), ("SavedJoules", num(data["saved_j"])),
            ("ClusterJoules", num(data["cluster_j"])), ("AlwaysOnJoules", num(data["always_on_j"])),
            ("SavedPercent", num(data["saved_pct"], 2)), ("JobsDelayed", str(data["jobs_delayed"])),
            ("WaitAddedSeconds", num(data["wait_added_s"]))]
    if parsable:
        sys.stdout.write("|".join(k for k, _ in rows) + "\n" + "|".join(v for _, v in rows) + "\n")
    else:
        for key, value in rows:
            sys.stdout.write(f"{key:>17}: {value}\n")

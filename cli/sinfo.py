"""sinfo: partitions and nodes, grouped by state as Slurm does (-N, -l, -R, -o, --json)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, die, print_json, split_list

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"]})

DEFAULT = "%9P %.5a %.10l %.6D %.6t %N"
LONG = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODES = "%N %.6D %.9P %6t"
NODES_LONG = "%N %.6D %.9P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"
REASONS = "%20E %9u %19H %N"


def _limit(minutes: int | None) -> str:
    from wattsched import timefmt

    return "infinite" if minutes is None else timefmt.secs_to_str(minutes * 60)


def _user(uid: int) -> str:
    from wattsched.auth import username

    return username(uid)


# code -> (title, value of a group of nodes in a partition: (nodes, partition))
FIELDS: dict[str, tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], str]]] = {
    "P": ("PARTITION", lambda ns, p: p["name"] + ("*" if p["default"] else "")),
    "R": ("PARTITION", lambda ns, p: p["name"]),
    "a": ("AVAIL", lambda ns, p: {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}[p["state"]]),
    "l": ("TIMELIMIT", lambda ns, p: _limit(p["max_time_min"])),
    "L": ("DEFAULTTIME", lambda ns, p: "n/a" if p["default_time_min"] is None else _limit(p["default_time_min"])),
    "s": ("JOB_SIZE", lambda ns, p: f"1-{p['max_nodes'] if p['max_nodes'] is not None else 'infinite'}"),
    "r": ("ROOT", lambda ns, p: "no"),
    "h": ("OVERSUBS", lambda ns, p: "NO"),
    "g": ("GROUPS", lambda ns, p: "all"),
    "D": ("NODES", lambda ns, p: str(len(ns))),
    "t": ("STATE", lambda ns, p: ns[0]["state_short"] if ns else "n/a"),
    "T": ("STATE", lambda ns, p: ns[0]["state_sinfo"] if ns else "n/a"),
    "N": ("NODELIST", lambda ns, p: _compress([n["name"] for n in ns])),
    "n": ("HOSTNAMES", lambda ns, p: _compress([n["name"] for n in ns])),
    "c": ("CPUS", lambda ns, p: str(ns[0]["cpus"]) if ns else "0"),
    "C": ("CPUS(A/I/O/T)", lambda ns, p: _cpu_counts(ns)),
    "z": ("S:C:T", lambda ns, p: f"{ns[0]['sockets']}:{ns[0]['cores_per_socket']}:{ns[0]['threads_per_core']}"
          if ns else "0:0:0"),
    "m": ("MEMORY", lambda ns, p: str(ns[0]["real_memory_mb"]) if ns else "0"),
    "d": ("TMP_DISK", lambda ns, p: "0"),
    "w": ("WEIGHT", lambda ns, p: str(ns[0]["weight"]) if ns else "0"),
    "f": ("AVAIL_FEATURES", lambda ns, p: ",".join(ns[0]["features"]) or "(null)" if ns else "(null)"),
    "E": ("REASON", lambda ns, p: (ns[0]["reason"] or "none") if ns else "none"),
    "u": ("USER", lambda ns, p: _user(ns[0]["reason_uid"]) if ns and ns[0]["reason"] else "Unknown"),
    "H": ("TIMESTAMP", lambda ns, p: _stamp(ns[0]["reason_time"]) if ns and ns[0]["reason"] else "Unknown"),
}
# -N -l shows the long title "AVAIL_FE" in an 8-wide column; titles are truncated by width anyway.


def _compress(names: list[str]) -> str:
    from wattsched import hostlist

    return hostlist.compress(names)


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "Unknown"


def _cpu_counts(nodes: list[dict[str, Any]]) -> str:
    alloc = sum(n["alloc_cpus"] for n in nodes)
    total = sum(n["cpus"] for n in nodes)
    other = sum(n["cpus"] - n["alloc_cpus"] for n in nodes if n["base_state"] == "DOWN" or n["drain"])
    return f"{alloc}/{total - alloc - other}/{other}/{total}"


def _group_key(codes: set[str], node: dict[str, Any]) -> tuple:
    key: list[Any] = [node["state_short"]]
    if codes & {"c", "z", "m", "w", "f"}:
        key += [node["cpus"], node["sockets"], node["cores_per_socket"], node["threads_per_core"],
                node["real_memory_mb"], node["weight"], tuple(node["features"])]
    if codes & {"E", "u", "H"}:
        key += [node["reason"], node["reason_uid"]]
    return tuple(key)


@app.command()
def sinfo(
    node_view: Annotated[bool, typer.Option("-N", "--Node", help="Node-oriented view.")] = False,
    long: Annotated[bool, typer.Option("-l", "--long", help="Long format.")] = False,
    reasons: Annotated[bool, typer.Option("-R", "--list-reasons", help="Why nodes are down or drained.")]
    = False,
    fmt_: Annotated[str | None, typer.Option("-o", "--format", help="Output format (%-codes).")] = None,
    noheader: Annotated[bool, typer.Option("-h", "--noheader", help="No header line.")] = False,
    partitions: Annotated[list[str] | None, typer.Option("-p", "--partition", help="Partitions.")] = None,
    nodes: Annotated[str | None, typer.Option("-n", "--nodes", help="Nodes (hostlist).")] = None,
    states: Annotated[list[str] | None, typer.Option("-t", "--states", help="Node states (idle, alloc, ...).")]
    = None,
    reservation: Annotated[bool, typer.Option("-T", "--reservation", help="Show reservations.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show partitions and nodes."""
    client = Client()
    if reservation:
        from wattsched.cli import resv

        found = client.request("GET", "/v1/reservations")["reservations"]
        if json_:
            print_json({"reservations": found})
        elif found or not noheader:
            print(resv.sinfo_table(found, noheader))
        return
    node_rows = client.request("GET", "/v1/nodes")["nodes"]
    part_rows = client.request("GET", "/v1/partitions")["partitions"]
    wanted_parts = set(split_list(partitions))
    if nodes:
        from wattsched import hostlist

        wanted_nodes = set(hostlist.expand(nodes))
        node_rows = [n for n in node_rows if n["name"] in wanted_nodes]
    wanted_states = {s.lower() for s in split_list(states)}
    if wanted_states:
        # a state names the base state whatever the suffix (idle matches idle~), or a power flag
        node_rows = [n for n in node_rows if n["state_short"].rstrip("*~#%!") in wanted_states
                     or n["state_sinfo"].rstrip("*~#%!") in wanted_states
                     or (n.get("power") and n["power"].lower() in wanted_states)]
    if reasons:
        node_rows = [n for n in node_rows if n["reason"] and (n["drain"] or n["base_state"] == "DOWN")]
    if json_:
        print_json({"nodes": node_rows, "partitions": [p for p in part_rows if not wanted_parts
                                                      or p["name"] in wanted_parts]})
        return
    spec = fmt_ or (REASONS if reasons else NODES_LONG if node_view and long else NODES if node_view
                    else LONG if long else DEFAULT)
    parts = fmt.parse_format(spec)
    codes = {p.code for p in parts if isinstance(p, fmt.Column)}
    lines = []
    if long:
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y"))
    if not noheader:
        lines.append(fmt.render_header(parts, {c: f[0] for c, f in FIELDS.items()}))
    by_name = {n["name"]: n for n in node_rows}
    from wattsched import hostlist

    for part in part_rows:
        if wanted_parts and part["name"] not in wanted_parts:
            continue
        members = [by_name[n] for n in hostlist.expand(part["nodes"]) if n in by_name]
        if node_view:
            groups = [[n] for n in members]
        elif reasons:
            groups = _groups(members, codes | {"E"})
        else:
            groups = _groups(members, codes)
        if not groups and not node_view and not reasons and not wanted_states and not nodes:
            groups = [[]]
        row = fmt.compile_row(parts, lambda code, p=part: fmt.bound(FIELDS[code][1] if code in FIELDS else None,
                                                                    code, p))
        lines.extend(row(group) for group in groups)
    if reasons:  # one line per reason, not per partition
        lines = list(dict.fromkeys(lines))
    if lines:
        print("\n".join(lines))


def _groups(members: list[dict[str, Any]], codes: set[str]) -> list[list[dict[str, Any]]]:
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for node in members:
        grouped.setdefault(_group_key(codes, node), []).append(node)
    return list(grouped.values())


def main() -> None:
    try:
        app(prog_name="sinfo")
    except CLIError as exc:
        die("sinfo", str(exc))

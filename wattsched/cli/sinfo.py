"""sinfo: partitions and nodes, grouped by state as Slurm does (-N, -l, -R, -o, --json)."""

from __future__ import annotations

import sys
import time

from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, every, json_text, split_list, wants_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT = "%9P %.5a %.10l %.6D %.6t %N"
LONG = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODES = "%N %.6D %.9P %6t"
NODES_LONG = "%N %.6D %.9P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"
REASONS = "%20E %9u %19H %N"
SUMMARIZE = "%9P %.5a %.10l %.16F %N"


def _limit(minutes: int | None) -> str:
    from wattsched import timefmt

    return "infinite" if minutes is None else timefmt.secs_to_str(minutes * 60)


def _user(uid: int) -> str:
    from wattsched.auth import username

    return username(uid)


# code -> (title, value of a group of nodes in a partition: (nodes, partition))
FIELDS: dict[str, tuple[str, Callable[[list[dict[str, Any]], dict[str, Any]], str]]] = {
    "P": ("PARTITION", lambda ns, p: p["name"] + ("*" if p["default"] else "")),
    "R": ("PARTITION", lambda ns, p: p["name"]),
    "a": ("AVAIL", lambda ns, p: {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}[p["state"]]),
    "l": ("TIMELIMIT", lambda ns, p: _limit(p["max_time_min"])),
    "L": ("DEFAULTTIME", lambda ns, p: "n/a" if p["default_time_min"] is None else _limit(p["default_time_min"])),
    "s": ("JOB_SIZE", lambda ns, p: f"1-{p['max_nodes'] if p['max_nodes'] is not None else 'infinite'}"),
    "r": ("ROOT", lambda ns, p: "no"),
    "h": ("OVERSUBS", lambda ns, p: p.get("over_subscribe", "NO")),
    "g": ("GROUPS", lambda ns, p: "all"),
    "D": ("NODES", lambda ns, p: str(len(ns))),
    "t": ("STATE", lambda ns, p: ns[0]["state_short"] if ns else "n/a"),
    "T": ("STATE", lambda ns, p: ns[0]["state_sinfo"] if ns else "n/a"),
    "statecomplete": ("STATECOMPLETE", lambda ns, p: ns[0]["state"].lower() if ns else "n/a"),
    "N": ("NODELIST", lambda ns, p: _compress([n["name"] for n in ns])),
    "n": ("HOSTNAMES", lambda ns, p: _compress([n["name"] for n in ns])),
    "c": ("CPUS", lambda ns, p: str(ns[0]["cpus"]) if ns else "0"),
    "C": ("CPUS(A/I/O/T)", lambda ns, p: _cpu_counts(ns)),
    "z": ("S:C:T", lambda ns, p: f"{ns[0]['sockets']}:{ns[0]['cores_per_socket']}:{ns[0]['threads_per_core']}"
          if ns else "0:0:0"),
    "m": ("MEMORY", lambda ns, p: str(ns[0]["real_memory_mb"]) if ns else "0"),
    "d": ("TMP_DISK", lambda ns, p: str(ns[0]["tmp_disk_mb"]) if ns else "0"),
    "w": ("WEIGHT", lambda ns, p: str(ns[0]["weight"]) if ns else "0"),
    "f": ("AVAIL_FEATURES", lambda ns, p: ",".join(ns[0]["features"]) or "(null)" if ns else "(null)"),
    "E": ("REASON", lambda ns, p: (ns[0]["reason"] or "none") if ns else "none"),
    "u": ("USER", lambda ns, p: _user(ns[0]["reason_uid"]) if ns and ns[0]["reason"] else "Unknown"),
    "H": ("TIMESTAMP", lambda ns, p: _stamp(ns[0]["reason_time"]) if ns and ns[0]["reason"] else "Unknown"),
    "A": ("NODES(A/I)", lambda ns, p: _node_counts(ns, 2)),
    "F": ("NODES(A/I/O/T)", lambda ns, p: _node_counts(ns, 4)),
    "X": ("SOCKETS", lambda ns, p: str(ns[0]["sockets"]) if ns else "0"),
    "Y": ("CORES", lambda ns, p: str(ns[0]["cores_per_socket"]) if ns else "0"),
    "Z": ("THREADS", lambda ns, p: str(ns[0]["threads_per_core"]) if ns else "0"),
    "O": ("CPU_LOAD", lambda ns, p: "N/A"),
    "e": ("FREE_MEM", lambda ns, p: "N/A"),
    "b": ("ACTIVE_FEATURES", lambda ns, p: ",".join(ns[0]["features"]) or "(null)" if ns else "(null)"),
    "B": ("MAX_CPUS_PER_NODE", lambda ns, p: "UNLIMITED"),
    "G": ("GRES", lambda ns, p: ns[0].get("gres", "(null)") if ns else "(null)"),
    "gresused": ("GRES_USED", lambda ns, p: ns[0].get("gres_used", "(null)") if ns else "(null)"),
    "I": ("PRIO_JOB_FACTOR", lambda ns, p: str(p.get("priority_job_factor", 1))),
    "p": ("PRIO_TIER", lambda ns, p: str(p.get("priority_tier", 1))),
    "S": ("ALLOCNODES", lambda ns, p: "all"),
    "M": ("PREEMPT_MODE", lambda ns, p: "OFF"),
    "V": ("CLUSTER", lambda ns, p: p.get("cluster", "")),
    "o": ("NODE_ADDR", lambda ns, p: _compress([n["name"] for n in ns])),
}
# -O/--Format names (Slurm's sinfo table) and the %-code that shows the same
BY_NAME = {"available": "a", "cores": "Y", "cpus": "c", "cpusload": "O", "cpusstate": "C", "defaulttime": "L",
           "disk": "d", "features": "f", "features_act": "b", "freemem": "e", "gres": "G", "groups": "g",
           "maxcpuspernode": "B", "memory": "m", "nodeaddr": "o", "nodeai": "A", "nodeaiot": "F", "nodehost": "n",
           "nodelist": "N", "nodes": "D", "oversubscribe": "h", "partition": "P", "partitionname": "R",
           "preemptmode": "M", "priorityjobfactor": "I", "prioritytier": "p", "reason": "E", "root": "r",
           "size": "s", "socketcorethread": "z", "sockets": "X", "statecompact": "t", "statecomplete": "statecomplete",
           "statelong": "T",
           "threads": "Z", "time": "l", "timestamp": "H", "user": "u", "weight": "w", "allocnodes": "S",
           "cluster": "V", "gresused": "gresused"}
# -N -l shows the long title "AVAIL_FE" in an 8-wide column; titles are truncated by width anyway.


def _field_is(key: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda node: node.get(key) == value


# sinfo -t: Slurm's node state names and what each matches (a base state matches whatever the flags:
# idle is idle+drain too; alloc is any node with CPUs allocated, mixed ones included)
_BASE_NAMES = {"idle": "IDLE", "down": "DOWN", "mix": "MIXED", "mixed": "MIXED", "future": "FUTURE", "futr": "FUTURE",
               "unknown": "UNKNOWN", "unk": "UNKNOWN"}
_FLAG_TESTS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "alloc": lambda n: n["alloc_cpus"] > 0, "allocated": lambda n: n["alloc_cpus"] > 0,
    "drain": lambda n: n["drain"],
    "drained": lambda n: n["drain"] and not n["alloc_cpus"],
    "draining": lambda n: n["drain"] and n["alloc_cpus"] > 0, "drng": lambda n: n["drain"] and n["alloc_cpus"] > 0,
    "no_respond": lambda n: n["not_responding"], "not_responding": lambda n: n["not_responding"],
    "resv": lambda n: "RESERVED" in n["state"], "reserved": lambda n: "RESERVED" in n["state"],
    "maint": lambda n: "MAINT" in n["state"],
    "comp": lambda n: "COMPLETING" in n["state"], "completing": lambda n: "COMPLETING" in n["state"],
    **{flag: _field_is("power", flag.upper()) for flag in ("power_down", "powered_down", "powering_up",
                                                           "powering_down")},
    # Slurm's, which nothing here ever has
    **{flag: (lambda n: False) for flag in ("cloud", "fail", "planned", "plnd", "perfctrs", "npc", "reboot_requested",
                                            "reboot_issued", "reboot", "boot")},
}


def state_test(name: str) -> Callable[[dict[str, Any]], bool]:
    """What ``sinfo -t name`` keeps; an unknown name is Slurm's error."""
    lower = name.lower()
    if lower in _BASE_NAMES:
        return _field_is("base_state", _BASE_NAMES[lower])
    if lower in _FLAG_TESTS:
        return _FLAG_TESTS[lower]
    raise CLIError(f'Bad state string: "{name}"\nsinfo: error: valid states: {", ".join(sorted(_BASE_NAMES))}, '
                   f'{", ".join(sorted(_FLAG_TESTS))}')


def _compress(names: list[str]) -> str:
    from wattsched import hostlist

    return hostlist.compress(names)


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "Unknown"


def _node_counts(nodes: list[dict[str, Any]], parts: int) -> str:
    """%A allocated/idle nodes, %F allocated/idle/other/total (other: down, drained)."""
    other = sum(1 for n in nodes if n["base_state"] == "DOWN" or n["drain"])
    alloc = sum(1 for n in nodes if n["alloc_cpus"] and not (n["base_state"] == "DOWN" or n["drain"]))
    idle = len(nodes) - alloc - other
    return f"{alloc}/{idle}" if parts == 2 else f"{alloc}/{idle}/{other}/{len(nodes)}"


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
    if "G" in codes:
        key.append(node.get("gres"))
    if "gresused" in codes:
        key.append(node.get("gres_used"))
    if "statecomplete" in codes:
        key.append(node["state"])
    return tuple(key)


COMMAND = Command("sinfo", "[-abdeilNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes] "
                  "[-S fields] [-o format] [-O Format] [--federation] [--local] [--json=data_parser]", [
    Opt("a", "all", NO, "show all partitions (including hidden and those not accessible)"),
    Opt("d", "dead", NO, "show only non-responding nodes"),
    Opt("e", "exact", NO, "group nodes only on exact match of configuration"),
    Opt("h", "noheader", NO, "no headers on output"),
    Opt("i", "iterate", REQ, "specify an iteration period", metavar="seconds", kind="int"),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("l", "long", NO, "long output - displays more information"),
    Opt("M", "clusters", REQ, "cluster(s) to issue commands to (this one, or all)", metavar="names"),
    Opt("n", "nodes", REQ, "report on specific node(s)", metavar="NODES"),
    Opt("N", "Node", NO, "Node-centric format"),
    Opt("o", "format", REQ, "format specification", metavar="format"),
    Opt("O", "Format", REQ, "long format specification", metavar="format"),
    Opt("p", "partition", REQ, "report on specific partition", metavar="PARTITION", kind="list"),
    Opt("r", "responding", NO, "report only responding nodes"),
    Opt("R", "list-reasons", NO, "list reason nodes are down or drained"),
    Opt("s", "summarize", NO, "report state summary only"),
    Opt("S", "sort", REQ, "comma separated list of fields to sort on", metavar="fields"),
    Opt("t", "states", REQ, "specify the what states of nodes to view", metavar="node_state", kind="list"),
    Opt("T", "reservation", NO, "show only reservation information"),
    Opt("v", "verbose", NO, "verbosity level", kind="count"),
    ignored(None, "federation", NO), ignored(None, "local", NO), ignored(None, "noconvert", NO),
    ignored(None, "future", NO), ignored(None, "hide", NO),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    "Help options:",
    *standard(None),
], operands=False, help_usage="[OPTIONS]")


def sinfo(argv: list[str]) -> int:
    """Show partitions and nodes (every -i seconds until interrupted)."""
    opts, _ = COMMAND.parse(argv)
    client = Client.for_options(opts)
    return every(opts.get("iterate"), lambda: render(client, opts))


def render(client: Client, opts: dict[str, Any]) -> str:
    noheader = bool(opts.get("noheader"))
    if opts.get("reservation"):
        from wattsched.cli import resv

        found = client.request("GET", "/v1/reservations")["reservations"]
        if wants_json(opts):
            return json_text({"reservations": found})
        return resv.sinfo_table(found, noheader) if found or not noheader else ""
    node_rows = client.request("GET", "/v1/nodes")["nodes"]
    part_rows = client.request("GET", "/v1/partitions")["partitions"]
    wanted_parts = set(split_list(opts.get("partition")))
    if opts.get("nodes"):
        from wattsched import hostlist

        wanted_nodes = set(hostlist.expand(opts["nodes"]))
        node_rows = [n for n in node_rows if n["name"] in wanted_nodes]
    wanted_states = split_list(opts.get("states"))
    if any(name.lower() == "all" for name in wanted_states):  # every state: no filter, as Slurm's
        wanted_states = []
    if wanted_states:
        given = ",".join(wanted_states)
        tests = [state_test(name) for name in given.replace("&", ",").split(",") if name]
        every = "&" in given  # down&drain: all of them, as Slurm's sinfo
        node_rows = [n for n in node_rows if (all if every else any)(test(n) for test in tests)]
    if opts.get("dead"):  # not responding: Slurm marks them with a trailing *
        node_rows = [n for n in node_rows if n["state_short"].endswith("*")]
    if opts.get("responding"):
        node_rows = [n for n in node_rows if not n["state_short"].endswith("*")]
    reasons = bool(opts.get("list_reasons"))
    if reasons:
        node_rows = [n for n in node_rows if n["reason"] and (n["drain"] or n["base_state"] == "DOWN")]
    if wants_json(opts):
        from wattsched import dataparser

        cluster = client.config.cluster_name
        parts = [p for p in part_rows if not wanted_parts or p["name"] in wanted_parts]
        return json_text(dataparser.document("sinfo", dataparser.sinfo_groups(parts, node_rows, cluster),
                                             ["sinfo", *sys.argv[1:]], cluster))
    node_view, long, summarize = bool(opts.get("Node")), bool(opts.get("long")), bool(opts.get("summarize"))
    named = fmt.format_from_fields(opts["Format"], BY_NAME, "node") if opts.get("Format") else None
    spec = opts.get("format") or named or (
        REASONS if reasons else SUMMARIZE if summarize else NODES_LONG if node_view and long else NODES
        if node_view else LONG if long else DEFAULT)
    parts = fmt.parse_format(spec)
    codes = {p.code for p in parts if isinstance(p, fmt.Column)}
    if opts.get("exact"):  # group only nodes of identical configuration
        codes |= {"c", "E"}
    lines = []
    if long:
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y"))
    if not noheader:
        lines.append(fmt.render_header(parts, {c: f[0] for c, f in FIELDS.items()}))
    by_name = {n["name"]: n for n in node_rows}
    from wattsched import hostlist

    rows: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for part in part_rows:
        if wanted_parts and part["name"] not in wanted_parts:
            continue
        members = [by_name[n] for n in hostlist.expand(part["nodes"]) if n in by_name]
        if node_view:
            groups = [[n] for n in members]
        elif summarize:  # one line per partition, its nodes counted by state in %F
            groups = [members] if members else []
        elif reasons:
            groups = _groups(members, codes | {"E"})
        else:
            groups = _groups(members, codes)
        if not groups and not node_view and not reasons and not wanted_states and not opts.get("nodes"):
            groups = [[]]
        rows.extend((part, group) for group in groups)
    if opts.get("sort"):
        rows = _sorted(rows, opts["sort"])
    for part, group in rows:
        row = fmt.compile_row(parts, _fields_of(part))
        lines.append(row(group))
    if reasons:  # one line per reason, not per partition
        lines = list(dict.fromkeys(lines))
    return "\n".join(lines)


def _fields_of(part: dict[str, Any]) -> Callable[[str], Callable[[Any], str]]:
    """The value function of each %-code in a partition's rows (functools.partial without its import)."""

    def field(code: str) -> Callable[[Any], str]:
        return _field_of(part, code)

    return field


def _field_of(part: dict[str, Any], code: str) -> Callable[[Any], str]:
    """A %-code's value for the rows of ``part`` (an unknown code prints as itself)."""
    return fmt.bound(FIELDS[code][1] if code in FIELDS else None, code, part)


def _sort_key(value: Callable[[list[dict[str, Any]], dict[str, Any]], str]) -> Callable[[tuple], tuple]:
    """Numbers in numeric order, before words in text order."""
    def key(row: tuple[dict[str, Any], list[dict[str, Any]]]) -> tuple:
        shown = value(row[1], row[0])
        return (not shown.isdigit(), int(shown) if shown.isdigit() else shown)
    return key


def _sorted(rows: list[tuple[dict[str, Any], list[dict[str, Any]]]], spec: str) -> list:
    """-S: %-code letters, each with an optional + (ascending) or - (descending), as squeue's."""
    for item in reversed(split_list([spec])):
        descending = item.startswith("-")
        code = item.lstrip("+-#")
        if code not in FIELDS:
            raise CLIError(f"Invalid sort specification: {item}")
        rows = sorted(rows, key=_sort_key(FIELDS[code][1]), reverse=descending)
    return rows


def _groups(members: list[dict[str, Any]], codes: set[str]) -> list[list[dict[str, Any]]]:
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for node in members:
        grouped.setdefault(_group_key(codes, node), []).append(node)
    return list(grouped.values())


def main() -> None:
    run("sinfo", lambda: sinfo(sys.argv[1:]))

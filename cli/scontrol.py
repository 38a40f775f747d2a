"""scontrol: show and update jobs, nodes, partitions, reservations and the configuration, in Slurm's
layout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from wattsched.cli.common import Client, CLIError, die, print_json

app = typer.Typer(add_completion=False, context_settings={"help_option_names": ["--help"],
                                                          "allow_interspersed_args": False})


def _ts(epoch: float | None, none: str = "Unknown") -> str:
    from wattsched import timefmt

    return timefmt.ts_str(epoch, none)


def _user(uid: int) -> str:
    from wattsched.auth import username

    return username(uid)


def job_lines(j: dict[str, Any]) -> list[str]:
    from wattsched import timefmt

    first = f"JobId={j['job_id']}"
    if j["array_task_id"] is not None:
        first += f" ArrayJobId={j['array_job_id']} ArrayTaskId={j['array_task_id']}"
        if j["array_throttle"]:
            first += f" ArrayTaskThrottle={j['array_throttle']}"
    first += f" JobName={j['name']}"
    state = "COMPLETING" if j["state"] == "COMPLETING" else j["state"]
    limit = timefmt.limit_str(j["time_limit_min"]) if j["time_limit_min"] is None else \
        timefmt.elapsed_str(j["time_limit_min"] * 60)
    end = j["end_time"] or (j["start_time"] + j["time_limit_min"] * 60 if j["start_time"] and
                            j["time_limit_min"] is not None else 0)
    hold_prio = 0 if j["hold"] else j["priority"]
    return [
        first,
        f"UserId={j['user']}({j['uid']}) GroupId={j['group']}({j['gid']}) MCS_label=N/A",
        f"Priority={hold_prio} Nice={j['nice']} Account={j['account'] or '(null)'} QOS=normal",
        f"JobState={state} Reason={j['reason']} Dependency={j['dependency'] or '(null)'}",
        f"Requeue={int(j['requeue'])} Restarts={j['restart_count']} BatchFlag={0 if j['interactive'] else 1} "
        f"Reboot=0 ExitCode={j['exit_code']}:{j['term_signal']}",
        f"RunTime={timefmt.elapsed_str(j['run_time_s'])} TimeLimit={limit} TimeMin=N/A",
        f"SubmitTime={_ts(j['submit_time'])} EligibleTime={_ts(j['eligible_time'])}",
        f"AccrueTime={_ts(j['eligible_time'])}",
        f"StartTime={_ts(j['start_time'] or j['expected_start'])} EndTime={_ts(end)} Deadline=N/A",
        f"Partition={j['partition']} AllocNode:Sid={j['submit_host'] or '(null)'}:0",
        f"ReqNodeList={','.join(j['req_nodes']) or '(null)'} ExcNodeList={','.join(j['exc_nodes']) or '(null)'}",
        f"NodeList={j['node_list'] or '(null)'}",
        f"BatchHost={j['batch_host'] or '(null)'}",
        f"NumNodes={j['num_nodes']} NumCPUs={j['num_cpus']} NumTasks={j['ntasks']} "
        f"CPUs/Task={j['cpus_per_task']} ReqB:S:C:T=0:0:*:*",
        f"TRES=cpu={j['num_cpus']},mem={j['alloc_mem_mb'] or j['mem_per_node_mb']}M,node={j['num_nodes']},"
        f"billing={j['num_cpus']}",
        f"MinCPUsNode={j['cpus_per_task']} MinMemoryNode={j['mem_per_node_mb']}M "
        f"MinMemoryCPU={j['mem_per_cpu_mb']}M MinTmpDiskNode=0",
        f"Features={'&'.join(j['features']) or '(null)'} DelayBoot=00:00:00",
        f"Reservation={j['reservation']}" if j["reservation"] else None,
        f"OverSubscribe={'NO' if j['exclusive'] else 'OK'} Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={j['command']}",
        f"WorkDir={j['work_dir']}",
        f"Comment={j['comment'] or '(null)'}" if j["comment"] else None,
        f"StdErr={j['std_err_path']}",
        f"StdIn={j['std_in']}",
        f"StdOut={j['std_out_path']}",
    ]


def node_lines(n: dict[str, Any]) -> list[str | None]:
    features = ",".join(n["features"]) or "(null)"
    lines = [
        f"NodeName={n['name']} Arch=x86_64 CoresPerSocket={n['cores_per_socket']}",
        f"CPUAlloc={n['alloc_cpus']} CPUEfctv={n['cpus']} CPUTot={n['cpus']} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        "Gres=(null)",
        f"NodeAddr={n['name']} NodeHostName={n['name']}",
        f"RealMemory={n['real_memory_mb']} AllocMem={n['alloc_mem_mb']} FreeMem=N/A Sockets={n['sockets']} "
        "Boards=1",
        f"State={n['state']} ThreadsPerCore={n['threads_per_core']} TmpDisk=0 Weight={n['weight']} Owner=N/A "
        "MCS_label=N/A",
        f"Partitions={','.join(n['partitions']) or '(null)'}",
        f"BootTime={_ts(n['boot_time'], 'None')} SlurmdStartTime={_ts(n['boot_time'], 'None')}",
        f"CfgTRES=cpu={n['cpus']},mem={n['real_memory_mb']}M,billing={n['cpus']}",
        f"AllocTRES={'cpu=' + str(n['alloc_cpus']) if n['alloc_cpus'] else ''}",
        "CapWatts=n/a",
        f"CurrentWatts={n['current_watts']} AveWatts={n['ave_watts']}",
        f"LowestJoules={n['lowest_joules']} ConsumedJoules={n['consumed_joules']}" if n["metered"] else None,
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if n["reason"]:
        lines.append(f"Reason={n['reason']} [{_user(n['reason_uid'])}@{_ts(n['reason_time'])}]")
    return lines


def partition_lines(p: dict[str, Any]) -> list[str]:
    from wattsched import timefmt

    max_time = "UNLIMITED" if p["max_time_min"] is None else timefmt.secs_to_str(p["max_time_min"] * 60)
    default_time = "NONE" if p["default_time_min"] is None else timefmt.secs_to_str(p["default_time_min"] * 60)
    return [
        f"PartitionName={p['name']}",
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if p['default'] else 'NO'} QoS=N/A",
        f"DefaultTime={default_time} DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"MaxNodes={p['max_nodes'] if p['max_nodes'] is not None else 'UNLIMITED'} MaxTime={max_time} "
        "MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={p['nodes']}",
        "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={p['state']} TotalCPUs={p['total_cpus']} TotalNodes={p['total_nodes']} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
    ]


def _emit(records: list[list[str | None]], oneliner: bool) -> None:
    blocks = []
    for lines in records:
        kept = [line for line in lines if line]
        blocks.append(" ".join(kept) if oneliner else "\n".join([kept[0], *("   " + line for line in kept[1:])]))
    print(("\n" if oneliner else "\n\n").join(blocks) + ("" if oneliner else "\n"))


def _pairs(args: list[str]) -> dict[str, str]:
    pairs = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise CLIError(f"Invalid input: {arg}  Request aborted")
        pairs[key.lower()] = value
    return pairs


def show(client: Client, args: list[str], oneliner: bool, as_json: bool) -> None:
    if not args:
        raise CLIError("too few arguments for keyword:show")
    what, rest = args[0].lower(), args[1:]
    if what in ("job", "jobs"):
        params = {"job": rest[:1] or None, "detail": "true"}
        jobs = client.request("GET", "/v1/jobs", params=params)["jobs"]
        if rest and not jobs:
            raise CLIError("Invalid job id specified")
        if as_json:
            return print_json({"jobs": jobs})
        if not jobs:
            print("No jobs in the system")
            return None
        return _emit([job_lines(j) for j in sorted(jobs, key=lambda j: j["job_id"])], oneliner)
    if what in ("node", "nodes"):
        nodes = client.request("GET", "/v1/nodes")["nodes"]
        if rest:
            from wattsched import hostlist

            wanted = set(hostlist.expand(rest[0]))
            nodes = [n for n in nodes if n["name"] in wanted]
            if not nodes:
                raise CLIError(f"Node {rest[0]} not found")
        if as_json:
            return print_json({"nodes": nodes})
        return _emit([node_lines(n) for n in nodes], oneliner)
    if what in ("partition", "partitions"):
        return _show_named(client, "partitions", "Partition", rest, partition_lines, oneliner, as_json)
    if what in ("reservation", "reservations", "res"):
        from wattsched.cli import resv

        return _show_named(client, "reservations", "Reservation", rest, resv.lines, oneliner, as_json,
                           "No reservations in the system")
    if what == "powercap":
        cap = client.request("GET", "/v1/powercap")
        if as_json:
            return print_json(cap)
        if not cap["enabled"]:
            print("Powercapping disabled.")
            return None
        print(f"MinWatts={cap['min_watts']} CurrentWatts={cap['current_watts']} PowerCap={cap['power_cap']} "
              f"AdjustedMaxWatts={cap['adjusted_max_watts']} MaxWatts={cap['max_watts']}")
        return None
    if what == "config":
        conf = client.request("GET", "/v1/config")
        if as_json:
            return print_json(conf)
        print(f"Configuration data as of {_ts(conf['time'])}")
        for key, value in conf["settings"]:
            print(f"{key:<23} = {value}")
        print(f"{'SLURM_CONF':<23} = {conf['source']}")
        return None
    raise CLIError(f"invalid entity:{args[0]} for keyword:show")


def _show_named(client: Client, kind: str, title: str, rest: list[str],
                lines: Callable[[dict[str, Any]], list[str]], oneliner: bool, as_json: bool,
                none_message: str = "") -> None:
    """``show partition [NAME]`` and ``show reservation [NAME]``: all records, or the named one."""
    found = client.request("GET", f"/v1/{kind}")[kind]
    if rest:
        found = [r for r in found if r["name"] == rest[0]]
        if not found:
            raise CLIError(f"{title} {rest[0]} not found")
    if as_json:
        return print_json({kind: found})
    if not found and none_message:
        print(none_message)
        return None
    return _emit([lines(r) for r in found], oneliner)


def update(client: Client, args: list[str]) -> None:
    pairs = _pairs(args)
    if "powercap" in pairs:
        if len(pairs) > 1:
            raise CLIError(f"Update of this parameter is not supported: {next(k for k in pairs if k != 'powercap')}")
        client.request("PATCH", "/v1/powercap", {"power_cap": pairs["powercap"]})
        return None
    if "reservationname" in pairs or "reservation" in pairs:
        from wattsched.cli import resv

        return resv.update(client, pairs)
    if "nodename" in pairs:
        node = pairs.pop("nodename")
        state = pairs.pop("state", "").lower()
        if state not in ("drain", "resume", "down", "idle", "undrain", "power_down", "power_down_asap", "power_up"):
            raise CLIError(f"Invalid node state specified: {state or '(none)'}")
        reason = pairs.pop("reason", "")
        if pairs:
            raise CLIError(f"Update of this parameter is not supported: {next(iter(pairs))}")
        client.request("PATCH", f"/v1/nodes/{node}", {"state": state, "reason": reason})
        return None
    job = pairs.pop("jobid", None) or pairs.pop("job", None)
    if job is None:
        raise CLIError("No valid entity in update command")
    body: dict[str, Any] = {}
    names = {"timelimit": "time_limit", "priority": "priority", "nice": "nice", "jobname": "name",
             "name": "name", "comment": "comment", "partition": "partition"}
    for key, value in pairs.items():
        if key not in names:
            raise CLIError(f"Update of this parameter is not supported: {key}")
        if key in ("priority", "nice"):
            try:
                body[names[key]] = int(value)
            except ValueError as exc:
                raise CLIError(f"Invalid {key} value: {value}") from exc
        else:
            body[names[key]] = value
    client.request("PATCH", f"/v1/jobs/{job}", body)
    return None


def create_or_delete(client: Client, command: str, args: list[str]) -> None:
    """``create reservation Key=Value...``; ``delete ReservationName=NAME`` or ``delete reservation NAME``."""
    from wattsched.cli import resv

    if args and args[0].lower() in ("reservation", "res", "reservations"):
        args = args[1:]
    if command == "create":
        resv.create(client, _pairs(args))
        return
    pairs = _pairs(args) if args and "=" in args[0] else {"reservationname": args[0]} if args else {}
    name = pairs.get("reservationname") or pairs.get("reservation")
    if not name:
        raise CLIError("too few arguments for keyword:delete")
    resv.delete(client, name)


@app.command()
def scontrol(
    args: Annotated[list[str], typer.Argument(help="COMMAND [ENTITY] [ARGS...]")],
    oneliner: Annotated[bool, typer.Option("-o", "--oneliner", help="One line per record.")] = False,
    details: Annotated[bool, typer.Option("-d", "--details", help="More details.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """View and modify wattsched's configuration and state."""
    client = Client()
    command, rest = args[0].lower(), args[1:]
    if command == "show":
        show(client, rest, oneliner, json_)
    elif command == "update":
        update(client, rest)
    elif command in ("create", "delete"):
        create_or_delete(client, command, rest)
    elif command in ("hold", "uhold", "release", "requeue"):
        if not rest:
            raise CLIError(f"too few arguments for keyword:{command}")
        for job in ",".join(rest).split(","):
            if command == "requeue":
                client.request("POST", f"/v1/jobs/{job}/requeue")
            elif command == "release":
                client.request("PATCH", f"/v1/jobs/{job}", {"release": True})
            else:
                me = client.request("GET", "/v1/ping")
                kind = "admin" if command == "hold" and me["admin"] else "user"
                client.request("PATCH", f"/v1/jobs/{job}", {"hold": kind})
    elif command == "token":
        pairs = _pairs(rest)
        params = {"username": pairs.get("username"), "lifespan": pairs.get("lifespan")}
        print(f"SLURM_JWT={client.request('POST', '/v1/token', params=params)['token']}")
    elif command == "ping":
        started = time.time()
        reply = client.request("GET", "/v1/ping")
        print(f"Slurmctld(primary) at {client.host} is {reply['status']} "
              f"({(time.time() - started) * 1000:.0f} ms)")
    elif command == "version":
        from wattsched import __version__

        print(f"wattsched {__version__}")
    else:
        raise CLIError(f"invalid keyword: {args[0]}")


def main() -> None:
    try:
        app(prog_name="scontrol")
    except CLIError as exc:
        die("scontrol", str(exc))

"""scontrol: show and update jobs, nodes, partitions, reservations and the configuration, in Slurm's
layout."""

from __future__ import annotations

import os
import sys
import time

from wattsched.cli.common import Client, CLIError, host_port, print_json, split_list, wants_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard
from wattsched.usertext import printable

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any


def _ts(epoch: float | None, none: str = "Unknown") -> str:
    from wattsched import timefmt

    return timefmt.ts_str(epoch, none)


def _user(uid: int) -> str:
    from wattsched.auth import username

    return username(uid)


def job_lines(j: dict[str, Any], details: bool = False) -> list[str | None]:
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
        f"Priority={hold_prio} Nice={j['nice']} Account={j['account'] or '(null)'} QOS={j.get('qos') or '(null)'}",
        f"JobState={state} Reason={j['reason']} Dependency={j['dependency'] or '(null)'}",
        f"Requeue={int(j['requeue'])} Restarts={j['restart_count']} BatchFlag={0 if j['interactive'] else 1} "
        f"Reboot=0 ExitCode={j['exit_code']}:{j['term_signal']}",
        f"RunTime={timefmt.elapsed_str(j['run_time_s'])} TimeLimit={limit} TimeMin=N/A",
        f"SubmitTime={_ts(j['submit_time'])} EligibleTime={_ts(j['eligible_time'])}",
        f"AccrueTime={_ts(j['eligible_time'])}",
        f"StartTime={_ts(j['start_time'] or j['expected_start'])} EndTime={_ts(end)} "
        f"Deadline={_ts(j.get('deadline'), 'N/A')}",
        f"Partition={j['partition']} AllocNode:Sid={j['submit_host'] or '(null)'}:0",
        f"ReqNodeList={','.join(j['req_nodes']) or '(null)'} ExcNodeList={','.join(j['exc_nodes']) or '(null)'}",
        f"NodeList={j['node_list'] or '(null)'}",
        *(_gres_details(j) if details else ()),
        f"BatchHost={j['batch_host'] or '(null)'}",
        f"NumNodes={j['num_nodes']} NumCPUs={j['num_cpus']} NumTasks={j['ntasks']} "
        f"CPUs/Task={j['cpus_per_task']} ReqB:S:C:T=0:0:*:*",
        f"TRES=cpu={j['num_cpus']},mem={j['alloc_mem_mb'] or j['mem_per_node_mb']}M,node={j['num_nodes']},"
        f"billing={j['num_cpus']}" + (f",gres/gpu={j['num_gpus']}" if j["num_gpus"] else ""),
        f"MinCPUsNode={max(j['cpus_per_task'], j['min_cpus_per_node'])} MinMemoryNode={j['mem_per_node_mb']}M "
        f"MinMemoryCPU={j['mem_per_cpu_mb']}M MinTmpDiskNode={j['tmp_mb']}",
        f"Features={'&'.join(j['features']) or '(null)'} DelayBoot=00:00:00",
        f"Reservation={j['reservation']}" if j["reservation"] else None,
        _cap_line(j) if j.get("min_cap_watts") is not None else None,
        f"OverSubscribe={'NO' if j['exclusive'] else 'OK'} Contiguous=0 Licenses={j.get('licenses') or '(null)'} "
        "Network=(null)",
        f"Command={j['command']}",
        f"WorkDir={j['work_dir']}",
        f"Comment={j['comment'] or '(null)'}" if j["comment"] else None,
        f"StdErr={j['std_err_path']}",
        f"StdIn={j['std_in']}",
        f"StdOut={j['std_out_path']}",
        *(f"{label}={j[key]}" for label, key in (("TresPerJob", "tres_per_job"), ("TresPerNode", "tres_per_node"),
                                                  ("TresPerTask", "tres_per_task"), ("TresBind", "tres_bind"))
          if j.get(key)),
        f"MailUser={j.get('mail_user') or j['user']} MailType={','.join(j['mail_type'])}"
        if j.get("mail_type") else None,
    ]


def _cap_line(j: dict[str, Any]) -> str:
    """Ours: the most its nodes may draw under their power limits now, and the lowest it has been."""
    now = "n/a" if j.get("cap_watts") is None else f"{j['cap_watts']:.0f}"
    return f"CapWatts={now} MinCapWatts={j['min_cap_watts']:.0f}"


def _fold_pending_tasks(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each array's pending tasks as one record, as Slurm keeps and shows them until they start:
    JobId the array's, ArrayTaskId their indexes (``0-7``), the rest the first task's."""
    from wattsched import arrayfold

    def pending_task(j: dict[str, Any]) -> tuple[tuple[int, str], int] | None:
        return (arrayfold.group(j["array_job_id"], j["hold"]), j["array_task_id"]) if j["state"] == "PENDING" and \
            j["array_task_id"] is not None else None

    folded = arrayfold.fold(jobs, pending_task, lambda j: (j["array_task_id"] or 0,))
    return [{**j, "job_id": j["array_job_id"], "array_task_id": arrayfold.task_ranges(sorted(ids))}
            if len(ids) > 1 else j for j, ids in folded]


def _gres_details(j: dict[str, Any]) -> list[str]:
    """scontrol -d: the job's GPUs in all, and each node's with their numbers there."""
    if not j.get("alloc_gpus"):
        return []
    lines = [f"JOB_GRES={j['job_gres']}"]
    for node, detail in zip(j["alloc_gpus"], j["gres_detail"], strict=True):
        lines.append(f"  Nodes={node} Mem={j['alloc_mem_mb']} GRES={detail}")
    return lines


def node_lines(n: dict[str, Any], details: bool = False) -> list[str | None]:
    features = ",".join(n["features"]) or "(null)"
    lines = [
        f"NodeName={n['name']} Arch=x86_64 CoresPerSocket={n['cores_per_socket']}",
        f"CPUAlloc={n['alloc_cpus']} CPUEfctv={n['cpus']} CPUTot={n['cpus']} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={n.get('gres', '(null)')}",
        f"GresDrain=N/A GresUsed={n.get('gres_used', '(null)')}" if details and n.get("gpus") else None,
        f"NodeAddr={n.get('address', n['name'])} NodeHostName={n.get('hostname', n['name'])}",
        f"RealMemory={n['real_memory_mb']} AllocMem={n['alloc_mem_mb']} FreeMem=N/A Sockets={n['sockets']} "
        "Boards=1",
        f"State={n['state']} ThreadsPerCore={n['threads_per_core']} TmpDisk={n['tmp_disk_mb']} Weight={n['weight']} "
        "Owner=N/A "
        "MCS_label=N/A",
        f"Partitions={','.join(n['partitions']) or '(null)'}",
        f"BootTime={_ts(n['boot_time'], 'None')} SlurmdStartTime={_ts(n['boot_time'], 'None')}",
        f"CfgTRES=cpu={n['cpus']},mem={n['real_memory_mb']}M,billing={n['cpus']}"
        + (f",gres/gpu={n['gpus']}" if n.get("gpus") else ""),
        "AllocTRES=" + ",".join(([f"cpu={n['alloc_cpus']}"] if n["alloc_cpus"] else [])
                                + ([f"gres/gpu={n['alloc_gpus']}"] if n.get("alloc_gpus") else [])),
        f"CapWatts={round(n['cap_watts'])}" if n.get("cap_watts") is not None else "CapWatts=n/a",
        # Slurm's words for a power not known; ours says why on a line of its own, as Reason does
        "CurrentWatts=n/a AveWatts=n/a" if n.get("energy_error") else
        f"CurrentWatts={n['current_watts']} AveWatts={n['ave_watts']}",
        f"LowestJoules={n['lowest_joules']} ConsumedJoules={n['consumed_joules']}" if n["metered"] else None,
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if n.get("instance_id") or n.get("instance_type"):  # (Slurm's line, where either is set)
        lines.append(" ".join(f"{key}={n[field]}" for key, field in (("InstanceId", "instance_id"),
                                                                     ("InstanceType", "instance_type")) if n[field]))
    if n["reason"]:
        lines.append(f"Reason={n['reason']} [{_user(n['reason_uid'])}@{_ts(n['reason_time'])}]")
    if n.get("energy_error"):
        lines.append(f"EnergyReason={n['energy_error']}")
    if n.get("limit_error"):
        lines.append(f"CapWattsReason={n['limit_error']}")
    return lines


def _allow_deny(p: dict[str, Any], key: str, label: str) -> str:
    """Slurm's one field for a partition's allow and deny lists: Allow..., unless only a deny list is set."""
    allow = p.get(f"allow_{key}") or "ALL"
    return f"Deny{label}={p[f'deny_{key}']}" if allow == "ALL" and p.get(f"deny_{key}") else f"Allow{label}={allow}"


def _yes(record: dict[str, Any], key: str) -> str:
    return "YES" if record.get(key) else "NO"


def partition_lines(p: dict[str, Any]) -> list[str | None]:
    from wattsched import timefmt

    max_time = "UNLIMITED" if p["max_time_min"] is None else timefmt.secs_to_str(p["max_time_min"] * 60)
    default_time = "NONE" if p["default_time_min"] is None else timefmt.secs_to_str(p["default_time_min"] * 60)
    return [
        f"PartitionName={p['name']}",
        f"AllowGroups={p.get('allow_groups') or 'ALL'} {_allow_deny(p, 'accounts', 'Accounts')} "
        f"{_allow_deny(p, 'qos', 'Qos')}",
        f"AllocNodes=ALL Default={'YES' if p['default'] else 'NO'} QoS={p.get('qos') or 'N/A'}",
        f"DefaultTime={default_time} DisableRootJobs={_yes(p, 'disable_root_jobs')} ExclusiveUser=NO GraceTime=0 "
        "Hidden=NO",
        f"MaxNodes={p['max_nodes'] if p['max_nodes'] is not None else 'UNLIMITED'} MaxTime={max_time} "
        f"MinNodes={p.get('min_nodes', 0)} LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={p['nodes']}",
        f"PriorityJobFactor={p.get('priority_job_factor', 1)} PriorityTier={p.get('priority_tier', 1)} "
        f"RootOnly={_yes(p, 'root_only')} ReqResv={_yes(p, 'req_resv')} OverSubscribe={p.get('over_subscribe', 'NO')}",
        f"OverTimeLimit={'NONE' if p.get('over_time_limit') is None else p['over_time_limit']} "
        f"PreemptMode={p.get('preempt_mode') or 'OFF'}",
        f"State={p['state']} TotalCPUs={p['total_cpus']} TotalNodes={p['total_nodes']} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
    ]


def _emit(records: Sequence[Sequence[str | None]], oneliner: bool) -> None:
    blocks = []
    for lines in records:
        kept = [printable(line) for line in lines if line]
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


def token(client: Client, args: list[str]) -> int:
    """scontrol token [lifespan=<secs>|infinite] [username=<name>], as Slurm's; and ours, token revoke."""
    if args[:1] == ["revoke"]:
        pairs = _pairs(args[1:])
        if set(pairs) != {"username"}:
            raise CLIError("usage: scontrol token revoke username=<name>")
        print(client.request("POST", "/v1/token/revoke", params={"username": pairs["username"]})["result"])
        return 0
    params: dict[str, str] = {}
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lower() == "lifespan" and value:
            params["lifespan"] = str(2**31 - 2) if value.lower() in ("infinite", "unlimited") else value
        elif key.lower() == "username" and value:
            params["username"] = value
        else:
            print(f"Invalid option: `{arg}`", file=sys.stderr)
            return 1
    try:
        reply = client.request("POST", "/v1/token", params=params)
    except CLIError as exc:  # Slurm's words: the API call's error with the controller's reason
        print(f"scontrol: error: slurm_fetch_token: error with request: {exc}", file=sys.stderr)
        return 1
    print(f"SLURM_JWT={reply['token']}")
    return 0


def show(client: Client, args: list[str], oneliner: bool, as_json: bool, details: bool = False) -> None:
    if not args:
        raise CLIError("too few arguments for keyword:show")
    # Slurm's show takes ENTITY=NAME as ENTITY NAME
    head, eq, value = args[0].partition("=")
    what, rest = head.lower(), ([value] if eq else []) + args[1:]
    if what in ("job", "jobs"):
        params = {"job": rest[:1] or None, "detail": "true"}
        jobs = client.request("GET", "/v1/jobs", params=params)["jobs"]
        if rest and not jobs:
            raise CLIError("Invalid job id specified")
        if as_json:
            return _print_parsed(client, "jobs", jobs)
        if not jobs:
            print("No jobs in the system")
            return None
        # an array asked for by its id (or every job): its pending tasks in one record; a task asked
        # for by its index or its own job id is shown alone
        if not rest or all(str(j["array_job_id"]) == rest[0] for j in jobs):
            jobs = _fold_pending_tasks(jobs)
        return _emit([job_lines(j, details) for j in sorted(jobs, key=lambda j: j["job_id"])], oneliner)
    if what in ("node", "nodes"):
        nodes = client.request("GET", "/v1/nodes")["nodes"]
        if rest:
            from wattsched import hostlist

            wanted = set(hostlist.expand(rest[0]))
            nodes = [n for n in nodes if n["name"] in wanted]
            if not nodes:
                raise CLIError(f"Node {rest[0]} not found")
        if as_json:
            return _print_parsed(client, "nodes", nodes)
        return _emit([node_lines(n, details) for n in nodes], oneliner)
    if what in ("step", "steps"):
        return _show_steps(client, rest, oneliner, as_json)
    if what in ("license", "licenses", "lic"):
        return _show_licenses(client, rest[0] if rest else None, oneliner, as_json)
    if what in ("hostnames", "hostlist", "hostlistsorted"):
        return _show_hosts(what, rest)
    if what in ("partition", "partitions"):
        return _show_named(client, "partitions", "Partition", rest, partition_lines, oneliner, as_json)
    if what in ("reservation", "reservations", "res"):
        from wattsched.cli import resv

        return _show_named(client, "reservations", "Reservation", rest, resv.lines, oneliner, as_json,
                           "No reservations in the system")
    if what == "assoc_mgr":
        from wattsched.cli import assocmgr

        data = client.request("GET", "/v1/assoc_mgr")
        if as_json:
            return print_json(data)
        print("\n".join(assocmgr.lines(data, *assocmgr.parse_filters(rest), oneliner=oneliner)))
        return None
    if what == "powercap":
        cap = client.request("GET", "/v1/powercap")
        if as_json:
            return print_json(cap)
        if not cap["enabled"]:
            print("Powercapping disabled.")
            return None
        print(f"MinWatts={cap['min_watts']} CurrentWatts={cap['current_watts']} PowerCap={cap['power_cap']} "
              f"AdjustedMaxWatts={cap['adjusted_max_watts']} MaxWatts={cap['max_watts']}")
        for step in cap.get("schedule", []):
            flags = f" Flags={step['flags']}" if step["flags"] else ""
            print(f"PowerCapStep={step['step_id']} PowerCap={step['power_cap']} Watts={step['cap_watts']} "
                  f"StartTime={_ts(step['start'])} EndTime={_ts(step['end'], 'None')}{flags} Source={step['source']}")
        return None
    if what == "config":
        conf = client.request("GET", "/v1/config")
        if as_json:
            return print_json(conf)
        print(f"Configuration data as of {_ts(conf['time'])}")
        for key, value in conf["settings"]:
            print(f"{key:<23} = {value}")
        print(f"{'SLURM_CONF':<23} = {conf['source']}")
        print(f"{'SLURM_VERSION':<23} = {conf['slurm_version']}")
        print(f"{'WATTSCHED_VERSION':<23} = {conf['wattsched_version']}")
        return None
    raise CLIError(f"invalid entity:{args[0]} for keyword:show")


def _print_parsed(client: Client, kind: str, records: list[dict[str, Any]]) -> None:
    """scontrol show ... --json in Slurm's data_parser layout."""
    from wattsched import dataparser

    cluster = client.config.cluster_name
    convert = {"jobs": dataparser.queue_job, "nodes": dataparser.node, "partitions": dataparser.partition,
               "reservations": dataparser.reservation}[kind]
    items = [convert(r, cluster) for r in records]
    print_json(dataparser.document(kind, items, ["scontrol", *sys.argv[1:]], cluster))


def _show_steps(client: Client, rest: list[str], oneliner: bool, as_json: bool) -> None:
    """``show step[s] [JOB[.STEP]]``: the running steps, as Slurm lays them out."""
    job_ref, _, step_ref = (rest[0] if rest else "").partition(".")
    jobs = client.request("GET", "/v1/jobs", params={"job": [job_ref] if job_ref else None, "detail": "true"})["jobs"]
    found = [(j, s) for j in sorted(jobs, key=lambda j: j["job_id"]) for s in j["steps"]
             if s["state"] == "RUNNING" and (not step_ref or s["step_id"] == step_ref)]
    if as_json:
        return print_json({"steps": [dict(s, job_id=j["job_id"]) for j, s in found]})
    if not found:
        if rest:
            raise CLIError("Invalid job id specified")
        print("No job steps in the system")
        return None
    from wattsched import timefmt

    records = [[f"StepId={j['job_id']}.{s['step_id']} UserId={j['uid']} StartTime={_ts(s['start_time'])} "
                f"TimeLimit={timefmt.limit_str(j['time_limit_min'])}",
                f"State={s['state']} Partition={j['partition']} NodeList={s['nodes']}",
                f"Nodes={len(_expand(s['nodes']))} CPUs={j['num_cpus']} Tasks={s['ntasks']} Name={s['name']} "
                "Network=(null)",
                f"TRES=cpu={j['num_cpus']},node={len(_expand(s['nodes']))}",
                "ResvPorts=(null)",
                f"CPUFreqReq={j['cpu_freq'] or 'Default'} Dist=Block"] for j, s in found]
    return _emit(records, oneliner)


def _expand(expr: str) -> list[str]:
    from wattsched import hostlist

    return hostlist.expand(expr) if expr else []


def _show_licenses(client: Client, name: str | None, oneliner: bool, as_json: bool) -> None:
    """Slurm's show licenses: by name; one asked for by a name there is not prints nothing."""
    found = client.request("GET", "/v1/licenses")["licenses"]
    if name is not None:
        found = [lic for lic in found if lic["name"] == name]
    if as_json:
        from wattsched import dataparser

        return print_json(dataparser.document("licenses", [dataparser.license_record(lic) for lic in found],
                                              ["scontrol", *sys.argv[1:]], client.config.cluster_name,
                                              {"last_update": dataparser.number(int(time.time()))}))
    if not found and name is None:
        print("No licenses configured in Slurm.")
    for lic in found:
        sep = " " if oneliner else "\n    "
        print(f"LicenseName={lic['name']}{sep}Total={lic['total']} Used={lic['used']} Free={lic['free']} "
              f"Reserved={lic['reserved']} Remote=no")
    return None


def _show_hosts(what: str, rest: list[str]) -> None:
    """``show hostnames LIST`` (one name a line), ``show hostlist[sorted] NAMES`` (compressed), as
    Slurm's scontrol: hostnames takes SLURM_NODELIST by default and, like Slurm's, says what is wrong
    with a list without failing the command (tools such as Slurm's testsuite rely on its exit code 0);
    the encoders need their argument and fail on a bad one."""
    from wattsched import hostlist

    if what == "hostnames":
        text = rest[0] if rest else os.environ.get("SLURM_NODELIST", "")
        if not text:
            sys.stderr.write("scontrol: error: host list is empty\n")
            return None
    elif not rest:
        raise CLIError("invalid encode argument")
    else:
        text = rest[0]
    try:
        names = hostlist.expand(text, limit=1 << 20)
    except ValueError as exc:
        if what == "hostnames":
            sys.stderr.write(f"Invalid hostlist: {text}\n")
            return None
        raise CLIError(f"Invalid hostlist: {exc}") from exc
    if what == "hostnames":
        if names:
            print("\n".join(names))
    else:
        print(hostlist.compress(sorted(names) if what == "hostlistsorted" else names))
    return None


def _show_named(client: Client, kind: str, title: str, rest: list[str],
                lines: Callable[[dict[str, Any]], Sequence[str | None]], oneliner: bool, as_json: bool,
                none_message: str = "") -> None:
    """``show partition [NAME]`` and ``show reservation [NAME]``: all records, or the named one."""
    found = client.request("GET", f"/v1/{kind}")[kind]
    if rest:
        found = [r for r in found if r["name"] == rest[0]]
        if not found:
            raise CLIError(f"{title} {rest[0]} not found")
    if as_json:
        return _print_parsed(client, kind, found)
    if not found and none_message:
        print(none_message)
        return None
    return _emit([lines(r) for r in found], oneliner)


def _is_skip(arg: str) -> bool:
    """scontrol's bare ``skip`` of a reservation update (``sk`` at least, as Slurm's matches it)."""
    return "=" not in arg and len(arg) >= 2 and "skip".startswith(arg.lower())


def update(client: Client, args: list[str]) -> None:
    skip = any(_is_skip(arg) for arg in args)
    pairs = _pairs([arg for arg in args if not _is_skip(arg)])
    if skip and "reservationname" not in pairs and "reservation" not in pairs:
        raise CLIError(f"Invalid input: {next(arg for arg in args if _is_skip(arg))}  Request aborted")
    if "powercap" in pairs:
        if "@" in pairs["powercap"] or len(pairs) > 1:  # a step of the schedule: the controller checks its keys
            step = {"power_cap": pairs.pop("powercap"), "end_time": pairs.pop("endtime", ""),
                    "duration": pairs.pop("duration", ""), "flags": pairs.pop("flags", "")}
            if pairs:
                raise CLIError(f"Update of this parameter is not supported: {next(iter(pairs))}")
            client.request("POST", "/v1/powercap/schedule", step)
            return None
        client.request("PATCH", "/v1/powercap", {"power_cap": pairs["powercap"]})
        return None
    if "reservationname" in pairs or "reservation" in pairs:
        from wattsched.cli import resv

        return resv.update(client, pairs, skip)
    if "partitionname" in pairs and "jobid" not in pairs and "job" not in pairs:
        return _update_partition(client, args)
    if "nodename" in pairs:
        node = pairs.pop("nodename")
        state = pairs.pop("state", "").lower()
        instance = {key: pairs.pop(name) for key, name in (("instance_id", "instanceid"),
                                                           ("instance_type", "instancetype"),
                                                           ("cap_watts", "capwatts")) if name in pairs}
        if state not in ("drain", "resume", "down", "idle", "undrain", "power_down", "power_down_asap",
                         "power_up") and not (instance and not state):
            raise CLIError(f"Invalid node state specified: {state or '(none)'}")
        reason = pairs.pop("reason", "")
        if pairs:
            raise CLIError(f"Update of this parameter is not supported: {next(iter(pairs))}")
        client.request("PATCH", f"/v1/nodes/{node}", {"state": state, "reason": reason, **instance})
        return None
    job = pairs.pop("jobid", None) or pairs.pop("job", None)
    if job is None:
        raise CLIError("No valid entity in update command")
    body: dict[str, Any] = {}
    names = {"timelimit": "time_limit", "priority": "priority", "nice": "nice", "jobname": "name",
             "name": "name", "comment": "comment", "partition": "partition", "admincomment": "admin_comment",
             "tresbind": "tres_bind", "licenses": "licenses", "license": "licenses", "mailtype": "mail_type",
             "mailuser": "mail_user"}
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


_ENTITIES = ("NodeName", "PartitionName", "ReservationName")


def _entity(tag: str) -> str | None:
    """The entity a keyword names, as Slurm's scontrol reads it: at least three letters of one."""
    return next((e for e in _ENTITIES if len(tag) >= 3 and e.lower().startswith(tag.lower())), None)


def create_or_delete(client: Client, command: str, args: list[str]) -> None:
    """``create`` a reservation or a partition, named by the first argument that names an entity
    (``reservation``, ``res``, ``PartitionName=p``...), as Slurm's scontrol; ``delete
    ReservationName=NAME``, ``delete reservation NAME``, ``delete PartitionName=NAME`` (or ``partition
    NAME``), and ours, ``delete PowerCapStep=ID`` (a step of the cap's schedule)."""
    from urllib.parse import quote

    from wattsched.cli import resv

    if command == "create":
        entity = next((e for e in (_entity(a.split("=", 1)[0]) for a in args) if e), None)
        rest = [a for a in args if "=" in a or not _entity(a)]  # without the bare entity word
        if entity == "ReservationName":
            return resv.create(client, _pairs(rest))
        if entity == "PartitionName":
            return _create_partition(client, rest)
        if entity == "NodeName":
            raise CLIError("Creating nodes is not supported here: add them to slurm.conf and run scontrol reconfigure")
        raise CLIError(f"Invalid creation entity: {args[0] if args else ''}")
    if len(args) == 1 and "=" in args[0]:
        tag, _, name = args[0].partition("=")
    elif len(args) == 2:
        tag, name = args
    else:
        raise CLIError("Proper format is 'delete <ENTITY>=<ID>' or 'delete <ENTITY> <ID>'")
    if tag.lower() == "powercapstep":
        client.request("DELETE", f"/v1/powercap/schedule/{quote(name, safe='')}")
        return None
    entity = _entity(tag)
    if entity == "ReservationName":
        return resv.delete(client, name)
    if entity == "PartitionName":
        try:
            client.request("DELETE", f"/v1/partitions/{quote(name, safe='')}")
        except CLIError as exc:
            raise CLIError(f"delete_partition {args[0]}: {exc}") from exc
        return None
    if entity == "NodeName":
        raise CLIError("Deleting nodes is not supported here: remove them from slurm.conf and run scontrol reconfigure")
    raise CLIError(f"Invalid deletion entity: {args[0]}")


def _partition_settings(args: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """``PartitionName=NAME Key=Value...`` as (name, settings in order); ``Nodes+=``, ``Nodes-=`` kept
    as the keys ``Nodes+``, ``Nodes-``."""
    name, settings = None, []
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise CLIError(f"Invalid input: {arg}  Request aborted")
        if len(key) >= 2 and "partitionname".startswith(key.lower()):
            name = value
        else:
            settings.append((key, value))
    if name is None:
        raise CLIError("PartitionName must be given.")
    return name, settings


def _create_partition(client: Client, args: list[str]) -> None:
    name, settings = _partition_settings(args)
    if name.upper() == "DEFAULT":
        raise CLIError('PartitionName cannot be "DEFAULT".')
    try:
        client.request("POST", "/v1/partitions", {"name": name, "settings": settings})
    except CLIError as exc:
        raise CLIError(f"Error creating the partition: {exc}") from exc


def _update_partition(client: Client, args: list[str]) -> None:
    from urllib.parse import quote

    name, settings = _partition_settings(args)
    if not settings:
        raise CLIError("No changes specified")
    try:
        client.request("PATCH", f"/v1/partitions/{quote(name, safe='')}", {"settings": settings})
    except CLIError as exc:
        raise CLIError(f"slurm_update error: {exc}") from exc


COMMAND = Command("scontrol", "[<OPTION>] [<COMMAND>]", [
    Opt("a", "all", NO, "equivalent to \"all\" command"),
    Opt("d", "details", NO, "equivalent to \"details\" command"),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("M", "clusters", REQ, "cluster to issue commands to (this one)", metavar="cluster_name"),
    Opt("o", "oneliner", NO, "equivalent to \"oneliner\" command"),
    Opt("Q", "quiet", NO, "equivalent to \"quiet\" command"),
    Opt("v", "verbose", NO, "equivalent to \"verbose\" command", kind="count"),
    ignored(None, "federation", NO), ignored("F", "future", NO), ignored(None, "hide", NO),
    ignored(None, "local", NO), ignored(None, "sibling", NO), ignored("u", "uid", REQ),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    *standard(),
], epilog="""  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode. It will process commands as entered until explicitly
  terminated.

    Valid <COMMAND> values are:
     create <SPECIFICATIONS>  create a new partition or reservation.
     delete <SPECIFICATIONS>  delete the specified partition or reservation.
     hold <job_list>          prevent specified job from starting.
     listpids <job_id<.step>> List pids associated with a given job step (on this node).
     ping                     print status of slurmctld daemons.
     reconfigure              have the daemons read the configuration file again.
     release <job_list>       permit specified job to start (see hold).
     requeue <job_id>         re-queue a batch job.
     resume <job_list>        resume previously suspended job (see suspend).
     show <ENTITY> [<ID>]     display state of identified entity, default is all records.
                              ENTITY: job, step, node, partition, reservation, config, powercap, assoc_mgr,
                              licenses, hostnames, hostlist, hostlistsorted.
     suspend <job_list>       suspend specified job (see resume).
     takeover [<INDEX>]       ask slurmctld's backup at INDEX (default 1) to take control.
     token [lifespan=<secs>] [username=<name>]  get a JWT for this user.
     token revoke username=<name>  end every token of that user issued until now (ours; admins).
     uhold <job_list>         place user hold on specified job (see hold).
     update <SPECIFICATIONS>  update job, node, partition, reservation or powercap
                              configuration.
     version                  display tool version number.
     wait_job <job_id>        wait until the nodes allocated to the job are booted and usable.""")


def scontrol(argv: list[str]) -> int:
    """View and modify wattsched's configuration and state."""
    opts, args = COMMAND.parse(argv)
    client = Client.for_options(opts)
    if args:
        return execute(client, args, opts)
    # no command: scontrol's interactive mode, one command a line (a prompt only on a terminal)
    import shlex  # here: shlex (with re) costs every other scontrol call ~8 ms to import

    code = 0
    while True:
        if sys.stdin.isatty():
            sys.stdout.write("scontrol: ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return code
        words = shlex.split(line)
        if not words:
            continue
        if words[0].lower() in ("exit", "quit"):
            return code
        try:
            code = execute(client, words, opts) or code
        except CLIError as exc:
            sys.stderr.write(f"scontrol: error: {exc}\n")
            code = 1


def execute(client: Client, args: list[str], opts: dict[str, Any]) -> int:
    command, rest = args[0].lower(), args[1:]
    oneliner, as_json = bool(opts.get("oneliner")), wants_json(opts)
    if command == "show":
        show(client, rest, oneliner, as_json, bool(opts.get("details")))
    elif command == "update":
        update(client, rest)
    elif command in ("create", "delete"):
        create_or_delete(client, command, rest)
    elif command in ("hold", "uhold", "release", "requeue", "suspend", "resume"):
        if not rest:
            raise CLIError(f"too few arguments for keyword:{command}")
        for job in split_list(rest):
            if command in ("suspend", "resume"):
                client.request("POST", f"/v1/jobs/{job}/suspend", params={"resume": command == "resume"})
            elif command == "requeue":
                client.request("POST", f"/v1/jobs/{job}/requeue")
            elif command == "release":
                client.request("PATCH", f"/v1/jobs/{job}", {"release": True})
            else:
                me = client.request("GET", "/v1/ping")
                kind = "admin" if command == "hold" and me["admin"] else "user"
                client.request("PATCH", f"/v1/jobs/{job}", {"hold": kind})
    elif command == "token":
        return token(client, rest)
    elif command == "ping":
        return ping(client, as_json)
    elif command == "takeover":
        return takeover(client, rest)
    elif command == "version":
        from wattsched import version_line

        print(version_line())
    elif command == "listpids":
        return listpids(rest[0] if rest else None, rest[1] if len(rest) > 1 else None)
    elif command == "wait_job":
        return wait_job(client, rest)
    elif command in ("reconfigure", "reconfig"):
        client.request("POST", "/v1/reconfigure")
    elif command == "shutdown":
        return shutdown(client, rest)
    elif command in ("reboot", "reboot_nodes"):
        raise CLIError(f"{command} is not supported here: restart the controller (systemctl restart "
                       "wattsched-controller) to apply a new configuration")
    else:
        raise CLIError(f"invalid keyword: {args[0]}")
    return 0


def listpids(ref: str | None, node: str | None = None) -> int:
    """``listpids [job[.step] [node]]``: this node's processes of the caller's jobs (all users' for
    root), found by the SLURM_JOB_ID and SLURM_STEP_ID their step daemon gave them (and, on a host of
    virtual nodes, SLURMD_NODENAME: the node asked for); a process whose environment the caller may
    not read is not theirs to list. Slurm's header first, Slurm's words when there is none."""
    job_want, _, step_want = (ref or "").partition(".")
    if job_want and not job_want.isdigit():
        raise CLIError(f"Invalid job id specified: {ref}")
    print(f"{'PID':<8} {'JOBID':<8} {'STEPID':<8} {'LOCALID':<7} {'GLOBALID':<8}")
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                env = dict(item.split(b"=", 1) for item in handle.read(1 << 20).split(b"\0") if b"=" in item)
        except OSError:
            continue
        job = env.get(b"SLURM_JOB_ID", b"").decode()
        if not job or (job_want and job != job_want):
            continue
        step = env.get(b"SLURM_STEP_ID", b"batch").decode()
        if (step_want and step != step_want) or (node and env.get(b"SLURMD_NODENAME", node.encode()).decode() != node):
            continue
        rows.append((int(name), job, step, env.get(b"SLURM_LOCALID", b"0").decode(),
                     env.get(b"SLURM_PROCID", b"0").decode()))
    if not rows:
        where = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
        sys.stdout.flush()
        sys.stderr.write(f"StepId={job_want}.{step_want} does not exist on node {where}.\n" if step_want else
                         f"There are no steps for job {job_want} on node {where}.\n" if job_want else
                         "No job steps exist on this node.\n")
        return 1
    for pid, job, step, local, glob in sorted(rows):
        print(f"{pid:<8} {job:<8} {step:<8} {local:<7} {glob:<8}")
    return 0


def wait_job(client: Client, rest: list[str]) -> int:
    """``wait_job ID``: block until the job's nodes are up and it runs (or it has ended)."""
    if not rest or not rest[0].split("_")[0].isdigit():
        raise CLIError("too few arguments for keyword:wait_job")
    while True:
        jobs = client.request("GET", "/v1/jobs", params={"job": [rest[0]]})["jobs"]
        if not jobs:
            raise CLIError("Invalid job id specified")
        state = jobs[0]["state"]
        if state not in ("PENDING", "CONFIGURING"):
            return 0 if state in ("RUNNING", "COMPLETING", "COMPLETED") else 1
        time.sleep(0.5)


def ping(client: Client, as_json: bool) -> int:
    """Each controller UP or DOWN, by its place in SlurmctldHost, as Slurm prints them; 0 if any is UP."""
    names = client.config.controller_names if len(client.controllers) == len(client.config.controller_names) \
        else [host for host, _port in client.controllers]
    pings = []
    for index, name in enumerate(names):
        started = time.monotonic()
        try:
            client.only(index).request("GET", "/v1/ping", timeout=5.0)
            up = True
        except CLIError:
            up = False
        mode = "primary" if index == 0 else "backup" if len(names) == 2 else f"backup{index}"
        pings.append({"hostname": name, "pinged": "UP" if up else "DOWN", "responding": up,
                      "latency": int((time.monotonic() - started) * 1e6), "mode": mode, "primary": index == 0})
    if as_json:
        print_json({"pings": pings})
    else:
        for entry in pings:
            print(f"Slurmctld({entry['mode']}) at {entry['hostname']} is {entry['pinged']}")
        if not all(entry["responding"] for entry in pings) and os.getuid() == 0:
            print("*****************************************\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
                  "*****************************************")
    return 0 if any(entry["responding"] for entry in pings) else 1


def takeover(client: Client, rest: list[str]) -> int:
    """scontrol takeover [INDEX]: the backup at INDEX (default 1) takes control. Errors are worded
    and printed as Slurm's scontrol prints them (no "scontrol: error:" before them)."""
    count = len(client.controllers)
    if len(rest) > 1:
        return _said("takeover: too many arguments")
    if count < 2:
        return _said("takeover: no backup controller defined")
    index = _atoi(rest[0]) if rest else 1
    if not 1 <= index < count:
        return _said(f"takeover: invalid backup controller index ({index})")
    try:
        reply = client.only(index).request("POST", "/v1/takeover")
    except CLIError as exc:
        return _said(f"slurm_takeover error: {exc}")
    if not reply.get("result", "").endswith("handed over"):  # silent when done, as Slurm's
        print(f"takeover: {reply.get('result', '')}", file=sys.stderr)
    return 0


def shutdown(client: Client, rest: list[str]) -> int:
    """scontrol shutdown [slurmctld|controller]: every controller stops (the backups told first, as
    Slurm's scontrol does), and, unless only the controllers are named, every slurmd before them."""
    if len(rest) > 1:
        return _said("too many arguments for keyword:shutdown")
    if rest and rest[0] not in ("slurmctld", "controller"):
        return _said(f"invalid shutdown argument:{rest[0]}")
    params = {"slurmds": "false" if rest else "true"}
    told: list[tuple[str, int]] = []  # every daemon that took the order
    for index in [*range(1, len(client.controllers)), 0]:
        try:
            reply = client.only(index).request("POST", "/v1/shutdown", params=params)
        except CLIError as exc:
            if index == 0:
                return _said(f"slurm_shutdown error: {exc}")
            continue  # a backup that is down has nothing to stop
        told += [client.controllers[index], *(host_port(url) for url in reply.get("agents", []))]
    _wait_gone(told)
    return 0


SHUTDOWN_WAIT_S = 60.0


def _wait_gone(daemons: list[tuple[str, int]]) -> None:
    """Return once every daemon told to stop has stopped (its port refuses connections), for at
    most SHUTDOWN_WAIT_S: Slurm's scontrol returns at once, but then a script that starts the
    daemons again at once (Slurm's test suite does) may still reach the old ones."""
    import socket

    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    for host, port in daemons:
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=1).close()
            except OSError:
                break
            time.sleep(0.1)


def _said(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def _atoi(text: str) -> int:
    """C's atoi, as Slurm reads the index: the leading digits (with a sign), else 0."""
    digits = text.strip()
    sign = -1 if digits[:1] == "-" else 1
    digits = digits.lstrip("+-")
    end = next((i for i, char in enumerate(digits) if not char.isdigit()), len(digits))
    return sign * int(digits[:end] or 0)


def main() -> None:
    run("scontrol", lambda: scontrol(sys.argv[1:]))

"""sacct: accounting records of jobs and their steps, with Slurm's fields, widths and formats."""

from __future__ import annotations

import operator
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from wattsched.cli import fmt
from wattsched.cli.common import Client, CLIError, print_json, split_list, wants_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FIELDS = "JobID,State,ExitCode"
LONG_FIELDS = ("JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxRSS,AveRSS,AllocCPUS,NTasks,Elapsed,State,"
               "ExitCode,AveCPUFreq,ConsumedEnergyRaw")

Row = dict[str, Any]


def _ts(epoch: float) -> str:
    from wattsched import timefmt

    return timefmt.ts_str(epoch)


def _elapsed(job: Row, step: Row | None) -> int:
    rec = step or job
    start, end = rec["time_start"], rec["time_end"]
    if not start:
        return 0
    return int((end or time.time()) - start)


def _state(job: Row, step: Row | None) -> str:
    """A job cancelled by a user shows "CANCELLED by UID"; its steps plain CANCELLED, as in Slurm."""
    if step is not None:
        return step["state"]
    rec = job
    if rec["state"] == "CANCELLED" and job.get("cancelled_by") is not None:
        return f"CANCELLED by {job['cancelled_by']}"
    return rec["state"]


def _total_cpu(seconds: float) -> str:
    """TotalCPU as Slurm prints it: MM:SS.mmm under an hour, else [D-]HH:MM:SS."""
    if seconds < 3600:
        minutes, secs = divmod(seconds, 60)
        return f"{int(minutes):02d}:{secs:06.3f}"
    from wattsched import timefmt

    return timefmt.elapsed_str(seconds)


def _timelimit(job: Row, step: Row | None) -> str:
    if step is not None:
        return ""
    from wattsched import timefmt

    minutes = job["timelimit_min"]
    return "UNLIMITED" if minutes is None else timefmt.elapsed_str(minutes * 60)


def _reqmem(job: Row) -> str:
    if job["req_mem_per_cpu"]:
        return f"{job['req_mem_per_cpu']}Mc"
    return f"{job['req_mem_mb']}M" if job["req_mem_mb"] else "0"


def _job_id(job: Row, step: Row | None, raw: bool) -> str:
    base = str(job["job_id"]) if raw or job["array_task_id"] is None else \
        f"{job['array_job_id']}_{job['array_task_id']}"
    return f"{base}.{step['step_id']}" if step else base


def _energy(joules: float | None) -> str:
    return fmt.num_unit(joules)


GOVERNOR_NAMES = {"userspace": "UserSpace", "ondemand": "OnDemand", "powersave": "PowerSave", "schedutil": "SchedUtil"}


def freq_text(khz: int | None) -> str:
    return fmt.num_unit(khz, "KMGT") if khz else "Unknown"


def req_freq(spec: str, chosen_khz: int | None, part: str) -> str:
    """ReqCPUFreqMin/Max/Gov of a --cpu-freq (or of the frequency fitted to a power cap)."""
    from wattsched import cpufreq

    try:
        request = cpufreq.parse(spec) if spec else (cpufreq.FreqRequest(low=str(chosen_khz)) if chosen_khz else None)
    except cpufreq.FreqError:
        request = None
    if request is None:
        return "Unknown"
    if part == "gov":
        governor = request.governor_needed
        return GOVERNOR_NAMES.get(governor, governor.capitalize() or "Unknown")
    value = request.low if part == "min" or request.high is None else request.high
    if value is None:
        return "Unknown"
    return freq_text(int(value)) if value.isdigit() else value.capitalize().replace("m1", "M1")


_UNITS = "KMGTP"
# --units / --noconvert of this run: set once by the command, read by the size columns
CONVERT: dict[str, Any] = {"units": None, "noconvert": False}


def size_text(value: float, unit: str = "K") -> str:
    """A size as sacct prints it (divisor 1024): converted only where exact (2048K -> 2M; 1234K stays),
    or into the --units unit with two decimals. ``unit`` is the value's own ("" for bytes)."""
    start = _UNITS.index(unit) + 1 if unit else 0
    number = float(value)
    wanted = CONVERT["units"]
    if wanted:
        number /= 1024 ** (_UNITS.index(wanted) + 1 - start)
        return f"{number:.2f}{wanted}"
    index = start
    if not CONVERT["noconvert"]:
        while number >= 1024 and number % 1024 == 0 and index < len(_UNITS):
            number, index = number / 1024, index + 1
    suffix = _UNITS[index - 1] if index else ""
    return f"{number:.0f}{suffix}" if number == int(number) else f"{number:.2f}{suffix}"


def _tres(pairs: list[tuple[str, Any]]) -> str:
    return ",".join(f"{name}={value}" for name, value in pairs if value is not None)


def _joules(rec: Row) -> int | None:
    return round(rec["consumed_energy_j"]) if rec["consumed_energy_j"] is not None else None


def _mem_mb(job: Row) -> int:
    if job["req_mem_mb"]:
        return job["req_mem_mb"] * max(1, job["req_nodes"])
    return job["req_mem_per_cpu"] * job["req_cpus"]


def req_tres(job: Row, step: Row | None) -> str:
    """ReqTRES: what the job asked for (billing and cpu as Slurm counts them, mem, node)."""
    if step is not None:
        return ""
    mem = _mem_mb(job)
    return _tres([("billing", job["req_cpus"]), ("cpu", job["req_cpus"]), *_gpus(job, job.get("req_gpus")),
                  ("mem", f"{mem}M" if mem else None), ("node", job["req_nodes"])])


def _gpus(job: Row, count: int | None) -> list[tuple[str, Any]]:
    """gres/gpu=N (and gres/gpu:type=N for a typed request), as sacct lists GPUs among the TRES."""
    if not count:
        return []
    typed = [(f"gres/gpu:{job['gpu_type']}", count)] if job.get("gpu_type") else []
    return [("gres/gpu", count), *typed]


def alloc_tres(job: Row, step: Row | None) -> str:
    """AllocTRES: what the job or step was given, with its energy once measured (an accounted TRES)."""
    rec = step or job
    if not rec["alloc_cpus"]:
        return ""
    mem = _mem_mb(job)
    return _tres([("billing", rec["alloc_cpus"] if step is None else None), ("cpu", rec["alloc_cpus"]),
                  ("energy", _joules(rec)), *_gpus(job, job.get("alloc_gpus")), ("mem", f"{mem}M" if mem else None),
                  ("node", rec["nnodes"])])


def _per_task(step: Row, total: float) -> float:
    return total / max(1, step["ntasks"])


def tres_in(step: Row, which: str) -> str:
    """TRESUsageIn{Ave,Max,Min,Tot} of a step: CPU time, energy, disk read, memory, pages."""
    from wattsched import timefmt

    cpu = {"ave": _per_task(step, step["total_cpu_s"]), "tot": step["total_cpu_s"], "min": step["min_cpu_s"],
           "max": max(step["min_cpu_s"], _per_task(step, step["total_cpu_s"]))}[which]
    disk = {"ave": _per_task(step, step["disk_read_b"]), "tot": step["disk_read_b"],
            "max": step["max_disk_read_b"], "min": None}[which]
    mem = {"ave": step["ave_rss_kb"], "tot": step["max_rss_kb"], "max": step["max_rss_kb"], "min": None}[which]
    return _tres([("cpu", timefmt.elapsed_str(int(cpu))), ("energy", _joules(step)),
                  ("fs/disk", round(disk) if disk is not None else None),
                  ("mem", f"{mem}K" if mem is not None else None),
                  ("pages", step["max_pages"] if which != "min" else None)])


def tres_out(step: Row, which: str) -> str:
    """TRESUsageOut{Ave,Max,Min,Tot} of a step: energy and disk written (where Slurm reports energy)."""
    disk = {"ave": _per_task(step, step["disk_write_b"]), "tot": step["disk_write_b"],
            "max": step["max_disk_write_b"], "min": None}[which]
    return _tres([("energy", _joules(step)), ("fs/disk", round(disk) if disk is not None else None)])


def _step(show: Callable[[Row], str]) -> Callable[[Row, Row | None], str]:
    """A usage figure (MaxRSS, disk, MinCPU, TRESUsage...): a step's own, or on the job's line its
    steps' taken together, as sacct aggregates them (totals summed, maxima and minima kept)."""
    return lambda job, step: show(step if step is not None else _aggregate(job))


def _aggregate(job: Row) -> Row:
    """The job's steps as one usage record (computed once per job, kept in its row)."""
    if "_usage" not in job:
        steps = job["steps"]
        row: Row = {"ntasks": sum(s["ntasks"] for s in steps), "consumed_energy_j": job["consumed_energy_j"]}
        for name in ("total_cpu_s", "user_cpu_s", "system_cpu_s", "disk_read_b", "disk_write_b"):
            row[name] = sum(s[name] for s in steps)
        for value, where in (("max_rss_kb", ("max_rss_node", "max_rss_task")), ("max_pages", ()),
                             ("max_disk_read_b", ("max_disk_read_node", "max_disk_read_task")),
                             ("max_disk_write_b", ("max_disk_write_node", "max_disk_write_task"))):
            top = max(steps, key=operator.itemgetter(value), default=None)
            row[value] = top[value] if top else 0
            row.update({w: top[w] if top else ("" if w.endswith("node") else 0) for w in where})
        least = min(steps, key=lambda s: s["min_cpu_s"], default=None)
        row.update(min_cpu_s=least["min_cpu_s"] if least else 0.0, min_cpu_node=least["min_cpu_node"] if least
                   else "", min_cpu_task=least["min_cpu_task"] if least else 0)
        row["ave_rss_kb"] = round(sum(s["ave_rss_kb"] for s in steps) / len(steps)) if steps else 0
        job["_usage"] = row
    return job["_usage"]


def _cpu_sum(key: str) -> Callable[[Row, Row | None], str]:
    """UserCPU, SystemCPU and TotalCPU: a step's own, or the sum of the job's steps (as sacct)."""
    return lambda job, step: _total_cpu(step[key] if step is not None else sum(x[key] for x in job["steps"]))


def _blank(_job: Row, _step: Row | None) -> str:
    return ""


# name -> (width, value); a negative width left-justifies. Every field of Slurm's sacct --helpformat;
# what is not measured here is blank or zero as sacct prints it for a site without that plugin.
FIELDS: dict[str, tuple[int, Callable[[Row, Row | None], str]]] = {
    "Account": (10, lambda j, s: j["account"]),
    "AdminComment": (15, lambda j, s: "" if s else j["admin_comment"]),
    "AllocCPUS": (10, lambda j, s: str((s or j)["alloc_cpus"])),
    "AllocNodes": (10, lambda j, s: str((s or j)["nnodes"])),
    "AllocTRES": (10, alloc_tres),
    "AssocID": (7, lambda j, s: "0"),
    "AveCPU": (10, _step(lambda s: _total_cpu(_per_task(s, s["total_cpu_s"])))),
    "AveCPUFreq": (10, lambda j, s: freq_text(j.get("ave_cpu_freq_khz")) if j.get("ave_cpu_freq_khz") else ""),
    "AveDiskRead": (14, _step(lambda s: size_text(_per_task(s, s["disk_read_b"]), ""))),
    "AveDiskWrite": (14, _step(lambda s: size_text(_per_task(s, s["disk_write_b"]), ""))),
    "AvePages": (10, _blank),  # (the accounting keeps a step's most page faults, not their average)
    "AveRSS": (10, _step(lambda s: size_text(s["ave_rss_kb"]))),
    "AveVMSize": (10, _blank),  # (virtual memory is read live, by sstat: a reaped task's rusage has none)
    "BlockID": (16, _blank),
    "Cluster": (10, lambda j, s: j["cluster"]),
    "Comment": (14, lambda j, s: j["comment"] if not s else ""),
    "Constraints": (19, lambda j, s: j["constraints"]),
    "ConsumedEnergy": (14, lambda j, s: _energy((s or j)["consumed_energy_j"])),
    "ConsumedEnergyRaw": (17, lambda j, s: str((s or j)["consumed_energy_j"] or 0)),
    "Container": (19, _blank),
    "CPUTime": (10, lambda j, s: _elapsed_str(_elapsed(j, s) * (s or j)["alloc_cpus"])),
    "CPUTimeRAW": (10, lambda j, s: str(_elapsed(j, s) * (s or j)["alloc_cpus"])),
    "DBIndex": (-21, lambda j, s: str(j["db_index"])),
    "DerivedExitCode": (15, lambda j, s: "" if s else f"{max([j['exit_code']] + [x['exit_code'] for x in j['steps']])}"
                        f":{max([j['term_signal']] + [x['term_signal'] for x in j['steps']])}"),
    "Elapsed": (10, lambda j, s: _elapsed_str(_elapsed(j, s))),
    "ElapsedRaw": (10, lambda j, s: str(_elapsed(j, s))),
    "Eligible": (19, lambda j, s: _ts(j["time_eligible"])),
    "End": (19, lambda j, s: _ts((s or j)["time_end"])),
    "ExitCode": (8, lambda j, s: f"{(s or j)['exit_code']}:{(s or j)['term_signal']}"),
    "Extra": (14, _blank),
    "FailedNode": (8, _blank),
    "Flags": (19, lambda j, s: "" if s else _flags(j)),
    "GID": (6, lambda j, s: str(j["gid"])),
    "Group": (9, lambda j, s: j["group"]),
    "JobID": (-12, lambda j, s: _job_id(j, s, raw=False)),
    "JobIDRaw": (-12, lambda j, s: _job_id(j, s, raw=True)),
    "JobName": (10, lambda j, s: (s or j)["name"]),
    "Layout": (9, lambda j, s: "Block" if s and s["step_id"] not in ("batch", "extern") else ""),
    "Licenses": (10, lambda j, s: "" if s else j.get("licenses") or ""),
    "MaxDiskRead": (12, _step(lambda s: size_text(s["max_disk_read_b"], ""))),
    "MaxDiskReadNode": (15, _step(lambda s: s["max_disk_read_node"])),
    "MaxDiskReadTask": (15, _step(lambda s: str(s["max_disk_read_task"]))),
    "MaxDiskWrite": (12, _step(lambda s: size_text(s["max_disk_write_b"], ""))),
    "MaxDiskWriteNode": (16, _step(lambda s: s["max_disk_write_node"])),
    "MaxDiskWriteTask": (16, _step(lambda s: str(s["max_disk_write_task"]))),
    "MaxPages": (8, _step(lambda s: str(s["max_pages"]))),
    "MaxPagesNode": (12, _blank),
    "MaxPagesTask": (14, _blank),
    "MaxRSS": (10, _step(lambda s: size_text(s["max_rss_kb"]))),
    "MaxRSSNode": (10, _step(lambda s: s["max_rss_node"])),
    "MaxRSSTask": (10, _step(lambda s: str(s["max_rss_task"]))),
    "MaxVMSize": (10, _blank),
    "MaxVMSizeNode": (14, _blank),
    "MaxVMSizeTask": (14, _blank),
    "McsLabel": (12, _blank),
    "MinCPU": (10, _step(lambda s: _total_cpu(s["min_cpu_s"]))),
    "MinCPUNode": (10, _step(lambda s: s["min_cpu_node"])),
    "MinCPUTask": (10, _step(lambda s: str(s["min_cpu_task"]))),
    "NCPUS": (10, lambda j, s: str((s or j)["alloc_cpus"])),
    "NNodes": (8, lambda j, s: str((s or j)["nnodes"])),
    "NodeList": (15, lambda j, s: (s or j)["node_list"]),
    "NTasks": (8, lambda j, s: str(s["ntasks"]) if s else ""),
    "Partition": (10, lambda j, s: "" if s else j["partition"]),
    "Planned": (10, lambda j, s: "" if s else _elapsed_str(_planned(j))),
    "PlannedCPU": (10, lambda j, s: "" if s else _elapsed_str(_planned(j) * j["req_cpus"])),
    "PlannedCPURAW": (13, lambda j, s: "" if s else str(_planned(j) * j["req_cpus"])),
    "Priority": (10, lambda j, s: "" if s else str(j["priority"])),
    "QOS": (10, lambda j, s: "" if s else j.get("qos", "")),
    "QOSRAW": (6, lambda j, s: "" if s else str(j.get("qos_id", 0))),
    "QOSREQ": (10, lambda j, s: "" if s else j.get("qos", "")),
    "Reason": (22, lambda j, s: "" if s else (j["reason"] or "None")),
    "ReqCPUFreq": (10, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "max")),
    "ReqCPUFreqGov": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "gov")),
    "ReqCPUFreqMax": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "max")),
    "ReqCPUFreqMin": (13, lambda j, s: req_freq(j["req_cpu_freq"], j["cpu_freq_khz"], "min")),
    "ReqCPUS": (8, lambda j, s: str(j["req_cpus"])),
    "ReqMem": (10, lambda j, s: _reqmem(j)),
    "ReqNodes": (8, lambda j, s: str(j["req_nodes"])),
    "ReqTRES": (10, req_tres),
    "Reservation": (20, lambda j, s: "" if s else j["reservation"]),
    "ReservationId": (8, lambda j, s: ""),
    "Restarts": (8, lambda j, s: "" if s else str(j["restart_count"])),
    "SegmentSize": (11, lambda j, s: "0"),
    "SLUID": (14, _blank),
    "Start": (19, lambda j, s: _ts((s or j)["time_start"])),
    "State": (10, _state),
    "StdErr": (20, lambda j, s: "" if s else (j["std_err"] or j["std_out"])),
    "StdIn": (20, lambda j, s: "" if s else "/dev/null"),
    "StdOut": (20, lambda j, s: "" if s else j["std_out"]),
    "Submit": (19, lambda j, s: _ts(j["time_submit"] if not s else s["time_start"])),
    "SubmitLine": (20, lambda j, s: "" if s else j["submit_line"]),
    "Suspended": (10, lambda j, s: _elapsed_str(int(j.get("time_suspended") or 0))),
    "SystemComment": (15, _blank),
    "SystemCPU": (10, _cpu_sum("system_cpu_s")),
    "Timelimit": (10, _timelimit),
    "TimelimitRaw": (10, lambda j, s: "" if s else ("UNLIMITED" if j["timelimit_min"] is None
                                                   else str(j["timelimit_min"]))),
    "TotalCPU": (10, _cpu_sum("total_cpu_s")),
    "TRESUsageInAve": (14, _step(lambda s: tres_in(s, "ave"))),
    "TRESUsageInMax": (14, _step(lambda s: tres_in(s, "max"))),
    "TRESUsageInMaxNode": (18, _step(lambda s: _tres([("cpu", s["min_cpu_node"]), ("mem", s["max_rss_node"])]))),
    "TRESUsageInMaxTask": (18, _step(lambda s: _tres([("cpu", s["min_cpu_task"]), ("mem", s["max_rss_task"])]))),
    "TRESUsageInMin": (14, _step(lambda s: tres_in(s, "min"))),
    "TRESUsageInMinNode": (18, _step(lambda s: _tres([("cpu", s["min_cpu_node"])]))),
    "TRESUsageInMinTask": (18, _step(lambda s: _tres([("cpu", s["min_cpu_task"])]))),
    "TRESUsageInTot": (14, _step(lambda s: tres_in(s, "tot"))),
    "TRESUsageOutAve": (15, _step(lambda s: tres_out(s, "ave"))),
    "TRESUsageOutMax": (15, _step(lambda s: tres_out(s, "max"))),
    "TRESUsageOutMaxNode": (19, _step(lambda s: _tres([("fs/disk", s["max_disk_write_node"])]))),
    "TRESUsageOutMaxTask": (19, _step(lambda s: _tres([("fs/disk", s["max_disk_write_task"])]))),
    "TRESUsageOutMin": (15, _step(lambda s: tres_out(s, "min"))),
    "TRESUsageOutMinNode": (19, _blank),
    "TRESUsageOutMinTask": (19, _blank),
    "TRESUsageOutTot": (15, _step(lambda s: tres_out(s, "tot"))),
    "UID": (6, lambda j, s: str(j["uid"])),
    "User": (9, lambda j, s: "" if s else j["user"]),
    "UserCPU": (10, _cpu_sum("user_cpu_s")),
    "WCKey": (10, lambda j, s: j["wckey"]),
    "WCKeyID": (10, lambda j, s: "0"),
    "WorkDir": (20, lambda j, s: j["work_dir"]),
}


def _signature(key: str) -> Callable[[Row, Row | None], str]:
    """A figure of the job's signature; blank on steps and where none was measured."""
    return lambda j, s: "" if s or not j.get("sig_cpi") else f"{j.get(key) or 0:.2f}"


def _change(factor: float | None) -> str:
    """A projected factor as the change it is: 1.062 -> +6.2%."""
    return f"{(factor - 1) * 100:+.1f}%" if factor else ""


# ours, beyond Slurm's: the job's energy policy (wattsched.energypolicy), what it chose and projected,
# and the signature it chose from (means over the run); job lines only
FIELDS.update({
    "EnergyPolicy": (12, lambda j, s: "" if s else j.get("energy_policy", "")),
    "PolicyFreq": (10, lambda j, s: "" if s or not j.get("policy_freq_khz") else freq_text(j["policy_freq_khz"])),
    "PredTime": (9, lambda j, s: "" if s else _change(j.get("pred_time_factor"))),
    "PredEnergy": (10, lambda j, s: "" if s else _change(j.get("pred_energy_factor"))),
    "CPI": (6, _signature("sig_cpi")),
    "MemBW": (8, _signature("sig_gbs")),
    "MemBound": (8, _signature("sig_memory_bound")),
    # what the same job's earlier runs let expect at its submission (wattsched.prediction)
    "ExpElapsed": (10, lambda j, s: "" if s or not j.get("exp_elapsed_s") else _elapsed_str(round(j["exp_elapsed_s"]))),
    "ExpEnergy": (10, lambda j, s: "" if s or not j.get("exp_elapsed_s") else _energy(round(j["exp_energy_j"]))),
    "ExpWatts": (8, lambda j, s: "" if s or not j.get("exp_elapsed_s") else f"{j['exp_watts']:.0f}"),
    # its emissions, grams of CO2e (wattsched.carbon): as ConsumedEnergy prints joules (850, 12K, 1.25M)
    "CO2e": (8, lambda j, s: "" if s or not j.get("co2e_g") else _energy(round(j["co2e_g"]))),
    "CO2eRaw": (8, lambda j, s: "" if s or not j.get("co2e_g") else f"{j['co2e_g']:.3f}"),
    # the lowest its nodes' power limits held it to, watts (PowerPlugin=power/balance, CapWatts)
    "MinCapWatts": (11, lambda j, s: "" if s or j.get("min_cap_watts") is None else f"{j['min_cap_watts']:.0f}"),
})


def _planned(job: Row) -> int:
    """Planned (formerly Reserved): how long the job waited once eligible."""
    begin = job["time_start"] or time.time()
    return max(0, int(begin - (job["time_eligible"] or job["time_submit"])))


def _flags(job: Row) -> str:
    """Flags: how the job was scheduled (SchedMain/SchedBackfill/SchedSubmit), as far as recorded."""
    return "SchedMain" if job["time_start"] else ""


def _elapsed_str(seconds: int) -> str:
    from wattsched import timefmt

    return timefmt.elapsed_str(seconds)


def parse_fields(spec: str) -> list[tuple[str, int]]:
    """``--format=JobID,JobName%30,State``: field names with an optional %width."""
    try:
        return fmt.parse_fields(spec, {name: spec_[0] for name, spec_ in FIELDS.items()})
    except ValueError as exc:
        raise CLIError(str(exc)) from exc


COMMAND = Command("sacct", "[options]", [
    Opt("a", "allusers", NO, "Display jobs for all users. By default, only the current user's jobs are "
        "displayed. If ran by user root this is the default."),
    Opt("A", "accounts", REQ, "Use this comma separated list of accounts to select jobs to display.",
        metavar="account_list", kind="list"),
    Opt(None, "array", NO, "Expand job arrays: one line per array task (the default here)."),
    Opt("b", "brief", NO, "Equivalent to '--format=jobid,state,exitcode'."),
    Opt("C", "constraints", REQ, "Comma separated list of features to select jobs by.", metavar="list",
        kind="list"),
    Opt(None, "delimiter", REQ, "ASCII characters used to separate the fields when specifying the -p or -P "
        "options. The default delimiter is a '|'.", metavar="characters"),
    Opt("D", "duplicates", NO, "If Slurm job ids are reset, some job numbers will probably appear more than "
        "once referring to different jobs. Without this option only the most recent job will be displayed "
        "(a requeued job's earlier runs are such records too)."),
    Opt("e", "helpformat", NO, "Print a list of fields that can be specified with the '--format' option",
        kind="flag"),
    Opt(None, "help-fields", NO, "Same as --helpformat", dest="helpformat"),
    Opt("E", "endtime", REQ, "Select jobs eligible before this time.", metavar="time"),
    Opt("g", "gid", REQ, "Use this comma separated list of gids or group names to select jobs to display.",
        metavar="gid_list", dest="group", kind="list"),
    Opt(None, "group", REQ, "Same as --gid", metavar="gid_list", dest="group", kind="list"),
    Opt("i", "nnodes", REQ, "Return jobs which ran on this many nodes (N = min[-max])", metavar="N"),
    Opt("I", "ncpus", REQ, "Return jobs which ran on this many cpus (N = min[-max])", metavar="N"),
    Opt("j", "jobs", REQ, "Display information about this job or comma-separated list of jobs.",
        metavar="job(.step)", kind="list"),
    Opt(None, "json", OPT, "Produce JSON output", metavar="data_parser"),
    Opt("k", "timelimit-min", REQ, "Only send data about jobs with this timelimit or more.", metavar="time"),
    Opt("K", "timelimit-max", REQ, "Only send data about jobs with this timelimit or less.", metavar="time"),
    Opt("l", "long", NO, "Equivalent to specifying a long list of fields."),
    Opt("L", "allclusters", NO, "Display jobs ran on all clusters (this one)."),
    Opt("M", "clusters", REQ, "Only send data about these clusters (this one, or all).", metavar="cluster_list"),
    Opt(None, "cluster", REQ, "Same as --clusters", metavar="cluster_list", dest="clusters"),
    Opt("n", "noheader", NO, "No header will be added to the beginning of output."),
    Opt(None, "name", REQ, "Display jobs that have any of these name(s).", metavar="job_name", kind="list"),
    Opt(None, "noconvert", NO, "Don't convert units from their original type (e.g. 2048M won't be converted "
        "to 2G)."),
    Opt("N", "nodelist", REQ, "Display jobs that ran on any of these nodes.", metavar="node_list", kind="list"),
    Opt("o", "format", REQ, "Comma separated list of fields. (use \"--helpformat\" for a list of available "
        "fields).", metavar="field_list"),
    Opt(None, "fields", REQ, "Same as --format", metavar="field_list", dest="format"),
    Opt("p", "parsable", NO, "output will be '|' delimited with a '|' at the end"),
    Opt("P", "parsable2", NO, "output will be '|' delimited without a '|' at the end"),
    Opt("q", "qos", REQ, "Only send data about jobs using these qos. Default is all.", metavar="qos",
        kind="list"),
    Opt("r", "partition", REQ, "Comma separated list of partitions to select jobs and job steps from.",
        metavar="partition_list", kind="list"),
    Opt("R", "reason", REQ, "Comma separated list of reasons to select jobs by.", metavar="reason_list",
        kind="list"),
    Opt("s", "state", REQ, "Select jobs based on their state.", metavar="state_list", kind="list"),
    Opt("S", "starttime", REQ, "Select jobs eligible after this time. Default is 00:00:00 of the current "
        "day, unless '-s' or '-j' is set.", metavar="time"),
    Opt("u", "user", REQ, "Use this comma separated list of uids or user names to select jobs to display.",
        metavar="user_list", kind="list"),
    Opt(None, "uid", REQ, "Same as --user", metavar="user_list", dest="user", kind="list"),
    Opt(None, "units", REQ, "Display values in specified unit type.", metavar="[KMGTP]"),
    Opt("v", "verbose", NO, "Primarily for debugging purposes, report the state of various variables during "
        "processing.", kind="count"),
    Opt("W", "wckeys", REQ, "Only send data about these wckeys. Default is all.", metavar="wckey_list",
        kind="list"),
    Opt("X", "allocations", NO, "Only show statistics relevant to the job allocation itself, not taking steps "
        "into consideration."),
    ignored(None, "federation", NO), ignored(None, "local", NO), ignored("T", "truncate", NO),
    ignored(None, "whole-hetjob", OPT), ignored("x", "associations", REQ), ignored("F", "flags", REQ),
    ignored(None, "use-local-uid", NO),
    refused("c", "completion", NO, "the job completion plugin (jobcomp) is not used here; sacct reads accounting"),
    refused("f", "file", REQ, "sacct reads the accounting database, not job completion files"),
    refused("B", "batch-script", NO, "batch scripts are not stored in accounting"),
    refused(None, "env-vars", NO, "job environments are not stored in accounting"),
    refused(None, "yaml", OPT, "YAML output is not supported; use --json"),
    *standard(),
], operands=False, option_list=True, epilog="Note, valid start/end time formats are...\n           HH:MM[:SS] [AM|PM]\n"
          "           MMDD[YY] or MM/DD[/YY] or MM.DD[.YY]\n           MM/DD[/YY]-HH:MM[:SS]\n"
          "           YYYY-MM-DD[THH:MM[:SS]]")


def sacct(argv: list[str]) -> int:
    """Show accounting data of jobs and steps."""
    opts, _ = COMMAND.parse(argv)
    if opts.get("helpformat"):
        names = sorted(FIELDS, key=str.lower)
        for row in range(0, len(names), 4):
            print("".join(f"{n:<20}" for n in names[row:row + 4]).rstrip())
        return 0
    from wattsched import auth, timefmt
    from wattsched import states as st

    units = opts.get("units")
    if units is not None and units.upper() not in _UNITS:
        raise CLIError(f"Invalid unit type: {units}")
    CONVERT.update(units=units.upper() if units else None, noconvert=bool(opts.get("noconvert")))
    spec = opts.get("format") or os.environ.get("SACCT_FORMAT") or (
        BRIEF_FIELDS if opts.get("brief") else LONG_FIELDS if opts.get("long") else DEFAULT_FIELDS)
    columns = parse_fields(spec)
    now = time.time()
    refs = split_list(opts.get("jobs"))
    job_ids = []
    for ref in refs:
        base = ref.split(".")[0].split("_")[0]
        if not base.isdigit() or len(base) > 10:
            raise CLIError(f"Invalid job id: {ref}")
        job_ids.append(int(base))
    try:
        start = timefmt.parse_time(opts["starttime"], now) if opts.get("starttime") else None
        end = timefmt.parse_time(opts["endtime"], now) if opts.get("endtime") else None
        wanted_states = [st.parse_job_state(s) for s in split_list(opts.get("state"))]
    except (timefmt.TimeFormatError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
    if start is None and not job_ids:
        # Slurm: midnight today, or now when states are asked for (jobs in those states now)
        start = now if wanted_states and end is None else timefmt.parse_time("today", now)
    if end is not None and start is not None and end < start:
        raise CLIError("start time must be before end time")
    client = Client.for_options(opts)
    user_list = split_list(opts.get("user"))
    if not user_list and not opts.get("allusers") and not job_ids and os.getuid() != 0:
        user_list = [auth.username(os.getuid())]
    params = {"job": job_ids or None, "user": user_list or None, "state": wanted_states or None,
              "start": start, "end": end}
    rows = client.request("GET", "/v1/accounting/jobs", params=params)["jobs"]
    rows = [r for r in rows if _selected(r, opts, refs)]
    if not opts.get("duplicates"):  # as Slurm: each job's latest record (rows come by id, then submit time)
        rows = list({r["job_id"]: r for r in rows}.values())
    if wants_json(opts):
        from wattsched import dataparser

        print_json(dataparser.document("jobs", [dataparser.accounting_job(r) for r in rows],
                                       ["sacct", *sys.argv[1:]], client.config.cluster_name))
        return 0
    records: list[dict[str, str]] = []
    wanted_steps = {r.split(".", 1)[1] for r in refs if "." in r}
    whole = {r.split(".")[0].split("_")[0] for r in refs if "." not in r}  # jobs named without a step
    for job in rows:
        if not wanted_steps or str(job["job_id"]) in whole or str(job.get("array_job_id")) in whole:
            records.append({name: FIELDS[name][1](job, None) for name, _ in columns})  # (not for JOB.STEP alone)
        if not opts.get("allocations"):
            for step in sorted(job["steps"], key=_step_order):
                if not wanted_steps or step["step_id"] in wanted_steps:
                    records.append({name: FIELDS[name][1](job, step) for name, _ in columns})
    parsable = opts.get("parsable") or opts.get("parsable2")
    delim = opts.get("delimiter", "|") if parsable else None
    for line in fmt.format_table(records, columns, delim, trailing=bool(opts.get("parsable")),
                                 header=not opts.get("noheader")):
        print(line)
    return 0


def _in_range(value: int, spec: str, what: str) -> bool:
    """-i/-I ``min[-max]`` (a single number is exact, as Slurm reads it)."""
    low, _, high = spec.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        raise CLIError(f"Invalid {what} range: {spec}")
    return int(low) <= value <= int(high or low)


def _selected(job: Row, opts: dict[str, Any], refs: list[str]) -> bool:
    """The filters applied here rather than by the accounting query."""
    tasks = {r.split(".")[0] for r in refs if "_" in r}
    if tasks and not ({f"{job['array_job_id']}_{job['array_task_id']}", str(job["job_id"])} & tasks
                      or (str(job["job_id"]) in {t.split("_")[0] for t in tasks} and job["array_task_id"] is None)):
        return False
    checks = [("name", job["name"]), ("accounts", job["account"]), ("partition", job["partition"]),
              ("wckeys", job["wckey"]), ("qos", job.get("qos", "")), ("reason", job["reason"])]
    for key, value in checks:
        wanted = split_list(opts.get(key))
        if wanted and value not in wanted:
            return False
    groups = split_list(opts.get("group"))
    if groups and job["group"] not in groups and str(job["gid"]) not in groups:
        return False
    features = split_list(opts.get("constraints"))
    if features and not set(features) & set(job["constraints"].split(",")):
        return False
    if opts.get("nnodes") and not _in_range(job["nnodes"], opts["nnodes"], "node count"):
        return False
    if opts.get("ncpus") and not _in_range(job["alloc_cpus"], opts["ncpus"], "cpu count"):
        return False
    if opts.get("nodelist"):
        from wattsched import hostlist

        wanted_nodes = {n for expr in split_list(opts["nodelist"]) for n in hostlist.expand(expr)}
        ran_on = set(hostlist.expand(job["node_list"])) if job["nnodes"] and job["node_list"] != "None assigned" \
            else set()
        if not wanted_nodes & ran_on:
            return False
    return _time_limit_ok(job, opts)


def _time_limit_ok(job: Row, opts: dict[str, Any]) -> bool:
    from wattsched import timefmt

    limit = job["timelimit_min"]
    for key, keep in (("timelimit_min", lambda lim, bound: lim is None or lim >= bound),
                      ("timelimit_max", lambda lim, bound: lim is not None and lim <= bound)):
        if opts.get(key):
            try:
                bound = timefmt.parse_duration_min(opts[key])
            except timefmt.TimeFormatError as exc:
                raise CLIError(str(exc)) from exc
            if bound is not None and not keep(limit, bound):
                return False
    return True


def _step_order(step: Row) -> tuple:
    sid = step["step_id"]
    return (0, 0) if sid == "batch" else (1, 0) if sid == "extern" else (2, int(sid) if sid.isdigit() else 0)


def main() -> None:
    run("sacct", lambda: sacct(sys.argv[1:]))

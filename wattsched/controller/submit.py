"""Turning a submission into job records: validation with Slurm's messages, arrays, defaults.

Pure functions of the request, the caller, the configuration and ``now``; the controller
allocates the ids and stores the result.
"""

from __future__ import annotations

import os
import re
import shlex
import signal as signal_mod
from collections.abc import Mapping
from dataclasses import dataclass, replace

from wattsched import (
    auth,
    cpufreq,
    energypolicy,
    gres,
    hostlist,
    licenses,
    mailtypes,
    patterns,
    prediction,
    snapbuild,
    states,
    timefmt,
    tresbind,
)
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.config import Config, PartitionConf
from wattsched.confvalues import parse_acctg_freq
from wattsched.model import Job, JobScript, Request, Reservation, share_strings
from wattsched.scheduling.candidates import feasible
from wattsched.scheduling.eligibility import parse_dependency
from wattsched.scheduling.plugins import SelectPlugin
from wattsched.scheduling.records import NodeSnap, PartitionSnap

INVALID_TRES = "Invalid Trackable RESource (TRES) specification"  # Slurm's ESLURM_INVALID_TRES


class SubmitError(ValueError):
    """A submission Slurm would refuse; the message is Slurm's wording."""


@dataclass(frozen=True, slots=True)
class ArraySpec:
    task_ids: tuple[int, ...]
    throttle: int


def parse_array(spec: str, max_array_size: int) -> ArraySpec:
    """``0-15%4``, ``1,3,5-7``, ``0-20:2``: task ids and the %N throttle. Every bound (ids below
    MaxArraySize, at most MaxArraySize tasks) is checked on the ranges before any id is listed."""
    body, _, throttle_s = spec.partition("%")
    ranges: list[range] = []
    try:
        throttle = int(throttle_s) if throttle_s else 0
        parts = body.split(",")
        if len(parts) > max_array_size:
            raise ValueError(spec)
        for part in parts:
            match = re.fullmatch(r"(\d{1,10})(?:-(\d{1,10})(?::(\d{1,10}))?)?", part.strip())
            if not match:
                raise ValueError(part)
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) else first
            step = int(match.group(3) or 1)
            if last < first or step < 1 or last >= max_array_size:
                raise ValueError(part)
            ranges.append(range(first, last + 1, step))
    except ValueError as exc:
        raise SubmitError("Invalid job array specification") from exc
    if sum(len(r) for r in ranges) > max_array_size or not 0 <= throttle <= max_array_size:
        raise SubmitError("Invalid job array specification")
    ids = sorted({i for r in ranges for i in r})
    return ArraySpec(tuple(ids), throttle)


def check_cpu_freq(spec: str, config: Config) -> str:
    """--cpu-freq as Slurm accepts it, with a governor the site allows (CpuFreqGovernors)."""
    try:
        cpufreq.check(spec, config.cpu_freq_governors)
    except cpufreq.FreqError as exc:
        raise SubmitError(str(exc)) from exc
    return spec


def check_profile(spec: str, config: Config) -> tuple[str, ...]:
    """--profile: all, none, or a list of energy and task; without it, ProfileHDF5Default."""
    words = [w.strip().lower() for w in spec.split(",") if w.strip()] or \
        [w.lower() for w in config.profile_hdf5_default]
    if words == ["all"]:
        return ("energy", "task")
    if words in ([], ["none"]):
        return ()
    if any(w not in ("energy", "task") for w in words):
        raise SubmitError(f"Invalid --profile specification: {spec} (all, none, energy, task)")
    return tuple(sorted(set(words)))


def check_acctg_freq(spec: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_acctg_freq(spec)
    except ValueError as exc:
        raise SubmitError(f"Invalid --acctg-freq specification: {exc}") from exc


def parse_signal(spec: str) -> tuple[int, int, bool]:
    """``[{R|B}:]SIG[@seconds]`` -> (signal number, seconds before the limit, batch shell only)."""
    batch_only = False
    body = spec
    if ":" in body:
        flags, body = body.split(":", 1)
        if not set(flags.upper()) <= {"B", "R"}:
            raise SubmitError(f"Invalid --signal specification: {spec}")
        batch_only = "B" in flags.upper()
    name, _, secs_s = body.partition("@")
    try:
        secs = int(secs_s) if secs_s else 60
        number = int(name) if name.isdigit() else int(getattr(signal_mod, "SIG" + name.upper().removeprefix(
            "SIG")))
    except (ValueError, AttributeError) as exc:
        raise SubmitError(f"Invalid --signal specification: {spec}") from exc
    if not 1 <= number <= 64 or not 0 <= secs <= 65535:
        raise SubmitError(f"Invalid --signal specification: {spec}")
    return number, secs, batch_only


def job_script(req: JobSubmit) -> JobScript:
    """What the state store keeps of a submission for its launch: its script and environment, less
    the secrets the commands carry (a token, say)."""
    return JobScript(req.script, {k: v for k, v in req.environment.items() if k not in auth.SECRET_ENV})


def build_jobs(req: JobSubmit, who: Identity, gid: int, group: str, config: Config, now: float,
               first_id: int, node_snaps: dict[str, NodeSnap], select: SelectPlugin,
               partitions: dict[str, PartitionSnap],
               reservations: Mapping[str, Reservation]) -> list[Job]:
    """Validate ``req`` and return its job records (several for an array), ids from ``first_id``."""
    part = partition_open(req.partition, config, partitions)
    check_partition_access(part, req.account, who, gid, req.reservation)
    if req.reservation:
        resv = reservations.get(req.reservation)
        if resv is None:
            raise SubmitError("Requested reservation is invalid")
        if who.user not in resv.users and not (req.account and req.account in resv.accounts):
            raise SubmitError("Access denied to requested reservation")
    if req.power_fit and req.cpu_freq:
        raise SubmitError("--power-fit and --cpu-freq are mutually exclusive")
    if req.mem_per_node_mb and req.mem_per_cpu_mb:
        raise SubmitError("--mem and --mem-per-cpu are mutually exclusive")
    try:
        gpus = gres.parse_request(req.gres, req.gpus, req.gpus_per_node, req.gpus_per_task)
    except gres.GresError as exc:
        raise SubmitError(str(exc)) from exc
    if not tresbind.valid(req.tres_bind):
        raise SubmitError(INVALID_TRES)
    check_licenses(req.licenses, config)
    mail_type = check_mail(req.mail_type, req.mail_user)
    if req.script is None and not req.interactive:
        raise SubmitError("Batch script is empty!")
    if req.script is not None and not req.script.startswith("#!"):
        raise SubmitError("This does not look like a batch script.  The first line must start with #! "
                          "followed by the path to an interpreter.")
    try:
        time_limit = timefmt.parse_duration_min(req.time_limit) if req.time_limit else \
            (part.default_time_min if part.default_time_min is not None else part.max_time_min)
        begin = timefmt.parse_time(req.begin, now) if req.begin else 0.0
        deadline = timefmt.parse_time(req.deadline, now) if req.deadline else 0.0
    except timefmt.TimeFormatError as exc:
        raise SubmitError(str(exc)) from exc
    if time_limit == 0:
        raise SubmitError("Invalid time limit specification")
    if deadline and begin and deadline < begin:
        raise SubmitError("Incompatible begin and deadline time specification")
    # as Slurm: a deadline before the earliest start, or closer than the time limit (a job without
    # one needs a minute), is refused at submission
    if deadline and deadline < max(now, begin) + (time_limit if time_limit is not None else 1) * 60:
        raise SubmitError("Requested time limit is invalid (missing or exceeds some limit)")
    if req.dependency:
        try:
            parse_dependency(req.dependency)
        except ValueError as exc:
            raise SubmitError(str(exc)) from exc
    kill_signal, kill_secs, kill_batch = parse_signal(req.signal) if req.signal else (0, 0, False)
    try:
        req_nodes = hostlist.expand(req.nodelist, len(node_snaps))
        exc_nodes = hostlist.expand(req.exclude, len(node_snaps))
    except hostlist.HostlistError as exc:
        raise SubmitError("Invalid node name specified") from exc
    for name in req_nodes + exc_nodes:
        if name not in node_snaps:
            raise SubmitError("Invalid node name specified")
    features = [f for f in re.split(r"[&,]", req.constraint) if f] if req.constraint else []
    ntasks_set = req.ntasks is not None
    nodes_min = max(req.nodes_min, 1)
    if req_nodes:
        nodes_min = max(nodes_min, len(req_nodes))
    ntasks = req.ntasks if req.ntasks is not None else nodes_min * (req.ntasks_per_node or 1)
    if ntasks < nodes_min:
        nodes_min = ntasks
    if req.nodes_max and req.nodes_max < nodes_min:
        raise SubmitError("Node count specification invalid")
    if config.enforce_part_limits != "no":  # (ALL and ANY alike: a job has one partition here)
        if part.max_time_min is not None and time_limit is not None and time_limit > part.max_time_min:
            raise SubmitError("Requested time limit is invalid (missing or exceeds some limit)")
        if (part.max_nodes is not None and nodes_min > part.max_nodes) or nodes_min < part.min_nodes:
            raise SubmitError("Node count specification invalid")
    mem_per_node = req.mem_per_node_mb or (0 if req.mem_per_cpu_mb else config.def_mem_per_node_mb)

    asked = Request(
        argv=list(req.argv), command=req.command or ("(null)" if req.interactive else ""), work_dir=req.work_dir,
        nodes_min=nodes_min, nodes_max=req.nodes_max, ntasks=ntasks, ntasks_set=ntasks_set,
        ntasks_per_node=req.ntasks_per_node, cpus_per_task=req.cpus_per_task, mem_per_node_mb=mem_per_node,
        mem_per_cpu_mb=req.mem_per_cpu_mb, min_cpus_per_node=req.min_cpus_per_node, tmp_mb=req.tmp_mb,
        rlimits=dict(req.rlimits), begin_time=begin, dependency=req.dependency, deadline=deadline,
        exclusive=req.exclusive, overcommit=req.overcommit and not req.exclusive, no_kill=req.no_kill,
        req_nodes=req_nodes, exc_nodes=exc_nodes, features=features, std_err=req.error, std_in=req.input,
        open_mode=req.open_mode, kill_signal=kill_signal, kill_signal_secs=kill_secs,
        kill_signal_batch_only=kill_batch, requeue=config.job_requeue if req.requeue is None else req.requeue,
        interactive=req.interactive, power_fit=req.power_fit, gpus_per_node=gpus.per_node,
        gpus_per_task=gpus.per_task, gpus_per_job=gpus.per_job, gpu_type=gpus.kind, tres_bind=req.tres_bind,
        licenses=req.licenses, mail_type=mail_type,
        mail_user=mailtypes.recipient(req.mail_user or who.user, config.mail_domain))
    template = Job(
        job_id=first_id, name=req.name or ("interactive" if req.interactive else "sbatch"), uid=who.uid,
        user=who.user, gid=gid, group=group, account=req.account, qos=req.qos, partition=part.name,
        submit_host=req.submit_host, submit_line=req.submit_line, time_limit_min=time_limit,
        comment=req.comment, wckey=req.wckey, nice=req.nice, hold="user" if req.hold else "",
        submit_time=now, eligible_time=max(now, begin),
        reason=states.R_HELD_USER if req.hold else states.R_NONE,  # at once, as Slurm: no pass needed
        reservation=req.reservation, request=asked)
    # the request as the policies will see it (snapbuild.request), checked before the other options
    request = snapbuild.request(template, whole_nodes=part.whole_nodes)
    if not feasible(request, partitions[part.name], node_snaps, select, config.def_mem_per_cpu_mb):
        raise SubmitError("Requested node configuration is not available")
    cpu_freq = check_cpu_freq(req.cpu_freq, config)
    try:
        template.energy.energy_policy = energypolicy.check(req.energy_policy) if req.energy_policy else ""
        template.energy.app_model = energypolicy.declared_model(req.environment)
    except energypolicy.PolicyError as exc:
        raise SubmitError(str(exc)) from exc
    profile = check_profile(req.profile, config)
    template.energy.history_key = prediction.job_key(who.user, template.name, req.script or shlex.join(
        [req.command, *req.argv]), nodes_min, ntasks * req.cpus_per_task)
    acctg_freq = check_acctg_freq(req.acctg_freq)
    template.submit_key = req.submit_key
    array = parse_array(req.array, config.max_array_size) if req.array else None
    template.request = replace(template.request, cpu_freq=cpu_freq, profile=profile, acctg_freq=acctg_freq,
                               std_out=req.output or patterns.default_output(array is not None))
    share_strings(template)  # (before the copies an array makes: its tasks share them too)
    if array is None:
        return [template]
    jobs = []
    for offset, task_id in enumerate(array.task_ids):
        job = Job.from_dict(template.to_dict())
        job.request = template.request  # one for all pending tasks (Request is frozen)
        job.job_id = first_id + offset
        job.array_job_id = first_id
        job.array_task_id = task_id
        job.array_task_count = len(array.task_ids)
        job.array_task_min = array.task_ids[0]
        job.array_task_max = array.task_ids[-1]
        job.array_throttle = array.throttle
        jobs.append(job)
    return jobs


# a mail recipient is one argument of MailProg: no leading '-' (an option), no blank or control character
_MAIL_USER = re.compile(r"[A-Za-z0-9_.+][^\s\x00-\x1f\x7f]{0,254}")


def check_mail(types: str, user: str) -> tuple[str, ...]:
    """--mail-type's events (Slurm's error for none known) and --mail-user, which MailProg gets as an argument."""
    if user and not _MAIL_USER.fullmatch(user):
        raise SubmitError("Invalid --mail-user specification")
    try:
        return mailtypes.parse(types) if types else ()
    except ValueError as exc:
        raise SubmitError(mailtypes.INVALID) from exc


def check_licenses(spec: str, config: Config) -> None:
    """A job's -L: Slurm's grammar, every license configured and none asked for beyond its total."""
    try:
        licenses.validate(licenses.parse(spec), config.license_totals)
    except licenses.LicenseError as exc:
        raise SubmitError(licenses.INVALID) from exc


def check_partition_access(part: PartitionConf, account: str, who: Identity, gid: int, reservation: str) -> None:
    """The partition's AllowGroups (root always passes, as in Slurm), AllowAccounts and DenyAccounts,
    refused as Slurm refuses them when EnforcePartLimits is on; ReqResv, RootOnly and
    DisableRootJobs, in Slurm's order and words."""
    if "ALL" not in part.allow_groups and who.uid != 0 and not in_groups(who.user, gid, part.allow_groups):
        raise SubmitError("User's group not permitted to use this partition")
    if ("ALL" not in part.allow_accounts and account not in part.allow_accounts) or account in part.deny_accounts:
        raise SubmitError("Invalid account or account/partition combination specified")
    if (part.req_resv and not reservation) or (part.root_only and who.uid != 0):
        raise SubmitError("Access/permission denied")
    if part.disable_root_jobs and who.uid == 0:
        raise SubmitError("Invalid user id")


def in_groups(user: str, gid: int, groups: tuple[str, ...]) -> bool:
    """Whether the user (primary group ``gid``) is in one of the named groups, as the system says."""
    import grp

    try:
        gids = os.getgrouplist(user, gid)
    except OSError:
        gids = [gid]
    for each in gids:
        try:
            if grp.getgrgid(each).gr_name in groups:
                return True
        except KeyError:
            continue
    return False


def partition_open(name: str, config: Config, partitions: dict[str, PartitionSnap]) -> PartitionConf:
    """The partition a job asks for (the default one for ""), refused when it does not exist or takes
    no jobs (inactive or drained)."""
    if name:
        part = next((p for p in config.partitions if p.name == name), None)
        if part is None:
            raise SubmitError("Invalid partition name specified")
    else:
        part = config.default_partition()
        if part is None:
            raise SubmitError("No partition specified or system default partition")
    if partitions[part.name].state in ("INACTIVE", "DRAIN"):
        raise SubmitError("Required partition not available (inactive or drain)")
    return part

"""Workloads for the simulator: the Standard Workload Format (SWF) of the Parallel Workloads
Archive, a JSON format of our own, and generators.

SWF: one job per line, 18 whitespace-separated fields, ``;`` header comments (``; MaxNodes: 100``
etc. are kept as the header), ``-1`` for unknown. Following the archive's conventions for
cleaned traces, a job is simulated with its submit time (field 2), its run time (field 4), its
processors (field 5, allocated; else field 8, requested), its requested time (field 9; else its
run time) and its user (field 12). A job whose run time exceeds its requested time is clipped to
it, as a scheduler would kill it; jobs with an unknown or zero run time or size are skipped and
counted. Processors become whole nodes of the platform: ceil(processors / CPUs per node).
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

SWF_FIELDS = ("job", "submit", "wait", "run", "procs_alloc", "cpu_avg", "mem_avg", "procs_req", "time_req",
              "mem_req", "status", "user", "group", "app", "queue", "partition", "preceding", "think")


class WorkloadError(ValueError):
    """A workload file that cannot be read, with the file and line."""


@dataclass(frozen=True, slots=True)
class SimJob:
    job_id: int
    submit: float
    runtime: float  # seconds it runs (already clipped to walltime)
    walltime: float  # requested time limit, seconds
    procs: int
    user: str = "user"
    account: str = ""
    energy_factor: float = 1.0  # this user's energy efficiency (1.3: gluttonous, 0.7: green)
    preceding: int = 0  # a closed loop: submitted ``think`` seconds after this job ends
    think: float = 0.0
    nodes: int = 0  # a shape of its own: procs / nodes cores on each of so many nodes, sharing them (0: whole nodes)


@dataclass(slots=True)
class Workload:
    jobs: list[SimJob]
    header: dict[str, str] = field(default_factory=dict)
    skipped: int = 0
    clipped: int = 0

    def nodes_of(self, job: SimJob, cpus_per_node: int) -> int:
        return job.nodes or max(1, math.ceil(job.procs / max(1, cpus_per_node)))


def _open(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as handle:
            yield from handle
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def parse_swf(path: str | Path, max_jobs: int | None = None) -> Workload:
    path = Path(path)
    jobs: list[SimJob] = []
    header: dict[str, str] = {}
    skipped = clipped = 0
    for lineno, line in enumerate(_open(path), start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, sep, value = text[1:].partition(":")
            if sep and key.strip():
                header[key.strip()] = value.strip()
            continue
        parts = text.split()
        if len(parts) != len(SWF_FIELDS):
            raise WorkloadError(f"{path}:{lineno}: {len(parts)} fields, SWF has {len(SWF_FIELDS)}")
        try:
            values = dict(zip(SWF_FIELDS, (float(p) for p in parts), strict=True))
        except ValueError as exc:
            raise WorkloadError(f"{path}:{lineno}: not a number: {exc}") from exc
        procs = int(values["procs_alloc"] if values["procs_alloc"] > 0 else values["procs_req"])
        run = values["run"]
        if procs <= 0 or run <= 0 or values["submit"] < 0:
            skipped += 1
            continue
        wall = values["time_req"] if values["time_req"] > 0 else run
        if run > wall:
            run, clipped = wall, clipped + 1
        user = f"u{int(values['user'])}" if values["user"] >= 0 else "unknown"
        jobs.append(SimJob(int(values["job"]), values["submit"], run, wall, procs, user))
        if max_jobs is not None and len(jobs) >= max_jobs:
            break
    return Workload(jobs, header, skipped, clipped)


def load_json(path: str | Path) -> Workload:
    """``{"jobs": [{"job_id", "submit", "runtime", "walltime", "procs", "user", ...}]}``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        jobs = [SimJob(**item) for item in data["jobs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WorkloadError(f"{path}: not a workload: {exc}") from exc
    return Workload(jobs, dict(data.get("header", {})))


def save_json(workload: Workload, path: str | Path) -> None:
    Path(path).write_text(json.dumps({"header": workload.header, "jobs": [asdict(j) for j in workload.jobs]}))


def load(path: str | Path, max_jobs: int | None = None) -> Workload:
    name = str(path)
    if name.endswith((".swf", ".swf.gz")):
        return parse_swf(path, max_jobs)
    if name.endswith(".json"):
        workload = load_json(path)
        workload.jobs = workload.jobs[:max_jobs] if max_jobs else workload.jobs
        return workload
    raise WorkloadError(f"{path}: unknown workload format (expected .swf, .swf.gz or .json)")


def synthetic_002(count: int, max_nodes: int, cpus_per_node: int, seed: int, clients: int = 20) -> Workload:
    """The synthetic workload of Mämmelä et al. 2011 (Table 5): jobs of Uniform(1, max_nodes) servers, on each
    of which they ask Random(1, 2, 4) cores (at most the server's ``cpus_per_node``; other jobs
    share the rest of the server) with a core load of Uniform(30 %, 99 %), and of Uniform(600 s,
    86400 s) wall time, sent by ``clients`` clients that each wait for their job to finish and
    then stay idle Uniform(100 s, 300 s) before sending the next. The loop is closed: each
    client's first job is sent at time 0, each next one (``preceding``) its idle interval
    (``think``) after the previous one ends, when the simulation gets there; the submit times
    written here are only what they would be without waiting. A job runs its whole wall time
    (the seed's jobs have no separate run time). The core load is the job's ``energy_factor``:
    the share of its cores' dynamic power it draws. Table 5's memory (100 MB-2 GB, never more
    than a server holds at 4 jobs) and disk load are not modelled."""
    rng = random.Random(seed)
    jobs, clocks = [], [0.0] * clients
    last = [0] * clients
    for job_id in range(1, count + 1):
        client = (job_id - 1) % clients
        wall = rng.uniform(600, 86400)
        nodes = rng.randint(1, max_nodes)
        cores = min(rng.choice((1, 2, 4)), cpus_per_node)
        load = rng.uniform(0.30, 0.99)
        think = rng.uniform(100, 300)
        jobs.append(SimJob(job_id, clocks[client], wall, wall, nodes * cores, f"client{client}",
                           energy_factor=load, preceding=last[client], think=think if last[client] else 0.0,
                           nodes=nodes))
        clocks[client] += wall + think
        last[client] = job_id
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Workload(jobs, {"Generator": f"Mämmelä et al. 2011 Table 5, 1-{max_nodes} servers x 1/2/4 cores, "
                                        f"seed {seed}"})


# Light-ESP (Georgiou et al. 2015, Table II): type, fraction of the machine, number of jobs, run time (s)
LIGHT_ESP = (("A", 0.03125, 75, 22), ("B", 0.06250, 9, 27), ("C", 0.5, 3, 45), ("D", 0.25, 3, 51),
             ("E", 0.5, 3, 26), ("F", 0.06250, 9, 154), ("G", 0.125, 6, 111), ("H", 0.15820, 6, 89),
             ("I", 0.03125, 24, 119), ("J", 0.06250, 24, 60), ("K", 0.09570, 15, 41), ("L", 0.125, 36, 30),
             ("M", 0.25, 15, 15), ("Z", 1.0, 2, 20))
LIGHT_ESP_SPAN_S = 900  # the turnaround of one Light-ESP log (15 minutes)


def light_esp(total_cpus: int, cpus_per_node: int, repeat: int, seed: int, users: int = 3) -> Workload:
    """Light-ESP scaled to a machine of ``total_cpus``: each type's fraction of the machine,
    rounded to whole nodes (at least one), its number of jobs and run time; a limit of twice the
    run time. As in ESP, a random half of the jobs is submitted at once and the rest at regular
    intervals over the first two thirds of the log, the two full-machine Z jobs at one third and
    two thirds. ``repeat`` logs follow each other every 15 minutes. The jobs are dealt to
    ``users`` users in turn within each type, so their workloads are equal, and the dealing
    rotates from one log to the next (Georgiou et al. 2015 changes the attributed user between runs)."""
    rng = random.Random(seed)
    jobs: list[SimJob] = []
    for rep in range(repeat):
        log = [(kind, frac, run) for kind, frac, count, run in LIGHT_ESP if kind != "Z" for _ in range(count)]
        rng.shuffle(log)
        half = len(log) // 2
        step = (LIGHT_ESP_SPAN_S * 2 / 3) / max(1, len(log) - half)
        times = [0.0] * half + [step * (i + 1) for i in range(len(log) - half)]
        log += [("Z", 1.0, 20), ("Z", 1.0, 20)]
        times += [LIGHT_ESP_SPAN_S / 3, LIGHT_ESP_SPAN_S * 2 / 3]
        dealt: dict[str, int] = {}
        for (kind, frac, run), when in zip(log, times, strict=True):
            turn = dealt.get(kind, 0)
            dealt[kind] = turn + 1
            nodes = max(1, round(frac * total_cpus / cpus_per_node))
            jobs.append(SimJob(len(jobs) + 1, rep * LIGHT_ESP_SPAN_S + when, float(run), 2.0 * run,
                               nodes * cpus_per_node, f"user{(turn + rep) % users + 1}"))
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Workload(jobs, {"Generator": f"Light-ESP (Georgiou et al. 2015 Table II) x{repeat}, {total_cpus} "
                                        f"CPUs, seed {seed}"})


def with_user_factors(workload: Workload, factors: dict[str, float]) -> Workload:
    """The workload with each named user's jobs at that energy efficiency factor."""
    for user, factor in factors.items():
        if factor <= 0:
            raise ValueError(f"energy factor of {user} must be positive, not {factor}")
    if not factors:
        return workload
    jobs = [replace(j, energy_factor=factors.get(j.user, j.energy_factor)) for j in workload.jobs]
    return Workload(jobs, dict(workload.header), workload.skipped, workload.clipped)


def most_active_users(workload: Workload, count: int) -> list[str]:
    """The users who submitted the most jobs, most first (ties by name)."""
    jobs: dict[str, int] = {}
    for job in workload.jobs:
        jobs[job.user] = jobs.get(job.user, 0) + 1
    return sorted(jobs, key=lambda u: (-jobs[u], u))[:count]

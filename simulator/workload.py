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
from dataclasses import asdict, dataclass, field
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


@dataclass(slots=True)
class Workload:
    jobs: list[SimJob]
    header: dict[str, str] = field(default_factory=dict)
    skipped: int = 0
    clipped: int = 0

    def nodes_of(self, job: SimJob, cpus_per_node: int) -> int:
        return max(1, math.ceil(job.procs / max(1, cpus_per_node)))


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
    """The synthetic workload of seed 002 (Table 5): jobs of Uniform(1, max_nodes) nodes and
    Uniform(600 s, 86400 s) wall time, sent by ``clients`` clients that each wait for their job
    to finish and then stay idle Uniform(100 s, 300 s) before sending the next. A closed loop
    cannot be known before simulating it, so the submit times here are an open approximation:
    each client's next job follows its previous one by its wall time plus the idle interval.
    A job runs its whole wall time (the seed's jobs have no separate run time)."""
    rng = random.Random(seed)
    jobs, clocks = [], [0.0] * clients
    for job_id in range(1, count + 1):
        client = (job_id - 1) % clients
        wall = rng.uniform(600, 86400)
        nodes = rng.randint(1, max_nodes)
        jobs.append(SimJob(job_id, clocks[client], wall, wall, nodes * cpus_per_node, f"client{client}"))
        clocks[client] += wall + rng.uniform(100, 300)
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Workload(jobs, {"Generator": f"seed 002 Table 5, 1-{max_nodes} nodes, seed {seed}"})

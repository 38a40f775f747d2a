"""Task CPU binding (TaskPlugin=task/affinity, srun --cpu-bind) on a real node: this host's CPUs 0-1.
Each test reads the kernel's own record, Cpus_allowed_list, from inside the task."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from wattsched import cpubind
from wattsched.harness.testing import Cluster

pytestmark = pytest.mark.skipif(sorted(os.sched_getaffinity(0))[:2] != [0, 1], reason="needs CPUs 0 and 1")
ALLOWED = "grep Cpus_allowed_list /proc/self/status | cut -f2"


def test_binding_types_as_masks() -> None:
    assert cpubind.task_cpus(cpubind.parse("cores"), [4, 5, 6, 7], 2, 4) == [(4, 5), (6, 7)]
    assert cpubind.task_cpus(cpubind.parse("rank"), [4, 5], 3, 4) == [(4,), (5,), (4,)]
    assert cpubind.task_cpus(cpubind.parse("sockets"), [0, 1, 8, 9], 2, 8) == [(0, 1), (8, 9)]
    assert cpubind.task_cpus(cpubind.parse("verbose,map_cpu:3,1"), [1, 3], 2, 4) == [(3,), (1,)]
    assert cpubind.task_cpus(cpubind.parse("mask_cpu:0x6"), [1, 2], 1, 4) == [(1, 2)]
    assert cpubind.environment(cpubind.parse("v,cores"), ["0x1", "0x2"]) == {
        "SLURM_CPU_BIND": "verbose,mask_cpu:0x1,0x2", "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": "0x1,0x2", "SLURM_CPU_BIND_VERBOSE": "verbose"}
    with pytest.raises(ValueError, match="Invalid --cpu-bind argument: bogus"):
        cpubind.parse("bogus")
    with pytest.raises(ValueError, match="Failed to parse"):
        cpubind.parse("map_cpu:1,x")


@pytest.fixture(scope="module")
def bound(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("bind"), nodes=1, cpus=2, extra="TaskPlugin=task/affinity").start()
    yield running
    running.stop()


def test_batch_scripts_run_on_their_jobs_cpus(bound: Cluster, tmp_path) -> None:
    jobs = [bound.sbatch("-c", "1", "-o", str(tmp_path / "%j"), "--wrap", f"{ALLOWED}; sleep 2") for _ in range(2)]
    for job_id in jobs:
        bound.wait_state(job_id, "COMPLETED")
    assert sorted((tmp_path / str(j)).read_text().strip() for j in jobs) == ["0", "1"]


def test_srun_cpu_bind_types(bound: Cluster) -> None:
    cores = bound.run("srun", "-n", "2", "-l", "--cpu-bind=verbose,cores", "sh", "-c",
                      f"echo $({ALLOWED}) $SLURM_CPU_BIND_TYPE$SLURM_CPU_BIND_LIST")
    assert sorted(cores.stdout.splitlines()) == ["0: 0 mask_cpu:0x1,0x2", "1: 1 mask_cpu:0x1,0x2"]
    assert "cpu-bind=MASK - n01, task  0  0 [" in cores.stderr and "]: mask 0x1 set" in cores.stderr
    mapped = bound.run("srun", "-n", "2", "-l", "--cpu-bind=map_cpu:1,0", "sh", "-c", ALLOWED)
    assert sorted(mapped.stdout.splitlines()) == ["0: 1", "1: 0"]
    unbound = bound.run("srun", "-n", "2", "-l", "--cpu-bind=none", "sh", "-c",
                        f"echo $({ALLOWED}) $SLURM_CPU_BIND")
    assert sorted(unbound.stdout.splitlines()) == ["0: 0-1 quiet,none", "1: 0-1 quiet,none"]


def test_binding_outside_the_allocation_or_malformed_is_refused(bound: Cluster) -> None:
    holder = bound.sbatch("-c", "1", "--wrap", "sleep 20")
    bound.wait_state(holder, "RUNNING")
    outside = bound.run("srun", "-n", "1", "-c", "1", "--cpu-bind=map_cpu:5", "true", check=False)
    assert outside.returncode != 0 and "outside the job's allocation" in outside.stderr
    bad = bound.run("srun", "-n", "1", "--cpu-bind=everywhere", "true", check=False)
    assert bad.returncode != 0 and "Invalid --cpu-bind argument: everywhere" in bad.stderr
    bound.run("scancel", str(holder))

"""Prolog, Epilog, PrologSlurmctld, EpilogSlurmctld, TaskProlog and TaskEpilog: run where Slurm runs
them, as whom, with Slurm's environment, and Slurm's failure rules (a failing Prolog drains its node
and requeues the job held; a failing Epilog drains its node; a failing PrologSlurmctld requeues a
batch job held). Jobs run as nobody.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import BIN, Cluster, reachable_by_all, restore_modes, wait_for

NOBODY = (65534, "nobody")


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Path]]:
    root = Path(tempfile.mkdtemp(prefix="wattsched-prologs-"))
    os.chmod(root, 0o755)
    seen = root / "seen"  # where the programs leave what they saw
    seen.mkdir(mode=0o1777)
    os.chmod(seen, 0o1777)
    admin = root / "admin"
    admin.mkdir()
    record = 'env | grep -E "^SLURM" | sort > {seen}/$SLURM_SCRIPT_CONTEXT.$SLURM_JOB_ID.${{SLURMD_NODENAME:-ctld}}\n'
    extra = "\n".join([
        "Prolog=" + script(admin / "prolog", record.format(seen=seen) +
                           f'[ -e {seen}/fail-prolog-$SLURMD_NODENAME ] && exit 3\nexit 0\n'),
        "Epilog=" + script(admin / "epilog", record.format(seen=seen) +
                           f'while [ -e {seen}/hold-epilog-$SLURMD_NODENAME ]; do sleep 0.1; done\n'
                           f'[ -e {seen}/fail-epilog-$SLURMD_NODENAME ] && exit 4\nexit 0\n'),
        "PrologSlurmctld=" + script(admin / "prolog_ctld", record.format(seen=seen) +
                                    f'[ -e {seen}/fail-prolog-ctld ] && exit 5\nexit 0\n'),
        "EpilogSlurmctld=" + script(admin / "epilog_ctld", record.format(seen=seen)),
        "TaskProlog=" + script(admin / "task_prolog", 'echo "export TASK_WHO=$(id -un)"\necho "unset DROP_ME"\n'
                               'echo "print task prolog says hello"\n'),
        "TaskEpilog=" + script(admin / "task_epilog", f'id -un > {seen}/task_epilog.$SLURM_JOB_ID.$SLURM_PROCID\n'),
    ])
    restore = reachable_by_all([sys.executable, str(BIN / "srun")])
    running = Cluster(root / "c", nodes=2, extra=extra)
    os.chmod(root / "c", 0o755)
    try:
        running.start()
        yield running, seen
    finally:
        running.stop()
        restore_modes(restore)
        shutil.rmtree(root, ignore_errors=True)


def saw(seen: Path, name: str) -> dict[str, str]:
    path = seen / name
    wait_for(path.exists, 30, what=name)
    wait_for(lambda: path.read_text().strip(), 10, what=f"{name} written")
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_every_program_runs_where_and_as_whom_slurm_runs_it(cluster: tuple[Cluster, Path]) -> None:
    c, seen = cluster
    env = dict(c.user_env(*NOBODY), DROP_ME="x")
    job_id = c.sbatch("-N", "2", "-J", "pe", "-o", str(seen / "%j.out"), "--wrap",
                      'echo batch TASK_WHO=$TASK_WHO DROP_ME=${DROP_ME:-unset}; srun -l sh -c \'echo step $TASK_WHO\'',
                      env=env)
    c.wait_state(job_id, "COMPLETED")
    for node in ("n01", "n02"):
        prolog = saw(seen, f"prolog_slurmd.{job_id}.{node}")
        assert prolog["SLURM_JOB_USER"] == "nobody" and prolog["SLURM_JOB_UID"] == "65534"
        assert prolog["SLURMD_NODENAME"] == node and prolog["SLURM_JOB_NODELIST"] == "n[01-02]"
        assert prolog["SLURM_JOB_PARTITION"] == "debug" and prolog["SLURM_CLUSTER_NAME"] == c.name
        assert saw(seen, f"epilog_slurmd.{job_id}.{node}")["SLURM_JOB_ID"] == str(job_id)
    ctld = saw(seen, f"prolog_slurmctld.{job_id}.ctld")
    assert ctld["SLURM_JOB_NAME"] == "pe" and ctld["SLURM_JOB_NODELIST"] == "n[01-02]"
    assert saw(seen, f"epilog_slurmctld.{job_id}.ctld")["SLURM_JOB_EXIT_CODE2"] == "0:0"
    out = (seen / f"{job_id}.out").read_text().splitlines()
    assert out[0] == "task prolog says hello"
    assert out[1] == "batch TASK_WHO=nobody DROP_ME=unset"
    assert sorted(line for line in out if "step" in line) == ["0: step nobody", "1: step nobody"]
    for rank in ("0", "1"):  # srun's tasks, as the user
        wait_for((seen / f"task_epilog.{job_id}.{rank}").exists, 20, what=f"task epilog of task {rank}")
        assert (seen / f"task_epilog.{job_id}.{rank}").read_text() == "nobody\n"


def test_a_failing_prolog_drains_its_node_and_requeues_the_job_held(cluster: tuple[Cluster, Path]) -> None:
    c, seen = cluster
    (seen / "fail-prolog-n02").touch()
    try:
        job_id = c.sbatch("-w", "n02", "-o", "/dev/null", "--wrap", "echo never", env=c.user_env(*NOBODY))
        job = wait_for(lambda: (j := c.job(job_id))["restart_count"] == 1 and j["state"] == "PENDING" and j, 30,
                       what="requeued")
        assert job["reason"] == "JobHeldAdmin"
        node = next(n for n in c.nodes() if n["name"] == "n02")
        assert node["drain"] and node["reason"] == "Prolog error"
        assert "Prolog error" in c.run("sinfo", "-R", "-h").stdout
    finally:
        (seen / "fail-prolog-n02").unlink()
    c.run("scontrol", "update", "nodename=n02", "state=resume")
    c.run("scontrol", "release", str(job_id))
    c.wait_state(job_id, "COMPLETED")


def test_a_failing_epilog_drains_its_node(cluster: tuple[Cluster, Path]) -> None:
    c, seen = cluster
    (seen / "fail-epilog-n01").touch()
    try:
        job_id = c.sbatch("-w", "n01", "-o", "/dev/null", "--wrap", "true", env=c.user_env(*NOBODY))
        c.wait_state(job_id, "COMPLETED")  # the job itself is done
        wait_for(lambda: next(n for n in c.nodes() if n["name"] == "n01")["reason"] == "Epilog error", 30,
                 what="n01 drained by its epilog")
    finally:
        (seen / "fail-epilog-n01").unlink()
    c.run("scontrol", "update", "nodename=n01", "state=resume")


def test_a_failing_prolog_slurmctld_requeues_the_job_held(cluster: tuple[Cluster, Path]) -> None:
    c, seen = cluster
    (seen / "fail-prolog-ctld").touch()
    try:
        job_id = c.sbatch("-o", str(seen / "never.out"), "--wrap", "echo ran", env=c.user_env(*NOBODY))
        job = wait_for(lambda: (j := c.job(job_id))["restart_count"] == 1 and j["state"] == "PENDING" and j, 30,
                       what="requeued")
        assert job["reason"] == "JobHeldAdmin" and not (seen / "never.out").exists()
        assert not any(n["drain"] for n in c.nodes())  # the controller's prolog drains no node
    finally:
        (seen / "fail-prolog-ctld").unlink()
    c.run("scontrol", "release", str(job_id))
    c.wait_state(job_id, "COMPLETED")


def test_a_job_stays_completing_until_its_epilog_is_done_even_across_an_agent_restart(
        cluster: tuple[Cluster, Path]) -> None:
    c, seen = cluster
    hold = seen / "hold-epilog-n02"
    hold.touch()
    go = seen / "go-epilog-restart"
    started = seen / "started-epilog-restart"
    try:
        job_id = c.sbatch("-w", "n02", "-o", "/dev/null", "--wrap",
                          f"touch {started}; while [ ! -e {go} ]; do sleep 0.1; done", env=c.user_env(*NOBODY))
        # the script runs on its node (RUNNING alone may come before the agent has launched it)
        wait_for(started.exists, 30, what="the job's script started")
        c.kill_agent(0)  # the agent dies while the job runs: its Epilog is still owed when it ends
        c.start_agent(0)
        c.wait_nodes_up()
        go.touch()
        saw(seen, f"epilog_slurmd.{job_id}.n02")
        assert c.job(job_id)["state"] == "COMPLETING"
        assert c.run("squeue", "-h", "-j", str(job_id), "-o", "%t").stdout.strip() == "CG"
        c.kill_agent(0)  # and dies again while the Epilog runs: the restarted agent runs it again
        (seen / f"epilog_slurmd.{job_id}.n02").unlink()
        c.start_agent(0)
        saw(seen, f"epilog_slurmd.{job_id}.n02")
        assert c.job(job_id)["state"] == "COMPLETING"
    finally:
        hold.unlink()
        go.unlink(missing_ok=True)
        started.unlink(missing_ok=True)
    c.wait_state(job_id, "COMPLETED")


def test_a_completing_job_can_be_requeued_and_runs_once_its_node_is_clean(cluster: tuple[Cluster, Path]) -> None:
    """Slurm's rule: scontrol requeue takes a job that has ended but whose nodes are still cleaning
    up (COMPLETING). Its run keeps its record as it ended; the next run waits for the Epilog."""
    c, seen = cluster
    hold = seen / "hold-epilog-n01"
    runs = seen / "completing-requeue-runs"
    hold.touch()
    try:
        job_id = c.sbatch("-w", "n01", "-o", "/dev/null", "--wrap", f"echo $SLURM_RESTART_COUNT >> {runs}",
                          env=c.user_env(*NOBODY))
        saw(seen, f"epilog_slurmd.{job_id}.n01")
        # the agent starts the Epilog as the job's end travels to the controller: wait for it there
        c.wait_state(job_id, "COMPLETING")
        c.run("scontrol", "requeue", str(job_id))
        job = c.job(job_id)
        assert (job["state"], job["restart_count"]) == ("PENDING", 1), job
        # not before the Epilog is done, not twice
        assert c.run("scontrol", "requeue", str(job_id), check=False).stderr == \
            "scontrol: error: Job is pending execution\n"
        assert runs.read_text().split() == ["0"]
    finally:
        hold.unlink()
    c.wait_state(job_id, "COMPLETED")
    assert runs.read_text().split() == ["0", "1"]
    wait_for(lambda: c.run("sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "-o", "State").stdout.split()
             == ["COMPLETED", "COMPLETED"], 30, what="both runs' records")

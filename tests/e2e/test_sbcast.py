"""sbcast on an emulated cluster, as a user copies a program to a job's nodes before running it:
the file arrives whole with the source's modes (and times with -p), is kept unless -f, and every
refusal names the node and the reason, in Slurm's words."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("sbcast"), nodes=3, cpus=2).start()
    yield running
    running.stop()


@pytest.fixture
def job(cluster: Cluster) -> Iterator[int]:
    """A running two-node job to broadcast to; cancelled after."""
    job_id = cluster.sbatch("-N2", "--wrap", "sleep 300")
    cluster.wait_state(job_id, "RUNNING")
    yield job_id
    cluster.run("scancel", str(job_id))


def sbcast(cluster: Cluster, job: int, *args: str):
    return cluster.run("sbcast", *args, env=dict(cluster.env, SLURM_JOB_ID=str(job)), check=False)


def test_a_file_reaches_the_jobs_nodes_whole_with_its_modes(cluster: Cluster, job: int, tmp_path: Path) -> None:
    source = tmp_path / "prog"
    source.write_bytes(os.urandom(5 << 20) + b"end")  # more than one block and one pipe's worth
    source.chmod(0o751)
    os.utime(source, (1_600_000_000, 1_600_000_100))
    dest = tmp_path / "out" / "prog"
    dest.parent.mkdir()
    for args in ([], ["-C"], ["-C", "-s", "64k"]):  # plain, compressed, in small blocks
        done = sbcast(cluster, job, *args, "-f", str(source), str(dest))
        assert (done.returncode, done.stderr) == (0, "")
        assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
        assert stat.S_IMODE(dest.stat().st_mode) == 0o751
    assert int(dest.stat().st_mtime) != 1_600_000_100  # times only with -p
    os.utime(source, (1_600_000_000, 1_600_000_100))  # (reading it moved its access time)
    assert sbcast(cluster, job, "-f", "-p", str(source), str(dest)).returncode == 0
    assert (int(dest.stat().st_atime), int(dest.stat().st_mtime)) == (1_600_000_000, 1_600_000_100)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["prog"]  # nothing half-written left beside it
    # the job's tasks see it on each of its nodes
    step = cluster.run("srun", f"--jobid={job}", "-N2", "-l", "sha256sum", str(dest))
    assert len(set(line.split()[1] for line in step.stdout.splitlines())) == 1


def test_the_destination_is_kept_unless_forced(cluster: Cluster, job: int, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text("first\n")
    second.write_text("second\n")
    dest = tmp_path / "dest"
    assert sbcast(cluster, job, str(first), str(dest)).returncode == 0
    kept = sbcast(cluster, job, str(second), str(dest))
    assert kept.returncode == 1
    assert sorted(kept.stderr.splitlines()) == [f"sbcast: error: REQUEST_FILE_BCAST({n}): File exists"
                                                for n in ("n01", "n02")]
    assert dest.read_text() == "first\n"
    assert sbcast(cluster, job, "-f", str(second), str(dest)).returncode == 0
    assert dest.read_text() == "second\n"
    # a relative destination is from the current folder; -w names some of the job's nodes
    done = cluster.run("sbcast", "-j", str(job), "-w", "n02", str(first), "relative.txt", check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert (cluster.work / "relative.txt").read_text() == "first\n"


def test_refusals_say_why_in_slurms_words(cluster: Cluster, job: int, tmp_path: Path) -> None:
    source = tmp_path / "s"
    source.write_text("x")
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_JOB_ID"}
    cases = [
        (["sbcast", str(source)], "Need two file names, have 1 names\nTry \"sbcast --help\" for more information\n"),
        (["sbcast", str(source), "/tmp/"], "sbcast: error: Target filename cannot be a directory.\n"),
        (["sbcast", str(source), "/tmp/x"], "sbcast: error: Need a job id to run this command.  Run from within "
                                            "a Slurm job or use the --jobid option.\n"),
        (["sbcast", "-j", str(job), str(tmp_path / "none"), "/tmp/x"],
         f"sbcast: error: Can't open `{tmp_path / 'none'}`: No such file or directory\n"),
        (["sbcast", "-j", str(job), "-w", "n03", str(source), "/tmp/x"],
         f"sbcast: error: Not all nodes in --nodelist/-w 'n03' are in job {job}.\n"),
        (["sbcast", "-j", "999999", str(source), "/tmp/x"], "sbcast: error: Invalid job id specified\n"),
    ]
    for args, expected in cases:
        done = cluster.run(*args, env=env, check=False)
        assert (done.returncode, done.stderr) == (1, expected), args
    missing = sbcast(cluster, job, str(source), str(tmp_path / "no" / "such" / "dir" / "x"))
    assert missing.returncode == 1
    assert "REQUEST_FILE_BCAST(n01): No such file or directory" in missing.stderr
    ended = cluster.sbatch("--wrap", "true")
    wait_for(lambda: cluster.job(ended)["state"] == "COMPLETED", 30, what="the job's end")
    late = sbcast(cluster, ended, str(source), str(tmp_path / "late"))
    assert (late.returncode, late.stderr) == (1, "sbcast: error: Job/step already completing or completed\n")


def test_sgather_brings_each_nodes_file_back(cluster: Cluster) -> None:
    """sgather SOURCE DEST inside a job: every node's SOURCE comes back as DEST.<node> (a folder with
    -r, gzipped on the wire with -C, its times with -p), the source removed unless -k; a node
    without it fails the command unless -f."""
    folder = cluster.work / "gather"
    (folder / "tree" / "sub").mkdir(parents=True)
    (folder / "data.bin").write_bytes(bytes(range(256)) * 40)
    (folder / "tree" / "sub" / "leaf").write_text("leaf\n")
    os.utime(folder / "data.bin", (1_700_000_000, 1_700_000_000))
    script = ("sgather -k -p data.bin got && sgather -k -r -C tree trees && sgather only-here none; echo rc=$?; "
              "sgather -f only-here none; echo rc=$?; srun -N1 -w n01 touch once; sgather -F1 once back; echo rc=$?")
    job_id = cluster.sbatch("-N2", "-D", str(folder), "-o", "out", "--wrap", script)
    cluster.wait_state(job_id, "COMPLETED", timeout=60)
    said = (folder / "out").read_text()
    assert "rc=1\n" in said and "sgather(n01): error: Can't open only-here" in said
    for node in ("n01", "n02"):
        assert (folder / f"got.{node}").read_bytes() == bytes(range(256)) * 40
        assert (folder / f"got.{node}").stat().st_mtime == 1_700_000_000
        assert (folder / f"trees.{node}" / "sub" / "leaf").read_text() == "leaf\n"
    assert said.count("rc=0\n") == 1 and said.endswith("rc=1\n")  # -f; then n02 had no "once"
    assert (folder / "back.n01").exists() and not (folder / "once").exists()  # removed without -k

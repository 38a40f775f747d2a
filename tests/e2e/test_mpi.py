"""MPI programs launched as HPC users launch them, on an emulated cluster of four virtual nodes:
srun --mpi=pmi2 with Debian's MPICH, and the MPI launchers (Open MPI's mpirun, MPICH's mpiexec)
inside sbatch allocations, starting their daemons through our srun. Each program is compiled here
with the distribution's mpicc; its ranks must agree on their number and on an Allreduce."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, ensure_munge

pytestmark = pytest.mark.e2e

HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, token = -1; char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && rank == 1) { if (argv[1][0] == 'a') MPI_Abort(MPI_COMM_WORLD, 7); else exit(3); }
    gethostname(host, sizeof host);
    /* a ring: each rank hands its number on to the next, across nodes */
    MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &token, 1, MPI_INT, (rank + size - 1) % size, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d ring %d\n", rank, size, host, sum, token);
    MPI_Finalize();
    return 0;
}
"""


def expected(ranks: int, per_node: int) -> list[str]:
    """What each rank prints, sorted: its node (block placement), the Allreduce, the ring's token."""
    total = ranks * (ranks - 1) // 2
    return sorted(f"rank {r} of {ranks} on n{r // per_node + 1:02d} sum {total} ring {(r - 1) % ranks}"
                  for r in range(ranks))


EXPECTED = expected(4, 2)
# Open MPI refuses root unless told; the tests run as root
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _compile(compiler: str, out: Path) -> Path:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (Debian's {'mpich' if 'mpich' in compiler else 'openmpi'} "
                    "development package)")
    source = out.with_suffix(".c")
    source.write_text(HELLO)
    subprocess.run([compiler, "-o", str(out), str(source)], check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("mpi"), nodes=8, cpus=4).start()  # 32 ranks at most
    yield running
    running.stop()


def test_mpi_types_are_listed_and_checked(cluster: Cluster) -> None:
    listed = cluster.run("srun", "--mpi=list")
    assert listed.stdout == ("MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n"
                             "specific pmix plugin versions available: pmix_v4\n")
    bogus = cluster.run("srun", "--mpi=bogus", "-n1", "true", check=False)
    assert bogus.returncode == 1
    assert bogus.stderr == "srun: error: Invalid MPI type 'bogus', --mpi=list for acceptable types\n"
    env = cluster.run("srun", "--mpi=pmi2", "-n2", "-l", "printenv", "SLURM_MPI_TYPE", "PMI_SIZE")
    assert sorted(env.stdout.splitlines()) == ["0: 2", "0: pmi2", "1: 2", "1: pmi2"]
    # no PMI for a program that does not use it, and no step failure either
    named = cluster.run("srun", "--mpi=pmi2", "-N2", "-l", "hostname").stdout
    assert sorted(named.splitlines()) == ["0: n01", "1: n02"]


def test_srun_mpi_pmi2_starts_mpich_ranks_across_nodes(cluster: Cluster) -> None:
    hello = _compile("mpicc.mpich", cluster.work / "hello_mpich")
    done = cluster.run("srun", "-N2", "-n4", "--mpi=pmi2", str(hello), timeout=120)
    assert sorted(done.stdout.splitlines()) == EXPECTED
    single = cluster.run("srun", "-n3", "--mpi=pmi2", str(hello), timeout=120)
    assert sorted(single.stdout.splitlines()) == expected(3, 4)


def test_thirty_two_ranks_on_eight_nodes_pass_a_ring_and_agree(cluster: Cluster) -> None:
    hello = _compile("mpicc.mpich", cluster.work / "hello_mpich")
    done = cluster.run("srun", "-N8", "-n32", "--mpi=pmi2", str(hello), timeout=600)
    assert sorted(done.stdout.splitlines()) == expected(32, 4)


@pytest.mark.parametrize("how", ["exits", "aborts"])
def test_a_failed_rank_ends_the_step_instead_of_hanging(cluster: Cluster, how: str) -> None:
    hello = _compile("mpicc.mpich", cluster.work / "hello_mpich")
    done = cluster.run("srun", "-N2", "-n4", "--mpi=pmi2", str(hello), how[0], check=False, timeout=120)
    assert done.returncode != 0
    assert "srun: Terminating StepId=" in done.stderr
    assert len(re.findall(r"slurmstepd: error: \*\*\* STEP \d+\.0 ON n01 CANCELLED AT \S+ \*\*\*\n", done.stderr)) == 1
    assert done.stderr.count("CANCELLED AT") == 1  # from the step's first node only, as slurmstepd
    if how == "exits":
        assert "task 1: Exited with exit code 3" in done.stderr


@pytest.mark.parametrize("launcher", ["mpirun.openmpi", "mpiexec.mpich"])
def test_mpi_launchers_run_inside_an_allocation(cluster: Cluster, launcher: str) -> None:
    compiler = "mpicc.openmpi" if "openmpi" in launcher else "mpicc.mpich"
    hello = _compile(compiler, cluster.work / f"hello_{compiler.split('.')[1]}")
    if shutil.which(launcher) is None:
        pytest.skip(f"{launcher} is not installed")
    out = cluster.work / f"{launcher}.out"
    job = cluster.sbatch("-N2", "-n4", "-o", str(out), "--wrap", f"{launcher} {hello}",
                         env=dict(cluster.env, **OMPI_ROOT))
    final = cluster.wait_state(job, {"COMPLETED", "FAILED"}, timeout=120)
    text = out.read_text()
    assert final["state"] == "COMPLETED", text
    assert sorted(line for line in text.splitlines() if line.startswith("rank ")) == EXPECTED


def test_mpiexec_runs_under_salloc(cluster: Cluster) -> None:
    hello = _compile("mpicc.mpich", cluster.work / "hello_mpich")
    if shutil.which("mpiexec.mpich") is None:
        pytest.skip("mpiexec.mpich is not installed")
    done = cluster.run("salloc", "-N2", "-n4", "mpiexec.mpich", str(hello), timeout=300)
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank ")) == EXPECTED


@pytest.fixture(scope="module")
def munge() -> None:
    """mpi/pmix's clients prove who they are with MUNGE (wattsched.noded.pmixhost)."""
    why = ensure_munge()
    if why:
        pytest.skip(f"mpi/pmix needs munged: {why}")


def test_srun_mpi_pmix_starts_open_mpi_ranks_directly(cluster: Cluster, munge: None) -> None:
    hello = _compile("mpicc.openmpi", cluster.work / "hello_openmpi")
    env = dict(cluster.env, **OMPI_ROOT)
    for mpi, nodes, ranks in (("pmix", 2, 4), ("pmix_v4", 1, 3), ("pmix", 8, 32)):
        done = cluster.run("srun", f"-N{nodes}", f"-n{ranks}", f"--mpi={mpi}", str(hello), env=env, timeout=600)
        assert sorted(done.stdout.splitlines()) == expected(ranks, -(-ranks // nodes)), done.stderr


@pytest.mark.parametrize("how", ["exits", "aborts"])
def test_a_failed_open_mpi_rank_ends_the_pmix_step(cluster: Cluster, munge: None, how: str) -> None:
    hello = _compile("mpicc.openmpi", cluster.work / "hello_openmpi")
    done = cluster.run("srun", "-N2", "-n4", "--mpi=pmix", str(hello), how[0], env=dict(cluster.env, **OMPI_ROOT),
                       check=False, timeout=120)
    assert done.returncode != 0
    reason = "task 1 ended without finalizing PMIx" if how == "exits" else "task 1 called PMIx_Abort with status 7"
    assert f"srun: error: mpi/pmix: {reason}" in done.stderr, done.stderr
    assert "srun: Terminating StepId=" in done.stderr
    assert done.stderr.count("CANCELLED AT") == 1


def test_virtual_nodes_have_their_own_names_and_temporary_trees(cluster: Cluster) -> None:
    out = cluster.run("srun", "-N2", "-l", "sh", "-c", 'hostname; getent hosts n02 | wc -l; echo "$TMPDIR"')
    lines = sorted(out.stdout.splitlines())
    assert [line for line in lines if line.endswith(("n01", "n02"))] == ["0: n01", "1: n02"]
    assert lines.count("0: 1") == 1 and lines.count("1: 1") == 1  # every node's name resolves on each
    tmpdirs = [line.split(": ", 1)[1] for line in lines if "/tmp/" in line]
    assert len(set(tmpdirs)) == 2 and all("/n01/" in t or "/n02/" in t for t in tmpdirs)


def test_multi_prog_gives_each_rank_its_line(cluster: Cluster) -> None:
    conf = cluster.work / "mpmd.conf"
    conf.write_text("# rank  program\n0      echo head %t\n"
                    "1-2,5  echo worker %o of rank %t 'two words' it\\'s\n"
                    "*      echo rest %t\n")
    done = cluster.run("srun", "-N2", "-n6", "-l", "--multi-prog", str(conf), "appended")
    assert sorted(done.stdout.splitlines()) == [
        "0: head 0 appended", "1: worker 0 of rank 1 two words it's appended",
        "2: worker 1 of rank 2 two words it's appended", "3: rest 3 appended", "4: rest 4 appended",
        "5: worker 2 of rank 5 two words it's appended"]
    # without -n, the ranks named set the task count
    conf.write_text("0-2 printenv SLURM_NTASKS\n")
    assert cluster.run("srun", "--multi-prog", str(conf)).stdout.split() == ["3", "3", "3"]
    conf.write_text("0 true\n0 false\n")
    bad = cluster.run("srun", "-n2", "--multi-prog", str(conf), check=False)
    assert (bad.returncode, bad.stderr) == (1, f"srun: error: Duplicate record for task 0\n"
                                               f"srun: error: Line 2 of configuration file {conf} invalid\n")
    conf.write_text("0 true\n")
    gap = cluster.run("srun", "-n2", "--multi-prog", str(conf), check=False)
    assert (gap.returncode, gap.stderr) == (1, f"srun: error: Configuration file {conf} invalid, no record for "
                                               "task id 1\n")


def test_multi_prog_ranks_of_two_programs_form_one_mpi_world(cluster: Cluster) -> None:
    hello = _compile("mpicc.mpich", cluster.work / "hello_mpich")
    copy = cluster.work / "hello_mpich_copy"
    shutil.copy(hello, copy)
    conf = cluster.work / "mpmd-mpi.conf"
    conf.write_text(f"0,2-3 {hello}\n1 {copy}\n")
    done = cluster.run("srun", "-N2", "-n4", "--mpi=pmi2", "--multi-prog", str(conf), timeout=120)
    assert sorted(done.stdout.splitlines()) == EXPECTED


def test_kill_on_bad_exit_ends_the_step_at_the_first_failure(cluster: Cluster) -> None:
    script = 'if [ "$SLURM_PROCID" = 1 ]; then exit 3; fi; sleep 600'
    done = cluster.run("srun", "-N2", "-n4", "-K", "sh", "-c", script, check=False, timeout=60)
    lines = done.stderr.splitlines()
    step = re.search(r"StepId=(\d+\.\d+)", done.stderr)
    assert step, done.stderr
    assert lines[:3] == ["srun: error: n01: task 1: Exited with exit code 3",
                         f"srun: Terminating StepId={step.group(1)}",
                         f"slurmstepd: error: *** STEP {step.group(1)} ON n01 CANCELLED AT "
                         f"{lines[2].split(' AT ')[1].split(' ')[0]} ***"], done.stderr
    assert sorted(lines[3:]) == ["srun: error: n01: task 0: Terminated", "srun: error: n02: tasks 2-3: Terminated"]
    assert done.returncode == 128 + 15
    # -K0, and without -K: the other tasks run to their end
    script = 'if [ "$SLURM_PROCID" = 1 ]; then exit 3; fi; sleep 1; echo done'
    for args in (["-K0"], []):
        done = cluster.run("srun", "-N2", "-n4", *args, "sh", "-c", script, check=False, timeout=60)
        assert (done.returncode, done.stdout.split(), done.stderr) == (
            3, ["done"] * 3, "srun: error: n01: task 1: Exited with exit code 3\n")
    env = dict(cluster.env, SLURM_KILL_BAD_EXIT="1")
    done = cluster.run("srun", "-n2", "sh", "-c", 'exit "$SLURM_PROCID"', env=env, check=False)
    assert "srun: Terminating StepId=" in done.stderr

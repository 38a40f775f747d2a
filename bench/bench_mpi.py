"""MPI launch latency, wattsched beside real Slurm: ``srun -N8 -n<R> --mpi=pmi2`` of one MPICH
program on 8 nodes of 8 CPUs, in one run.

The program (compiled here with Debian's mpicc.mpich) reports, per rank, the wall clock after
MPI_Init and after MPI_Finalize; with srun's own start they give the two figures the issue names:
from the allocation request to every rank past MPI_Init, and to every rank past MPI_Finalize, plus
srun's whole wall time. Each figure is the median of ``--runs`` launches, for 8, 32 and 64 ranks.
Slurm is Debian's slurm-wlm on loopback (loopback_slurm.py: one slurmd per node, its mpi/pmi2);
wattsched is ``wattsched emulate`` as bench_vs_slurm.py starts it. Run as root:

    .venv/bin/python bench/bench_mpi.py [--runs 5] [--ranks 8,32,64]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_slurm import Emulated, ratio
from loopback_slurm import LoopbackSlurm, prepare
from machine import describe

from wattsched.harness.testing import BIN

NODES, CPUS = 8, 8
PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    double inited = now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    printf("%d %.6f %.6f\n", rank, inited, now());
    return 0;
}
"""


def compile_program(folder: Path) -> Path | None:
    if shutil.which("mpicc.mpich") is None:
        return None
    source, binary = folder / "mpi_timing.c", folder / "mpi_timing"
    source.write_text(PROGRAM)
    subprocess.run(["mpicc.mpich", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def launch(bin_dir: Path, env: dict[str, str], program: Path, ranks: int) -> tuple[float, float, float]:
    """One srun: seconds from its start to the last rank past MPI_Init, past MPI_Finalize, and to
    srun's own end."""
    started = time.time()
    done = subprocess.run([str(bin_dir / "srun"), f"-N{NODES}", f"-n{ranks}", "--mpi=pmi2", str(program)], env=env,
                          capture_output=True, text=True, timeout=600)
    ended = time.time()
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(rows) != ranks:
        raise RuntimeError(f"srun -n{ranks} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return (max(float(r[1]) for r in rows) - started, max(float(r[2]) for r in rows) - started, ended - started)


def measure(bin_dir: Path, env: dict[str, str], program: Path, ranks: list[int], runs: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    launch(bin_dir, env, program, ranks[0])  # a first launch warms caches on both sides alike
    for count in ranks:
        samples = [launch(bin_dir, env, program, count) for _ in range(runs)]
        for index, what in enumerate(("past MPI_Init", "past MPI_Finalize", "srun's wall time")):
            figures[f"{count} ranks: {what} (ms)"] = statistics.median(s[index] for s in samples) * 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ranks", default="8,32,64")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    print("bench: MPI launch latency, wattsched beside Slurm (srun --mpi=pmi2, MPICH), one run")
    print(f"machine: {describe()}")
    why, version = prepare()
    if why:
        print(f"not measured: {why}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        program = compile_program(Path(tmp))
        if program is None:
            print("not measured: mpicc.mpich is not installed (Debian's libmpich-dev)")
            return
        slurm = LoopbackSlurm(Path(tmp) / "slurm", NODES, CPUS).start()
        try:
            theirs = measure(Path("/usr/bin"), slurm.env, program, ranks, args.runs)
        finally:
            slurm.stop()
        emulated = Emulated(Path(tmp), NODES, CPUS, 1000).start()
        try:
            ours = measure(BIN, emulated.env, program, ranks, args.runs)
        finally:
            emulated.stop()
    print(f"workload: srun -N{NODES} -n<ranks> --mpi=pmi2 of an MPI_Init, MPI_Barrier, MPI_Finalize program, "
          f"{NODES} nodes x {CPUS} CPUs on loopback, median of {args.runs}; {version} (one slurmd per node) "
          "against wattsched emulate")
    width = max(map(len, theirs))
    print(f"{'figure':<{width}}  {'Slurm':>10}  {'wattsched':>10}  wattsched/Slurm")
    for name, value in theirs.items():
        print(f"{name:<{width}}  {value:>10.1f}  {ours[name]:>10.1f}  {ratio(name, value, ours[name])}")


if __name__ == "__main__":
    main()

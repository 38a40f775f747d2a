"""wattsched's simulator beside AccaSim 1.1.3 (a published pure-Python HPC workload simulator, Galleguillos
et al. 2018) on the same trace and platform, in one run: the whole KTH SP2 trace (28,475 jobs) on its
100 one-processor nodes under EASY backfilling (AccaSim's EASYBackfilling with FirstFit; our
etc/kth100.conf: sched/backfill with bf_reservations=1, select/linear).

Each simulator runs as its users run it, in a process of its own, timed from the outside (interpreter
start, imports, reading the trace, simulating, writing the per-job results; ours also draws its two
plots, in a child that loads matplotlib on the other core while the replay runs) and measured for its
peak RSS and its CPU time (wait4: the processes it waited for count). AccaSim is installed with pip into a venv under
``~/.cache/wattsched-bench`` when absent; on Python 3.10+ its ``collections.Mapping`` import needs the
alias to ``collections.abc.Mapping`` that the driver sets before importing it. Both read the
decompressed trace. Printed: wall seconds, CPU seconds and peak MiB of each with their ratios, and the makespan
and mean wait each schedule comes to (the two differ a little: AccaSim runs a job its recorded run
time even past its request, where we end it at its limit, as Slurm would).

Usage: bench_accasim.py [--trace SWF.gz] [--runs N]   (default: KTH SP2, best of 1 run)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
PLATFORM = ROOT / "etc" / "kth100.conf"
ACCASIM = "accasim==1.1.3"
VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wattsched-bench" / "accasim-1.1.3"
# AccaSim's system: 100 nodes of one core (KTH SP2's processors), a processor of the trace being a core
SYSTEM = {"groups": {"sp2": {"core": 1}}, "resources": {"sp2": 100}, "equivalence": {"processor": {"core": 1}},
          "start_time": 0}
DRIVER = """
import collections, collections.abc, sys
collections.Mapping = collections.abc.Mapping  # AccaSim 1.1.3 imports it from collections
from accasim.base.simulator_class import Simulator
from accasim.base.scheduler_class import EASYBackfilling
from accasim.base.allocator_class import FirstFit
Simulator(sys.argv[1], sys.argv[2], EASYBackfilling(FirstFit()), RESULTS_FOLDER_PATH=sys.argv[3],
          show_statistics=False).start_simulation()
"""


def accasim_python() -> Path:
    """AccaSim's interpreter, its venv made and AccaSim installed when absent."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {ACCASIM} into {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", ACCASIM], check=True)
    return python


def timed(argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds of one run of ``argv``, which must succeed (the
    RSS and CPU time of the processes it waited for count: wattsched's plotting child)."""
    # stderr to a file, not a pipe: wait4 reaps the child itself, and a full pipe would stall it
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)
        _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        process.returncode = code  # reaped here: Popen must not wait for it again
        if code != 0:
            errors.seek(0)
            sys.exit(f"bench_accasim: {argv[0]} failed ({code}): {errors.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def run_accasim(python: Path, trace: Path, work: Path) -> dict:
    system = work / "system.json"
    system.write_text(json.dumps(SYSTEM))
    out = work / "accasim"
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, cpu = timed([str(python), "-c", DRIVER, str(trace), str(system), str(out)], work)
    stats = (out / f"stats-{trace.name}").read_text()
    number = {key: float(re.search(rf"{key}: ([\d.]+)", stats).group(1))  # type: ignore[union-attr]
              for key in ("Total jobs", "Makespan", "Avg. waiting times")}
    return {"wall_s": wall, "peak_mib": peak, "cpu_s": cpu, "jobs": int(number["Total jobs"]),
            "makespan_s": number["Makespan"], "mean_wait_s": number["Avg. waiting times"]}


def run_wattsched(trace: Path, work: Path) -> dict:
    out = work / "wattsched"
    command = Path(sys.executable).parent / "wattsched"
    wall, peak, cpu = timed([str(command), "simulate", str(PLATFORM), str(trace), "-o", str(out), "-q"], work)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "peak_mib": peak, "cpu_s": cpu, "jobs": summary["jobs"],
            "makespan_s": summary["makespan_s"], "mean_wait_s": summary["mean_wait_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--runs", type=int, default=1, help="runs of each, alternating; the best counts")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"bench_accasim: {args.trace} not found (the Parallel Workloads Archive's KTH-SP2 trace)")
    python = accasim_python()
    with tempfile.TemporaryDirectory(prefix="bench-accasim-") as tmp:
        work = Path(tmp)
        trace = work / args.trace.name.removesuffix(".gz")
        with gzip.open(args.trace) as source, open(trace, "wb") as target:
            shutil.copyfileobj(source, target)
        theirs, ours = [], []
        for _ in range(max(1, args.runs)):
            theirs.append(run_accasim(python, trace, work))
            ours.append(run_wattsched(trace, work))
    a, w = min(theirs, key=lambda r: r["wall_s"]), min(ours, key=lambda r: r["wall_s"])
    report("wattsched's simulator beside AccaSim 1.1.3",
           f"{args.trace.name} on {PLATFORM.name} (EASY backfilling, 100 one-core nodes), "
           f"best of {max(1, args.runs)} run(s) each, alternating", {
               "AccaSim": f"{a['wall_s']:.1f} s ({a['cpu_s']:.1f} s of CPU), peak RSS {a['peak_mib']:.0f} MiB; "
                          f"{a['jobs']} jobs, makespan {a['makespan_s']:.0f} s, mean wait {a['mean_wait_s']:.0f} s",
               "wattsched": f"{w['wall_s']:.1f} s ({w['cpu_s']:.1f} s of CPU), peak RSS {w['peak_mib']:.0f} MiB; "
                            f"{w['jobs']} jobs, makespan {w['makespan_s']:.0f} s, mean wait {w['mean_wait_s']:.0f} s",
               "wattsched against AccaSim": f"time x{w['wall_s'] / a['wall_s']:.2f} (target < 1), CPU time "
                                            f"x{w['cpu_s'] / a['cpu_s']:.2f}, memory "
                                            f"x{w['peak_mib'] / a['peak_mib']:.2f} (target <= 2)"})


if __name__ == "__main__":
    main()

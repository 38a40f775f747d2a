"""A 20,000-node machine emulated on this host (etc/scale20k.conf: 20,000 virtual nodes of 48
cores in 20 agent processes, each node metered by the emulated power model every 30 s).

Prints, in one run:
- start-up until every node has registered, and the steady-state CPU that registration,
  heartbeats and energy polling cost (controller and agents, over two heartbeat periods);
- the machine filled by 20 jobs of 1,000 exclusive nodes, then 100,000 held jobs submitted (10
  arrays of 10,000 tasks) and `squeue -r` and `squeue` timed over them (median of 3);
- the jobs released: the controller's own timings of its next scheduling pass and backfill pass
  over the 100,000 pending jobs, as sdiag reports them.

Targets (issue 31, item 4): steady state under 25 % of one core, a scheduling pass with 100,000
pending jobs under 1 s, squeue of 100,000 jobs under 2 s. No Slurm figure stands beside these: a
20,000-node Slurm needs 20,000 slurmd (or a front-end build) that this host cannot hold.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_seconds, report, rss_mib

ETC = Path(__file__).resolve().parent.parent / "etc"
BIN = Path(sys.executable).parent
NODES, FILLERS, ARRAYS, TASKS = 20_000, 20, 10, 10_000


def _run(env: dict[str, str], *argv: str) -> str:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, check=True, capture_output=True,
                          text=True).stdout


def _wait(what: str, predicate: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``predicate`` holds, polling each half second."""
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(f"bench_scale: timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)
    return time.perf_counter() - started


def _wall(env: dict[str, str], argv: list[str], runs: int = 3) -> tuple[float, int]:
    """Median wall time of ``argv`` and the lines it printed."""
    times, lines = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        out = _run(env, *argv)
        times.append(time.perf_counter() - started)
        lines = out.count("\n")
    return statistics.median(times), lines


def main(window_s: float = 60.0) -> None:
    root = Path(tempfile.mkdtemp(prefix="wattsched-scale-"))
    conf = root / "scale20k.conf"
    conf.write_text((ETC / "scale20k.conf").read_text().replace("../wattsched-state/scale20k", str(root / "state")))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"WATTSCHED_CONF": str(conf)}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ETC.parent / "wattsched")], env=env,
                   stdout=subprocess.DEVNULL)
    figures: dict[str, str] = {}
    try:
        started = time.perf_counter()
        subprocess.run([str(BIN / "wattsched"), "emulate", "--daemon", str(conf)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        figures["startup_until_all_registered_s"] = f"{time.perf_counter() - started:.1f}"
        info = json.loads((root / "state" / "ctld" / "emulate.json").read_text())
        controller, agents = info["controller"], info["agents"]
        print(f"bench_scale: {NODES} nodes up; measuring the steady state for {window_s:.0f} s", file=sys.stderr)
        time.sleep(5)
        before = {p: cpu_seconds(p) for p in (controller, *agents)}
        time.sleep(window_s)
        ctl = 100 * (cpu_seconds(controller) - before[controller]) / window_s
        ags = 100 * sum(cpu_seconds(p) - before[p] for p in agents) / window_s
        figures["steady_state_cpu_percent_of_one_core (controller + agents)"] = \
            f"{ctl + ags:.1f} ({ctl:.1f} + {ags:.1f}; target < 25)"
        figures["rss_mib idle (controller / agents, total)"] = \
            f"{rss_mib(controller):.0f} / {sum(rss_mib(p) for p in agents):.0f}"

        per = NODES // FILLERS
        for _ in range(FILLERS):
            _run(env, "sbatch", "-N", str(per), "--exclusive", "-t", "1-0", "-o", "/dev/null",
                 "--wrap", "sleep 86400")
        _wait("the machine to fill", lambda: _run(env, "squeue", "-h", "-t", "R", "-o", "%i").count("\n") == FILLERS,
              600)
        print(f"bench_scale: machine full; submitting {ARRAYS * TASKS} held jobs", file=sys.stderr)
        started = time.perf_counter()
        arrays = [_run(env, "sbatch", "--parsable", "-H", f"--array=0-{TASKS - 1}", "-n", "1", "-t", "60",
                       "-o", "/dev/null", "--wrap", "true").strip() for _ in range(ARRAYS)]
        figures["submit_100000_held (10 arrays of 10,000)_s"] = f"{time.perf_counter() - started:.1f}"
        wall, lines = _wall(env, ["squeue", "-r"])
        figures["squeue_-r_100000_pending_s (median of 3; target < 2)"] = f"{wall:.2f} ({lines} lines)"
        wall, lines = _wall(env, ["squeue"])
        figures["squeue_100000_pending_s (arrays collapsed)"] = f"{wall:.2f} ({lines} lines)"
        figures["controller_rss_mib (100,000 pending)"] = f"{rss_mib(controller):.0f}"

        diag = json.loads(_run(env, "sdiag", "--json"))
        _run(env, "scontrol", "release", *arrays)
        print("bench_scale: released; waiting for a scheduling pass and a backfill pass over them",
              file=sys.stderr)
        pending = ARRAYS * TASKS
        _wait("a scheduling pass over the queue", lambda: json.loads(_run(env, "sdiag", "--json"))["cycles"]
              > diag["cycles"] + 1, 300)
        _wait("a backfill pass over the queue", lambda: (d := json.loads(_run(env, "sdiag", "--json")))[
              "bf_cycles"] > diag["bf_cycles"] and d["bf_queue_len"] >= pending, 300)
        diag = json.loads(_run(env, "sdiag", "--json"))
        figures["scheduling_pass_ms (sdiag's last cycle; target < 1000)"] = \
            f"{diag['last_cycle_ms']:.0f} (max {diag['max_cycle_ms']:.0f}, depth {diag['queue_depth']}, " \
            f"{diag['jobs_pending']} pending)"
        figures["backfill_pass_ms (sdiag's last backfill cycle)"] = \
            f"{diag['bf_last_ms']:.0f} (depth {diag['bf_last_depth']} of {diag['bf_queue_len']})"
        figures["controller_rss_mib (100,000 pending, scheduled)"] = f"{rss_mib(controller):.0f}"
    finally:
        subprocess.run([str(BIN / "wattsched"), "emulate", "--stop", str(conf)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    report("20,000-node scale", f"etc/scale20k.conf: {NODES} virtual nodes x 48 cores in 20 agent processes, "
           f"emulated energy every 30 s; {FILLERS} jobs of {NODES // FILLERS} nodes fill it; "
           f"{ARRAYS} held arrays of {TASKS} one-CPU tasks, then released", figures)


if __name__ == "__main__":
    main()

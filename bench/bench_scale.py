"""A 20,000-node machine emulated on this host (etc/scale20k.conf: 20,000 virtual nodes of 48
cores in 20 agent processes, each node metered by the emulated power model every 30 s).

Prints, in one run:
- start-up until every node has registered, and the steady-state CPU that registration,
  heartbeats and energy polling cost (controller and agents, over two heartbeat periods);
- the machine filled by 20 jobs of 1,000 exclusive nodes, then 100,000 held jobs submitted (10
  arrays of 10,000 tasks) and `squeue -r` and `squeue` timed over them (median of 3);
- the jobs released: the controller's own timings of its scheduling and backfill passes over the
  100,000 pending jobs once they are settled, as sdiag reports them (and the first pass after the
  release, which builds every job's request).

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


def _answer(env: dict[str, str]) -> float:
    """Median time of the controller's answer to squeue's request, received whole but not parsed."""
    import httpx

    from wattsched.cli import fmt, squeue

    token = _run(env, "scontrol", "token").strip().split("=", 1)[1]
    params = {"state": list(squeue.DEFAULT_STATES), "columns": "true",
              "key": sorted(squeue._keys(fmt.parse_format(squeue.DEFAULT), {}))}
    port = next(line.split("=", 1)[1] for line in Path(env["WATTSCHED_CONF"]).read_text().splitlines()
                if line.startswith("SlurmctldPort="))
    times = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as client:
        for _ in range(3):
            started = time.perf_counter()
            client.get("/v1/jobs", params=params).raise_for_status()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


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
        figures["of which the controller's answer_s (GET /v1/jobs as squeue asks it)"] = f"{_answer(env):.2f}"
        wall, lines = _wall(env, ["squeue"])
        figures["squeue_100000_pending_s (arrays collapsed)"] = f"{wall:.2f} ({lines} lines)"
        figures["controller_rss_mib (100,000 pending)"] = f"{rss_mib(controller):.0f}"

        diag = json.loads(_run(env, "sdiag", "--json"))
        _run(env, "scontrol", "release", *arrays)
        print("bench_scale: released; waiting for a scheduling pass and a backfill pass over them",
              file=sys.stderr)
        pending = ARRAYS * TASKS

        def diag_now() -> dict:
            return json.loads(_run(env, "sdiag", "--json"))

        # the first pass after the release builds every job's request; the ones after it are the
        # steady state, and so is a second backfill pass (bf_interval=30 s)
        _wait("a scheduling pass over the queue", lambda: diag_now()["cycles"] > diag["cycles"], 300)
        first = diag_now()
        _wait("two backfill passes over the queue", lambda: (d := diag_now())["bf_cycles"] > diag["bf_cycles"] + 1
              and d["bf_queue_len"] >= pending, 300)
        settled = diag_now()
        _wait("three more scheduling passes", lambda: diag_now()["cycles"] > settled["cycles"] + 2, 300)
        diag = diag_now()
        figures["scheduling_pass_ms (sdiag's last cycle, timers included; target < 1000)"] = \
            f"{diag['last_cycle_ms']:.0f} (depth {diag['queue_depth']}, {diag['jobs_pending']} pending; the " \
            f"first after the release, which builds every request: {first['last_cycle_ms']:.0f})"
        figures["backfill_pass_ms (sdiag's last backfill cycle)"] = \
            f"{diag['bf_last_ms']:.0f} (depth {diag['bf_last_depth']} of {diag['bf_queue_len']}; max " \
            f"{diag['bf_max_ms']:.0f})"
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

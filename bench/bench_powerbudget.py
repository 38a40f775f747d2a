"""The moving power budget (PowerPlugin=power/balance) against the cap's admission and frequency
alone, on the same workload and cap, through the simulator (the controller's policy code in
virtual time).

Cluster: 32 nodes x 32 cores with the seeds' node watts (Hautreux 2013: IdleWatts=450,
MaxWatts=950) and a CpuFreqWatts ladder from 2.4 GHz (950 W) down to 1.2 GHz (550 W);
PowerCap at 60 % of MaxWatts (18,240 W, of which the idle nodes alone take 14,400 W).
Workload: 300 whole-node jobs of 1-4 nodes, run times 10-60 min at full speed, limits 2x that,
arriving over 6 hours (Poisson, seed 7); half compute-bound (energy factor 1.0: busy all the
time), half memory-bound (0.35: busy a third of the time, waiting on memory the rest). FIFO
priority, EASY backfill. Four runs:

- admission: the cap counts each busy node at MaxWatts (Hautreux's prototype);
- admission + --power-fit: a job that does not fit at full speed starts at the highest clock
  that fits, and runs longer as its energy factor says;
- moving budget: PowerPlugin=power/balance with Slurm's PowerParameters defaults, the busy
  nodes held to limits moved by their measured draw, admission counting the limits, a job that
  does not fit at full power started with its nodes held to what fits;
- moving budget + --power-fit: both.

Prints, per run: makespan, energy, mean wait, the most watts over the cap and for how long, the
peak draw, jobs slowed past their limit. Target (issue 53): the cap never exceeded, and with the
moving budget the workload ends sooner (or uses less energy) than with admission and frequency
alone.
The same comparison on the emulated cluster (real controller, agents, RAPL-shaped limits and
throttled CPUs): 4 virtual nodes of 1 CPU (95-190 W), PowerCap=500 W, 12 one-node jobs of fixed
work (30 s of computing at full speed; every other one computes and waits in turns, 50 ms each),
all submitted at once with --power-fit, with and without the budget; makespan, the nodes' metered
energy, the highest measured draw.
Usage: bench_powerbudget.py [JOBS] [--simulator-only].
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import config
from wattsched.simulator import engine
from wattsched.simulator.workload import SimJob, Workload

NODES, CORES, IDLE, MAX = 32, 32, 450, 950
LADDER = "2400000:950,2200000:850,2000000:770,1800000:700,1600000:640,1400000:590,1200000:550"
CAP = round(0.6 * NODES * MAX)
PLATFORM = f"""ClusterName=budget
SlurmctldHost=localhost(127.0.0.1)
SchedulerType=sched/backfill
PriorityType=priority/basic
SelectType=select/cons_tres
PowerCap={CAP}
NodeName=DEFAULT CPUs={CORES} RealMemory=64000 IdleWatts={IDLE} MaxWatts={MAX} CpuFreqWatts={LADDER}
NodeName=n[001-{NODES:03d}]
PartitionName=p Nodes=n[001-{NODES:03d}] Default=YES MaxTime=INFINITE State=UP
"""
RUNS = (("admission", {}, False), ("admission + --power-fit", {}, True),
        ("moving budget", {"power_plugin": "power/balance"}, False),
        ("moving budget + --power-fit", {"power_plugin": "power/balance"}, True))


def workload(count: int, seed: int = 7) -> Workload:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for job_id in range(1, count + 1):
        t += rng.expovariate(count / (6 * 3600))
        nodes = rng.choice((1, 1, 2, 2, 3, 4))
        runtime = rng.uniform(10, 60) * 60
        factor = 1.0 if job_id % 2 else 0.35
        jobs.append(SimJob(job_id, t, runtime, 2 * runtime, nodes * CORES, user=f"user{job_id % 3}",
                           energy_factor=factor))
    return Workload(jobs, {"Generator": f"bench_powerbudget, {count} jobs, seed {seed}"})


def simulated(count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "budget.conf"
        path.write_text(PLATFORM)
        platform = config.load(path)
    jobs = workload(count)
    figures: dict[str, str] = {}
    for name, changes, fit in RUNS:
        s = engine.Simulation(config.with_overrides(platform, **changes), jobs, power_fit=fit).run().summary()
        figures[name] = (f"makespan {s['makespan_s'] / 3600:.2f} h, energy {s['energy_j'] / 3.6e6:.1f} kWh, "
                         f"mean wait {s['mean_wait_s'] / 60:.1f} min, over the cap {s['over_cap_w']:.0f} W "
                         f"for {s['over_cap_s']:.0f} s, peak {s['peak_w']:,.0f} W of {CAP:,} W, "
                         f"{s['timeouts']} past their limit, {s['wall_s']:.1f} s to simulate")
    report("the moving power budget against admission and frequency alone (simulator)",
           f"{count} whole-node jobs, half compute-bound, half memory-bound, on {NODES} nodes "
           f"(IdleWatts={IDLE}, MaxWatts={MAX}) under PowerCap={CAP} W", figures)


# --- the emulated cluster ------------------------------------------------------------------------

E_NODES, E_IDLE, E_MAX, E_CAP = 4, 95, 190, 500
E_LADDER = "2400000:190,2000000:158,1600000:134,1200000:116"
E_RUNS = tuple(run for run in RUNS if run[2])  # without --power-fit, PowerCap=500 runs the jobs one by one
# Fixed work, not fixed time: the seconds a job's process was let run (a gap of 20 ms or more is a
# stop of the emulated clock's throttle, at least 40 ms; the host's own time-sharing between the
# virtual nodes, a few ms, counts as running, so four nodes on two cores do not slow each other).
# Every other job waits on "memory" between its 50 ms of computing: a slower clock stretches only
# the computing.
WORK = ("import sys, time\nleft, wait = float(sys.argv[1]), float(sys.argv[2])\nlast = time.monotonic()\n"
        "while left > 0:\n    chunk = 0.05\n    while chunk > 0:\n        now = time.monotonic()\n"
        "        gap, last = now - last, now\n        if gap < 0.02:\n            chunk -= gap\n"
        "    left -= 0.05\n    if wait:\n        time.sleep(wait)\n        last = time.monotonic()\n")


def emulated(count: int, work_s: float) -> None:
    from wattsched.harness.testing import Cluster, wait_for

    figures: dict[str, str] = {}
    for name, changes, _fit in E_RUNS:
        extra = "EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n" \
                f"PowerCap={E_CAP}\nSchedulerType=sched/backfill\n"
        if changes:
            extra += "PowerPlugin=power/balance\nPowerParameters=balance_interval=2,recent_job=4\n"
        with tempfile.TemporaryDirectory(prefix="wattsched-budget-") as folder:
            root = Path(folder)
            (root / "work.py").write_text(WORK)
            cluster = Cluster(root, nodes=E_NODES, cpus=1, extra=extra,
                              node_extra=f"IdleWatts={E_IDLE} MaxWatts={E_MAX} CpuFreqWatts={E_LADDER}").start()
            try:
                figures[name] = _emulated_run(cluster, wait_for, [
                    f"python3 {root / 'work.py'} {work_s if i % 2 == 0 else work_s / 2} {0 if i % 2 == 0 else 0.05}"
                    for i in range(count)])
            finally:
                cluster.stop()
    report("the moving power budget against admission and frequency alone (emulated cluster)",
           f"{count} one-node jobs of {work_s:.0f} s at full speed, half computing all the time, half half "
           f"of it, all with --power-fit, on {E_NODES} virtual nodes (IdleWatts={E_IDLE}, MaxWatts={E_MAX}) "
           f"under PowerCap={E_CAP} W; the budget every 2 s, recent_job=4", figures)


def _emulated_run(c, wait_for, scripts: list[str]) -> str:
    wait_for(lambda: all(n["metered"] for n in c.nodes()), 30, what="every node metered")
    before = sum(n["consumed_joules"] for n in c.nodes())
    began = time.time()
    ids = [c.sbatch("-t", "10", "--power-fit", "--wrap", script) for script in scripts]
    peak = 0.0
    while True:  # the measured draw, every half second, until the last job ends
        peak = max(peak, sum(n["current_watts"] for n in c.nodes()))
        if all(j["state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for j in c.jobs(*map(str, ids))):
            break
        time.sleep(0.5)
    makespan = time.time() - began
    energy = sum(n["consumed_joules"] for n in c.nodes()) - before
    late = sum(1 for r in c.accounted(*ids) if r["state"] != "COMPLETED")
    return (f"makespan {makespan:.0f} s, energy {energy / 1000:.1f} kJ, most measured {peak:.0f} W of "
            f"{E_CAP} W (over by {max(0.0, peak - E_CAP):.0f} W), {late} not COMPLETED")


def main() -> None:
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
    simulated(counts[0] if counts else 300)
    if "--simulator-only" not in sys.argv:
        emulated(12, 30.0)


if __name__ == "__main__":
    main()

"""Power-saving policies on one workload, through the simulator (the controller's policy code in
virtual time): always on, Slurm's idle timeout, the opportunistic shutdown, the energy-aware
backfill of Mämmelä et al. 2011 and the inertial shutdown of Poquet 2017.

Workload: the first N jobs of the KTH SP2 trace (../shared/traces, Poquet 2017's trace) on
etc/kth100.conf (100 machines, EASY backfilling, Poquet 2017's watts and switching times). Without
the trace, Mämmelä et al. 2011's synthetic workload (Table 5, 1-32 nodes) on the same platform.

Prints, per policy: total energy, saving against always-on, energy by node state, mean and max
waiting time and their change, and the number of switches.
Usage: bench_powersave.py [N [POLICY-PREFIX ...]].
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched import config
from wattsched.simulator import engine, workload

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"

POLICIES = [
    ("always on", {}),
    ("Slurm idle timeout (SuspendTime=1800)", {"suspend_time_s": 1800}),
    ("opportunistic (t_idle=60)", {"suspend_time_s": 60}),
    ("energy-aware backfill (T=50 s)", {"power_save_type": ("power_save/energy_aware",),
                                        "power_save_parameters": (("threshold", 50.0),)}),
    ("inertial (T=300 s, v_ub=1e4 s, f=2x)", {"power_save_type": ("power_save/inertial",),
                                              "power_save_parameters": (("period", 300.0),
                                                                        ("mu_threshold", 1e4))}),
]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    only = sys.argv[2:]  # optional policy names (prefixes) to run besides always-on
    platform = config.load(ROOT / "etc" / "kth100.conf")
    if TRACE.exists():
        jobs = workload.parse_swf(TRACE, max_jobs=count)
        described = f"KTH SP2 trace, first {len(jobs.jobs)} jobs ({jobs.clipped} clipped to their limit)"
    else:
        sys.stderr.write(f"bench_powersave: {TRACE} not found; using Mämmelä et al. 2011's synthetic workload\n")
        jobs = workload.synthetic_002(count, 32, 1, seed=1)
        described = f"Mämmelä et al. 2011 synthetic workload (Table 5, 1-32 nodes), {count} jobs"
    figures: dict[str, str] = {}
    baseline: dict | None = None
    for name, changes in POLICIES:
        if only and baseline is not None and not any(name.startswith(o) for o in only):
            continue
        summary = engine.Simulation(config.with_overrides(platform, **changes), jobs).run().summary()
        baseline = baseline or summary
        saved = 100 * (1 - summary["energy_j"] / baseline["energy_j"])
        by_state = ", ".join(f"{k[7:-2]} {summary[k] / 3.6e9:.2f}" for k in summary
                             if k.startswith("energy_") and k != "energy_j")
        mean, longest = summary["mean_wait_s"], summary["max_wait_s"]
        figures[name] = (f"{summary['energy_j'] / 3.6e9:.3f} MWh (saved {saved:5.1f} %; {by_state}); "
                         f"mean wait {mean:.0f} s ({mean - baseline['mean_wait_s']:+.0f}),"
                         f" max wait {longest:.0f} s ({longest - baseline['max_wait_s']:+.0f});"
                         f" switches {summary['switches_off']} off / {summary['switches_on']} on;"
                         f" simulated in {summary['wall_s']:.1f} s")
    report("power saving policies (simulated)",
           f"{described}, etc/kth100.conf (100 nodes, EASY, p_idle 95 W, p_comp 191 W, p_off 10 W, "
           "t_on->off 151.52 s, t_off->on 6.1 s)", figures)


if __name__ == "__main__":
    main()

"""Energy policies on a mixed workload (issue 33): the same six jobs, from compute-bound to
memory-bound (their application model in WATTSCHED_APP_MEMORY_BOUND), each a fixed amount of work
of about --seconds (default 10) at the highest frequency, run under monitoring, min_energy
(EnergyPolicyPenalty 0.10) and min_time (EnergyPolicyMinGain 0.7, starting at 1.6 GHz) on a real
emulated cluster: a 1-CPU virtual node of etc/emulated.conf's power table (95 W idle, 190 W at
2.4 GHz, 158/134/116 W at 2.0/1.6/1.2 GHz), one job at a time, energy metered every second.

Prints, for each job and policy, the frequency the policy chose, the run time and energy against
monitoring's and the model's projection, then the totals and the largest slowdown against the
bound. A shared VM's speed varies by +-20 % from run to run (the CPU time of the same work varies
as much), so time and energy are counted per CPU second of the job's work. Slurm has no energy
policy: the comparison is against monitoring, the same jobs as Slurm would run them.

Usage: bench_energypolicy.py [--seconds N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched.harness.testing import Cluster, wait_for

FREQS = "CpuFreqWatts=2400000:190,2000000:158,1600000:134,1200000:116"
SHARES = (0.0, 0.3, 0.5, 0.7, 0.85, 0.95)
POLICIES = ("monitoring", "min_energy", "min_time")
PENALTY = 0.10


def calibrate(seconds: float) -> int:
    """Loop iterations that take ``seconds`` on one of this machine's cores."""
    probe = subprocess.run([sys.executable, "-c", "import time\nt = time.perf_counter()\n"
                            "for i in range(20_000_000): pass\nprint(time.perf_counter() - t)"],
                           capture_output=True, text=True, check=True)
    return int(20_000_000 * seconds / float(probe.stdout))


def run_policy(cluster: Cluster, policy: str, loops: int) -> dict[float, dict]:
    """Each job of the workload under ``policy``, one at a time: run time, CPU time, energy, choice."""
    results: dict[float, dict] = {}
    work = f"python3 -c 'for i in range({loops}): pass'"
    for share in SHARES:
        env = dict(cluster.env, WATTSCHED_APP_MEMORY_BOUND=str(share))
        job_id = cluster.sbatch("-p", policy, "-w", "n01", "--wrap", work, env=env)
        job = cluster.wait_state(job_id, "COMPLETED", timeout=600)
        row = wait_for(lambda j=job_id: (r := cluster.accounted(j)[0])["consumed_energy_j"] and r, 60)
        cpu = sum(step["total_cpu_s"] for step in row["steps"])
        results[share] = {"seconds": (job["end_time"] - job["start_time"]) / cpu,
                          "joules": row["consumed_energy_j"] / cpu, "khz": row["policy_freq_khz"],
                          "pred_time": row["pred_time_factor"], "pred_energy": row["pred_energy_factor"]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    loops = calibrate(args.seconds)
    root = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    partitions = "\n".join(f"PartitionName={p} Nodes=n01 MaxTime=INFINITE EnergyPolicy={p}"
                           + (" Default=YES" if p == "monitoring" else "") for p in POLICIES)
    cluster = Cluster(root, nodes=1, cpus=1, extra="\n".join([
        "EmulatedNodes=YES", "AcctGatherEnergyType=acct_gather_energy/emulated", "AcctGatherNodeFreq=1",
        f"EnergyPolicyPenalty={PENALTY}", "EnergyPolicyMinGain=0.7", "EnergyPolicyMinTimeFreq=1600000"]),
        node_extra=f"IdleWatts=95 MaxWatts=190 {FREQS}", partitions=partitions).start()
    try:
        wait_for(lambda: all(n["metered"] for n in cluster.nodes()), 30)
        runs = {policy: run_policy(cluster, policy, loops) for policy in POLICIES}
    finally:
        cluster.stop()
    base = runs["monitoring"]
    figures = {}
    for policy in POLICIES[1:]:
        worst = 0.0
        for share in SHARES:
            got, ref = runs[policy][share], base[share]
            slowdown = got["seconds"] / ref["seconds"] - 1
            worst = max(worst, slowdown)
            figures[f"{policy}, memory-bound {share:.2f}"] = (
                f"{got['khz'] / 1e6:.1f} GHz  time {slowdown:+6.1%} (model {got['pred_time'] - 1:+6.1%})  "
                f"energy {got['joules'] / ref['joules'] - 1:+6.1%} (model {got['pred_energy'] - 1:+6.1%})")
        total, total_ref = (sum(r["joules"] for r in runs[policy].values()), sum(r["joules"] for r in base.values()))
        seconds, seconds_ref = (sum(r["seconds"] for r in runs[policy].values()),
                                sum(r["seconds"] for r in base.values()))
        figures[f"{policy}: total"] = (f"energy {total:.0f} J against {total_ref:.0f} J per CPU second of each job "
                                       f"({total / total_ref - 1:+.1%}), time {seconds:.2f} s against "
                                       f"{seconds_ref:.2f} s ({seconds / seconds_ref - 1:+.1%})")
        if policy == "min_energy":
            figures["min_energy: largest slowdown"] = f"{worst:+.1%} (bound {PENALTY:+.0%})"
    report("energy policies on a mixed workload", f"six jobs, memory-bound shares {', '.join(map(str, SHARES))}, "
           f"~{args.seconds:.0f} s of work each at 2.4 GHz, one at a time on a 1-CPU virtual node (95 W idle, "
           "190/158/134/116 W busy at 2.4/2.0/1.6/1.2 GHz), energy metered every second; time and energy "
           "per CPU second of work", figures)


if __name__ == "__main__":
    main()

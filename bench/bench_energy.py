"""Energy accounting benchmarks (issue 6), each printing its workload, the machine and figures.

(a) precision: the accounted energy of 30 s, 2 min and 15 min jobs against the exact integral of
    the emulated power model, at 1 s sampling (polls jittered by up to 20 ms, jobs starting and
    ending between polls), without and with a BMC-like lag (first-order, tau = 23 s: 95 % of a
    step after ~70 s, the ramp Georgiou et al. 2014 observed). The real meter (EnergyMeter, trapezoid rule)
    and the controller's job energy (interpolated at start and end) run on a virtual clock, so
    15 minutes take a second. Workload: u = 1 with a 10 s phase at u = 0.2 every minute, on a
    16-CPU node of 100 W idle and 300 W busy.
(b) overhead: the node agent's CPU seconds and peak RSS over a job of --minutes (default 10)
    with energy polling at 1 s and an HDF5 profile at 1 s (emulated sensor, and IPMI through an
    emulated BMC), against an agent with polling off. The three clusters run at once.
(c) ipmi: round-trip time of acct_gather_energy/ipmi readings (DCMI Get Power Reading over
    RMCP+) against an emulated BMC on loopback, and of a login.
(d) freqcurve: the energy and run time of one job at every frequency of a virtual node (7 steps,
    1.2-2.4 GHz, the default (f/f_max)^3 power model, 95/190 W), for a compute-bound job and for
    one that computes half the time, on a real emulated cluster; writes a PNG with both curves.

Usage: bench_energy.py [precision|overhead|ipmi|freqcurve|all] [--minutes N]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_seconds, report

from wattsched.config import Config, NodeConf
from wattsched.controller.energysplit import NodeHistory, Occupant, job_energy
from wattsched.noded.energymeter import EnergyMeter
from wattsched.plugins.acct_gather_energy.emulated import EmulatedEnergy

NODE = NodeConf(name="v1", cpus=16, idle_watts=100, max_watts=300)
LAG_S = 23.0


def utilization(t: float) -> float:
    return 0.2 if (t % 60.0) >= 50.0 else 1.0


def busy_seconds(start: float, end: float, a: float, b: float) -> float:
    """The job's busy CPU share integrated over [a, b] (1 ms steps)."""
    lo, hi = max(a, start), min(b, end)
    if hi <= lo:
        return 0.0
    ts = np.arange(lo, hi, 0.001)
    return float(np.sum(np.where(((ts - start) % 60.0) >= 50.0, 0.2, 1.0)) * 0.001)


class Workload:
    """The emulated sensor on the virtual clock, fed as the agent feeds it: the job's mean busy
    share since the previous poll (its CPU time over the interval)."""

    kind = "power"
    interval_mean = True

    def __init__(self, model: EmulatedEnergy, start: float, end: float):
        self.model, self.start, self.end = model, start, end
        self.last: float | None = None

    def read(self, node: str, now: float, load: object) -> float:
        busy = busy_seconds(self.start, self.end, self.last, now) / (now - self.last) if self.last else 0.0
        self.last = now
        return self.model.read(node, now, [(busy, 0, 0)])


def exact_joules(start: float, end: float) -> float:
    return NODE.idle_watts * (end - start) + (NODE.max_watts - NODE.idle_watts) * busy_seconds(start, end,
                                                                                               start, end)


def precision() -> None:
    rng = random.Random(4)
    figures = {}
    for lag in (0.0, LAG_S):
        for seconds in (30, 120, 900):
            errors = []
            for _trial in range(5):
                start = 1000.0 + rng.uniform(0.1, 0.9)  # between two polls
                end = start + seconds
                model = EmulatedEnergy(Config(energy_emulated_lag_s=lag), [NODE])
                with tempfile.TemporaryDirectory() as spool:
                    meter = EnergyMeter(Workload(model, start, end), {"v1": 16}, spool, 1.0, lambda: {})
                    samples = []
                    t = 990.0
                    while t <= end + 3:
                        meter.poll_once(t + rng.uniform(0, 0.02))
                        sample = meter.samples()["v1"]
                        samples.append((sample.time, sample.joules))
                        t += 1.0
                history = NodeHistory(samples, occupants=[Occupant(start, end, 16, 1)])
                measured = job_energy({"v1": history}, start, end, {"v1": 16}, 1)
                errors.append(abs(measured - exact_joules(start, end)) / exact_joules(start, end) * 100)
            label = f"{'lag 23 s' if lag else 'no lag'}, {seconds // 60} min" if seconds >= 60 else \
                f"{'lag 23 s' if lag else 'no lag'}, {seconds} s"
            figures[label] = f"error mean {statistics.mean(errors):.3f} %, max {max(errors):.3f} % (5 jobs)"
    report("energy accounting precision (a)", "emulated node 100-300 W, u=1 with 10 s at u=0.2 every minute, "
           "1 s polls with 0-20 ms jitter; exact = 1 ms integral of the model", figures)


def _udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(key))


def overhead(minutes: float) -> None:
    from wattsched.harness.testing import Cluster, wait_for

    root = Path(tempfile.mkdtemp(prefix="bench-energy-"))
    profile = "AcctGatherProfileType=acct_gather_profile/hdf5\nProfileHDF5Dir={}\n"
    variants = {
        "polling off": ("", False, []),
        "emulated sensor, 1 s polls + profile": (
            "EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n" + profile,
            False, ["--profile=energy,task", "--acctg-freq=energy=1,task=1"]),
        "IPMI via emulated BMC, 1 s polls + profile": (
            f"EmulatedNodes=YES\nEmulatedBMCPort={_udp_port()}\nAcctGatherEnergyType=acct_gather_energy/ipmi\n"
            "AcctGatherNodeFreq=1\n" + profile, True, ["--profile=energy,task", "--acctg-freq=energy=1,task=1"]),
    }
    clusters = {}
    for name, (extra, bmc, _args) in variants.items():
        folder = root / name.split()[0].replace(",", "")
        extra = extra.format(folder / "profile")
        clusters[name] = Cluster(folder, nodes=1, cpus=4, extra=extra, bmc=bmc,
                                 node_extra="IdleWatts=95 MaxWatts=190").start()
    try:
        jobs = {}
        for name, cluster in clusters.items():
            agent = cluster.agent_procs[0].pid
            job_id = cluster.sbatch("-t", str(int(minutes) + 2), *variants[name][2], "--wrap",
                                    f"sleep {int(minutes * 60)}")
            cluster.wait_state(job_id, "RUNNING", timeout=30)
            jobs[name] = (cluster, job_id, agent, cpu_seconds(agent))
        deadline = time.time() + minutes * 60 + 60
        figures = {}
        for name, (cluster, job_id, agent, cpu_before) in jobs.items():
            wait_for(lambda c=cluster, j=job_id: c.job(j)["state"] == "COMPLETED", max(5, deadline - time.time()),
                     interval=1, what=f"{name} job")
            figures[name] = (f"agent {cpu_seconds(agent) - cpu_before:.1f} CPU-s over the job, "
                             f"peak RSS {_status_kb(agent, 'VmHWM:') / 1024:.0f} MiB")
        report("agent overhead (b)", f"a {minutes:g}-minute job (sleep) on a 1-node cluster, one agent; "
               "Georgiou et al. 2014's worst case: 3.5 CPU-s and 34 MB over 44 minutes", figures)
    finally:
        for cluster in clusters.values():
            cluster.stop()


def ipmi_latency() -> None:
    from wattsched import config as config_mod
    from wattsched.plugins.acct_gather_energy.ipmi import IpmiEnergy

    folder = Path(tempfile.mkdtemp(prefix="bench-ipmi-"))
    conf = folder / "bmc.conf"
    conf.write_text(f"ClusterName=b\nSlurmdSpoolDir={folder / 'spool'}\nStateSaveLocation={folder / 'ctld'}\n"
                    f"EmulatedNodes=YES\nEmulatedBMCPort={_udp_port()}\n"
                    "NodeName=v1 CPUs=4 IdleWatts=100 MaxWatts=200\nPartitionName=p Nodes=ALL Default=YES\n")
    bmc = subprocess.Popen([sys.executable, "-m", "wattsched.cli.wattsched", "bmc", str(conf)])
    try:
        config = config_mod.load(conf)
        plugin = IpmiEnergy(config, list(config.nodes))
        started = time.perf_counter()
        for _ in range(100):
            try:
                plugin.read("v1", 0, [])
                break
            except OSError:
                time.sleep(0.1)
        login = time.perf_counter() - started
        times = []
        for _ in range(1000):
            t0 = time.perf_counter()
            plugin.read("v1", 0, [])
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        report("IPMI round trip (c)", "1000 acct_gather_energy/ipmi reads (presence probe + DCMI Get Power Reading "
               "over RMCP+, SHA-1 session) of one emulated BMC on loopback",
               {"first read (BMC start-up + login)": f"{login * 1000:.0f} ms",
                "read median / p95 / p99 / max": f"{times[500]:.2f} / {times[950]:.2f} / {times[990]:.2f} / "
                                                 f"{times[-1]:.2f} ms"})
    finally:
        bmc.kill()


def freqcurve() -> None:
    from wattsched.cpufreq import DEFAULT_LADDER, busy_watts
    from wattsched.harness.testing import Cluster, wait_for

    root = Path(tempfile.mkdtemp(prefix="bench-freq-"))
    cluster = Cluster(root, nodes=1, cpus=1, extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/"
                      "emulated\nAcctGatherNodeFreq=1\nCpuFreqGovernors=Performance,UserSpace",
                      node_extra="IdleWatts=95 MaxWatts=190").start()
    # calibrate a fixed amount of work to ~8 s at the highest frequency
    probe = subprocess.run([sys.executable, "-c", "import time\nt=time.perf_counter(); n=0\n"
                            "while n < 2_000_000: n += 1\nprint(time.perf_counter() - t)"],
                           capture_output=True, text=True, check=True)
    loops = int(2_000_000 * 8 / float(probe.stdout))
    work = f"python3 -c 'n = 0\nwhile n < {loops}: n += 1'"
    rows = []
    try:
        wait_for(lambda: cluster.nodes()[0]["metered"], 20)
        for label, script in (("compute-bound", work), ("half compute", f"{work}; sleep 8")):
            for khz in sorted(DEFAULT_LADDER, reverse=True):
                job_id = cluster.sbatch(f"--cpu-freq={khz}", "-t", "5", "--wrap", script)
                job = cluster.wait_state(job_id, "COMPLETED", timeout=120)
                row = wait_for(lambda j=job_id: (r := cluster.accounted(j)[0])["consumed_energy_j"] and r, 30)
                rows.append((label, khz, job["end_time"] - job["start_time"], row["consumed_energy_j"]))
                time.sleep(2)  # let the node settle back to idle
    finally:
        cluster.stop()
    figures = {}
    top = max(DEFAULT_LADDER)
    for label, khz, seconds, joules in rows:
        # the model's expectation from the full-speed run: compute stretches by f_max/f at W(f),
        # the 8 s of sleep stay 8 s at idle power
        full = next(s for lbl, k, s, _j in rows if lbl == label and k == top)
        compute = full - (8 if label == "half compute" else 0)
        expected_s = compute * top / khz + (full - compute)
        expected_j = busy_watts(khz, top, 95, 190) * compute * top / khz + 95 * (full - compute)
        figures[f"{label} at {khz / 1e6:.1f} GHz"] = (f"{seconds:6.1f} s {joules:6d} J   "
                                                      f"(model {expected_s:5.1f} s {expected_j:6.0f} J)")
    for label in ("compute-bound", "half compute"):
        best = min((r for r in rows if r[0] == label), key=lambda r: r[3])
        figures[f"{label}: least energy"] = f"{best[1] / 1e6:.1f} GHz ({best[3]} J)"
    out = Path("bench_energy_freqcurve.png").resolve()
    _plot(rows, out)
    figures["plot"] = str(out)
    report("energy/time over frequencies (d)", "one 1-CPU virtual node, 95/190 W, (f/f_max)^3 model, 7 frequencies; "
           "a fixed compute loop (~8 s at 2.4 GHz), alone and followed by 8 s of sleep", figures)


def _plot(rows: list[tuple[str, int, float, int]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=100)
    for label in ("compute-bound", "half compute"):
        points = [(s, j, k) for lbl, k, s, j in rows if lbl == label]
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        for seconds, joules, khz in points:
            axes.annotate(f"{khz / 1e6:.1f}", (seconds, joules), textcoords="offset points", xytext=(4, 4),
                          fontsize=8)
    axes.set_xlabel("run time (s)")
    axes.set_ylabel("job energy (J)")
    axes.set_title("Energy against time over CPU frequencies (GHz)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="all", choices=["precision", "overhead", "ipmi", "freqcurve",
                                                                   "all"])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the overhead job")
    args = parser.parse_args()
    if args.which in ("precision", "all"):
        precision()
    if args.which in ("ipmi", "all"):
        ipmi_latency()
    if args.which in ("freqcurve", "all"):
        freqcurve()
    if args.which in ("overhead", "all"):
        overhead(args.minutes)


if __name__ == "__main__":
    main()

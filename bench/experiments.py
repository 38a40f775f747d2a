"""The seeds' experiments as commands, through the simulator (the controller's policy code in
virtual time). Each writes its tables (Markdown and CSV) and plots (PNG) to ``--out``
(default ``experiments/<name>``) and prints the main table.

    python bench/experiments.py efs-trace      (a) Georgiou et al. 2015 Table I method on a trace's 20 busiest users
    python bench/experiments.py efs-lightesp   (b) Georgiou et al. 2015 Fig. 2: Light-ESP x4, users 0.7x / 1x / 1.3x
    python bench/experiments.py eaware         (c) Mämmelä et al. 2011 Figs. 3-5, Tables 6-7: FIFO, BFF, BBF and E-*
    python bench/experiments.py shutdown       (d) Poquet 2017: EASY with no, opportunistic and inertial shutdown
    python bench/experiments.py powercap       (e) power cap: plain admission against power-aware backfill

Scheduling plugins are switched through the configuration, exactly as on a live cluster:
FIFO is priority by age only, FS / EFS / FS+EFS set PriorityWeightFairshare and
PriorityWeightEnergy; Mämmelä et al. 2011's FIFO is sched/builtin, BFF bf_candidate=first, BBF
bf_candidate=most_cpus, and E-* add power_save/energy_aware (T=50 s).
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe

from wattsched import config
from wattsched.config import Config
from wattsched.simulator import engine, report, workload
from wattsched.simulator.result import Result
from wattsched.simulator.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])

PRIORITIES: dict[str, dict] = {
    "FIFO": {"priority_weight_age": 1000},
    "FS": {"priority_weight_age": 0, "priority_weight_fairshare": 1000},
    "EFS": {"priority_weight_age": 0, "priority_weight_energy": 1000},
    "FS+EFS": {"priority_weight_age": 0, "priority_weight_fairshare": 1000, "priority_weight_energy": 1000},
}
# Seed 002's Tables 6 and 7, average rows: (mean wait s, simulation duration s) per algorithm and
# node range, printed beside ours
SEED_002 = {
    ("1-5", "FIFO"): (10406, 1251524), ("1-5", "E-FIFO"): (10748, 1263672), ("1-5", "BFF"): (10256, 1265439),
    ("1-5", "E-BFF"): (10120, 1249461), ("1-5", "BBF"): (10102, 1272054), ("1-5", "E-BBF"): (10120, 1249461),
    ("1-10", "FIFO"): (62140, 2263359), ("1-10", "E-FIFO"): (62267, 2263112), ("1-10", "BFF"): (55789, 2228446),
    ("1-10", "E-BFF"): (56037, 2241027), ("1-10", "BBF"): (54953, 2193420), ("1-10", "E-BBF"): (55625, 2207088),
    ("1-32", "FIFO"): (374550, 8569376), ("1-32", "E-FIFO"): (377609, 8624335), ("1-32", "BFF"): (259616, 6760934),
    ("1-32", "E-BFF"): (260162, 6838423), ("1-32", "BBF"): (256751, 6600031), ("1-32", "E-BBF"): (256674, 6756830),
}
# Seed 000's Table I, SDSC rows: (mean, median) of the per-user mean stretch over baseline, printed
# beside ours
SEED_000_SDSC = {("FS", "green"): (1.00, 1.00), ("FS", "gluttonous"): (1.00, 1.00),
                 ("EFS", "green"): (0.91, 0.92), ("EFS", "gluttonous"): (1.10, 1.02),
                 ("FS+EFS", "green"): (0.89, 0.95), ("FS+EFS", "gluttonous"): (1.03, 1.01)}
ENERGY_AWARE = {"power_save_type": ("power_save/energy_aware",), "power_save_parameters": (("threshold", 50.0),)}


# --- helpers ------------------------------------------------------------------------------------------

def _platform(name: str) -> Config:
    return config.load(ROOT / "etc" / name)


def _sched(conf: Config, **params: object) -> Config:
    return config.with_overrides(conf, scheduler_parameters=dataclasses.replace(conf.scheduler_parameters, **params))


def _stretches(result: Result) -> dict[int, float]:
    return {r.job.job_id: (r.wait + r.runtime) / r.runtime for r in result.records if r.end >= 0 and r.runtime > 0}


def _mean_by_user(result: Result) -> dict[str, float]:
    by: dict[str, list[float]] = defaultdict(list)
    stretch = _stretches(result)
    for r in result.records:
        if r.job.job_id in stretch:
            by[r.job.user].append(stretch[r.job.job_id])
    return {u: statistics.fmean(v) for u, v in sorted(by.items())}


def _table(out: Path, name: str, title: str, header: Sequence[str], rows: list[Sequence]) -> str:
    """Write ``name``.csv and ``name``.md; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    text = "\n".join([f"## {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
                      *("| " + " | ".join(r) + " |" for r in cells), ""])
    (out / f"{name}.md").write_text(text + "\n")
    return text


def _plot(out: Path, name: str, draw: Callable) -> Path:
    return report.save_plot(out / f"{name}.png", draw)


def _finish(out: Path, text: str, workload_desc: str, plots: list[Path]) -> None:
    head = f"workload: {workload_desc}\nmachine: {describe()}\n"
    (out / "README.md").write_text(head + "\n" + text + "\n" + "".join(f"![{p.stem}]({p.name})\n" for p in plots))
    print(head + text + "".join(f"plot: {p}\n" for p in plots))


def _trace(name: str, jobs: int) -> Workload:
    path = TRACES / name
    if not path.exists():
        raise typer.BadParameter(f"{path} not found (a Parallel Workloads Archive trace; any SWF file will do "
                                 "with --trace)")
    return workload.parse_swf(path, max_jobs=jobs)


def _progress(label: str, done: int, total: int) -> None:
    sys.stderr.write(f"\r{label}: {done}/{total} simulations")
    sys.stderr.flush()
    if done == total:
        sys.stderr.write("\n")


Out = Annotated[Path | None, typer.Option("--out", "-o", help="Folder for tables and plots.")]


# --- (a) EnergyFairShare on a trace ---------------------------------------------------------------------

@app.command("efs-trace")
def efs_trace(out: Out = None,
              trace: Annotated[str, typer.Option(help="SWF file in ../shared/traces, or a path.")]
              = "SDSC-SP2-1998-4.2-cln.swf.gz",
              jobs: Annotated[int, typer.Option(help="The first N jobs of the trace.")] = 2000,
              users: Annotated[int, typer.Option(help="How many of the busiest users to test.")] = 20,
              policy: Annotated[list[str] | None, typer.Option(help="FS, EFS or FS+EFS (repeat for several; "
                                                                    "default: all three).")] = None) -> None:
    """(a) Seed 000, Table I: each of the busiest users in turn 30 % greener or more gluttonous; the
    mean over their jobs of stretch / baseline stretch, under FS, EFS and FS+EFS; statistics over users."""
    out = out or ROOT / "experiments" / "efs-trace"
    policies = policy or ["FS", "EFS", "FS+EFS"]
    unknown = [p for p in policies if p not in ("FS", "EFS", "FS+EFS")]
    if unknown:
        raise typer.BadParameter(f"unknown policy {unknown[0]}: FS, EFS or FS+EFS")
    load = workload.parse_swf(trace, max_jobs=jobs) if Path(trace).exists() else _trace(trace, jobs)
    base = _platform("sdsc128.conf")
    tested = workload.most_active_users(load, users)
    rows, total, done = [], len(policies) * (1 + 2 * len(tested)), 0
    for policy_name in policies:
        conf = config.with_overrides(base, **PRIORITIES[policy_name])
        baseline = _stretches(engine.Simulation(conf, load, energy_model="cpu").run())
        done += 1
        for kind, factor in (("green", 0.7), ("gluttonous", 1.3)):
            ratios = []
            for user in tested:
                changed = workload.with_user_factors(load, {user: factor})
                stretch = _stretches(engine.Simulation(conf, changed, energy_model="cpu").run())
                mine = [stretch[j.job_id] / baseline[j.job_id] for j in load.jobs
                        if j.user == user and j.job_id in stretch and j.job_id in baseline]
                ratios.append(statistics.fmean(mine))
                done += 1
                _progress("efs-trace", done, total)
            rows.append((policy_name, kind, min(ratios), statistics.fmean(ratios), statistics.median(ratios),
                         statistics.pstdev(ratios), max(ratios), *SEED_000_SDSC[(policy_name, kind)]))
    text = _table(out, "table1", f"Mean stretch of a user's jobs over baseline ({len(tested)} busiest users)",
                  ("policy", "user", "min", "avg", "median", "std", "max", "seed avg (SDSC)", "seed median"),
                  rows)

    def draw(ax) -> None:
        labels = [f"{p}\n{k}" for p, k, *_ in rows]
        ax.bar(labels, [r[3] for r in rows], color=["#228833" if r[1] == "green" else "#cc6677" for r in rows])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("mean stretch / baseline")

    _finish(out, text, f"{trace}, first {len(load.jobs)} jobs, on etc/sdsc128.conf, energy = CPU-seconds",
            [_plot(out, "table1", draw)])


# --- (b) Light-ESP x4 ----------------------------------------------------------------------------------

@app.command("efs-lightesp")
def efs_lightesp(out: Out = None, repeat: Annotated[int, typer.Option(help="Light-ESP logs in a row.")] = 4,
                 seed: int = 1) -> None:
    """(b) Seed 000, Fig. 2: three users with the same Light-ESP workload and 0.7x / 1x / 1.3x energy,
    mean stretch per user under FIFO, FS, EFS and FS+EFS."""
    out = out or ROOT / "experiments" / "efs-lightesp"
    base = _platform("lightesp180.conf")
    cpus = sum(n.cpus for n in base.nodes)
    load = workload.with_user_factors(workload.light_esp(cpus, base.nodes[0].cpus, repeat, seed),
                                      {"user1": 0.7, "user2": 1.0, "user3": 1.3})
    rows = []
    for policy, changes in PRIORITIES.items():
        result = engine.Simulation(config.with_overrides(base, **changes), load, energy_model="cpu").run()
        means = _mean_by_user(result)
        rows.append((policy, means["user1"], means["user2"], means["user3"], result.summary()["utilization"]))
    text = _table(out, "stretch", "Mean stretch per user (user1 green 0.7x, user2 1x, user3 gluttonous 1.3x)",
                  ("policy", "user1 (0.7x)", "user2 (1x)", "user3 (1.3x)", "utilization"), rows)

    def draw(ax) -> None:
        width = 0.25
        for i, (user, color) in enumerate((("user1 0.7x", "#228833"), ("user2 1x", "#4477aa"),
                                           ("user3 1.3x", "#cc6677"))):
            ax.bar([x + (i - 1) * width for x in range(len(rows))], [r[1 + i] for r in rows], width, label=user,
                   color=color)
        ax.set_xticks(range(len(rows)), [r[0] for r in rows])
        ax.set_ylabel("mean stretch")
        ax.legend()

    _finish(out, text, f"Light-ESP x{repeat} (seed {seed}) on etc/lightesp180.conf, energy = CPU-seconds",
            [_plot(out, "stretch", draw)])


# --- (c) energy-aware FIFO and backfilling -----------------------------------------------------------------

@app.command("eaware")
def eaware(out: Out = None, seeds: Annotated[int, typer.Option(help="Repetitions with different seeds.")] = 10,
           jobs: Annotated[int, typer.Option(help="Jobs per run (20 clients x 20 in the seed).")] = 400) -> None:
    """(c) Seed 002: FIFO, BFF, BBF and their energy-aware variants on its synthetic workload (1-5,
    1-10 and 1-32 nodes): energy saved by each energy-aware variant, wait times and durations."""
    out = out or ROOT / "experiments" / "eaware"
    base = _platform("seed002.conf")
    algorithms = {
        "FIFO": config.with_overrides(base, scheduler_type="sched/builtin"),
        "BFF": _sched(base, bf_candidate="first"),
        "BBF": _sched(base, bf_candidate="most_cpus"),
    }
    rows, saving_rows, total, done = [], [], 3 * 6 * seeds, 0
    for max_nodes in (5, 10, 32):
        for name, conf in algorithms.items():
            figures: dict[str, list[dict]] = {name: [], f"E-{name}": []}
            for seed in range(1, seeds + 1):
                load = workload.synthetic_002(jobs, max_nodes, base.nodes[0].cpus, seed)
                figures[name].append(engine.Simulation(conf, load).run().summary())
                figures[f"E-{name}"].append(
                    engine.Simulation(config.with_overrides(conf, **ENERGY_AWARE), load).run().summary())
                done += 2
                _progress("eaware", done, total)
            for label, runs in figures.items():
                wait, duration = (statistics.fmean(r[k] for r in runs) for k in ("mean_wait_s", "makespan_s"))
                seed_wait, seed_duration = SEED_002[(f"1-{max_nodes}", label)]
                rows.append((f"1-{max_nodes}", label, statistics.fmean(r["energy_j"] for r in runs) / 3.6e6,
                             wait, min(r["mean_wait_s"] for r in runs), max(r["mean_wait_s"] for r in runs),
                             seed_wait, wait / seed_wait, duration, seed_duration, duration / seed_duration,
                             statistics.fmean(r["switches_off"] for r in runs)))
            plain, aware = figures[name], figures[f"E-{name}"]
            saving_rows.append((f"1-{max_nodes}", name, 100 * statistics.fmean(
                1 - a["energy_j"] / p["energy_j"] for p, a in zip(plain, aware, strict=True)),
                statistics.fmean(a["mean_wait_s"] - p["mean_wait_s"] for p, a in zip(plain, aware, strict=True)),
                100 * statistics.fmean(a["makespan_s"] / p["makespan_s"] - 1 for p, a in zip(plain, aware,
                                                                                             strict=True))))
    text = _table(out, "savings", f"Energy saved by the energy-aware variant (mean of {seeds} seeds, Fig. 3)",
                  ("nodes", "algorithm", "saved %", "wait added (s)", "duration added %"), saving_rows)
    text += "\n" + _table(out, "runs", "Energy, wait (Table 6) and duration (Table 7), beside the seed's",
                          ("nodes", "algorithm", "energy kWh", "mean wait s", "min of means", "max of means",
                           "seed wait s", "wait / seed", "duration s", "seed duration s", "duration / seed",
                           "switches off"), rows)

    def draw(ax) -> None:
        groups = [f"1-{m}" for m in (5, 10, 32)]
        for i, name in enumerate(algorithms):
            ax.bar([g + (i - 1) * 0.25 for g in range(3)], [r[2] for r in saving_rows if r[1] == name], 0.25,
                   label=f"E-{name} vs {name}")
        ax.set_xticks(range(3), groups)
        ax.set_xlabel("nodes per job")
        ax.set_ylabel("energy saved (%)")
        ax.legend()

    _finish(out, text, f"Mämmelä et al. 2011 synthetic workload, {jobs} jobs x {seeds} seeds, on etc/seed002.conf",
            [_plot(out, "savings", draw)])


# --- (d) shutdown policies with EASY -----------------------------------------------------------------------

@app.command("shutdown")
def shutdown(out: Out = None, jobs: Annotated[int, typer.Option(help="The first N jobs of KTH SP2.")] = 5000) -> None:
    """(d) Seed 001: EASY backfilling with no shutdown, the opportunistic shutdown over t_idle, and the
    inertial shutdown over its unresponsiveness threshold: energy against mean waiting time."""
    out = out or ROOT / "experiments" / "shutdown"
    load = _trace("KTH-SP2-1996-2.1-cln.swf.gz", jobs)
    base = _platform("kth100.conf")
    variants: list[tuple[str, str, dict]] = [("none", "-", {})]
    variants += [("opportunistic", f"t_idle={t}", {"suspend_time_s": t}) for t in (0, 60, 300, 1800, 3600)]
    variants += [("inertial", f"v_ub={v:g}", {"power_save_type": ("power_save/inertial",),
                                              "power_save_parameters": (("period", 300.0), ("mu_threshold", v))})
                 for v in (1e2, 1e3, 1e4, 1e5)]
    rows, base_energy = [], None
    for i, (policy, setting, changes) in enumerate(variants, start=1):
        s = engine.Simulation(config.with_overrides(base, **changes), load).run().summary()
        base_energy = base_energy or s["energy_j"]
        rows.append((policy, setting, s["energy_j"] / 3.6e9, 100 * (1 - s["energy_j"] / base_energy),
                     s["mean_wait_s"], s["max_wait_s"], s["switches_off"]))
        _progress("shutdown", i, len(variants))
    text = _table(out, "tradeoff", "Energy against responsiveness",
                  ("policy", "setting", "energy MWh", "saved %", "mean wait s", "max wait s", "switches off"), rows)

    def draw(ax) -> None:
        for policy, marker in (("none", "s"), ("opportunistic", "o"), ("inertial", "^")):
            mine = [r for r in rows if r[0] == policy]
            ax.plot([r[4] for r in mine], [r[2] for r in mine], marker=marker, label=policy)
            for r in mine:
                ax.annotate(r[1], (r[4], r[2]), fontsize=7)
        ax.set_xlabel("mean waiting time (s)")
        ax.set_ylabel("energy (MWh)")
        ax.legend()

    _finish(out, text, f"KTH SP2, first {len(load.jobs)} jobs, on etc/kth100.conf", [_plot(out, "tradeoff", draw)])


# --- (e) power cap ----------------------------------------------------------------------------------------

@app.command("powercap")
def powercap(out: Out = None, jobs: Annotated[int, typer.Option(help="The first N jobs of KTH SP2.")] = 600) -> None:
    """(e) A power cap at 70-90 % of the platform's MaxWatts: plain admission (bf_power=admit, the
    prototype of Hautreux 2013) against power-aware backfilling (bf_power=plan). Under a tight cap the
    queue, and each pass with it, grows with the trace: a few hundred jobs take minutes."""
    out = out or ROOT / "experiments" / "powercap"
    load = _trace("KTH-SP2-1996-2.1-cln.swf.gz", jobs)
    base = _platform("kth100.conf")
    max_watts = sum(n.max_watts or 0 for n in base.nodes)
    rows = []
    caps = (None, 0.9, 0.8, 0.7)
    for i, share in enumerate(caps, start=1):
        for mode in ("admit", "plan") if share is not None else ("-",):
            conf = base if share is None else _sched(config.with_overrides(base, power_cap=share * max_watts),
                                                     bf_power=mode)
            s = engine.Simulation(conf, load).run().summary()
            rows.append(("none" if share is None else f"{share * max_watts:.0f} W ({share:.0%})", mode,
                         s["mean_wait_s"], s["max_wait_s"], s["utilization"], s["makespan_s"] / 86400,
                         s["energy_j"] / 3.6e9))
        _progress("powercap", i, len(caps))
    text = _table(out, "powercap", "Plain admission against power-aware backfilling",
                  ("PowerCap", "bf_power", "mean wait s", "max wait s", "utilization", "makespan days",
                   "energy MWh"), rows)

    def draw(ax) -> None:
        for mode, marker in (("admit", "o"), ("plan", "^")):
            mine = [r for r in rows if r[1] == mode]
            ax.plot([r[0].split(" ")[0] for r in mine], [r[2] for r in mine], marker=marker, label=mode)
        ax.set_xlabel("PowerCap (W)")
        ax.set_ylabel("mean waiting time (s)")
        ax.legend()

    _finish(out, text, f"KTH SP2, first {len(load.jobs)} jobs, on etc/kth100.conf", [_plot(out, "powercap", draw)])


if __name__ == "__main__":
    app()

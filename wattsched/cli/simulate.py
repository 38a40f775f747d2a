"""``wattsched simulate``: replay a workload through the controller's policy code in virtual time."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

from wattsched.cli.common import CLIError
from wattsched.cli.plaintyper import typer

# the project's traces beside a checkout: <checkout>/../shared/traces
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


def platform(config_path: str, settings: list[str]):
    """The configuration, with ``Key=Value`` settings applied after it as if appended to the file
    (so a wrong one is reported like any configuration error)."""
    from wattsched import config

    base = Path(config_path).resolve()
    if not base.exists():
        raise CLIError(f"configuration file {config_path} not found")
    if not settings:
        return config.load(base)
    with tempfile.TemporaryDirectory() as tmp:
        combined = Path(tmp) / "settings"
        combined.write_text(f"Include {base}\n" + "\n".join(settings) + "\n")
        conf = config.load(combined)
    return config.with_overrides(conf, source=str(base))


def open_workload(spec: str, max_jobs: int | None, cpus_per_node: int, total_cpus: int, seed: int):
    """A file (.swf, .swf.gz, .json) or a generator: ``synthetic002:COUNT[:MAXNODES]``,
    ``lightesp[:REPEAT]``."""
    from wattsched.simulator import workload

    if spec.startswith("lightesp"):
        repeat = spec.partition(":")[2] or "1"
        if not repeat.isdigit() or int(repeat) < 1:
            raise CLIError(f"bad generator '{spec}': lightesp[:REPEAT]")
        return workload.light_esp(total_cpus, cpus_per_node, int(repeat), seed)
    if spec.startswith("synthetic002:"):
        parts = spec.split(":")[1:]
        try:
            count, max_nodes = int(parts[0]), int(parts[1]) if len(parts) > 1 else 32
        except ValueError as exc:
            raise CLIError(f"bad generator '{spec}': synthetic002:COUNT[:MAXNODES]") from exc
        return workload.synthetic_002(count, max_nodes, cpus_per_node, seed)
    path = Path(spec)
    if not path.exists():
        hint = f" (the traces are expected in {TRACES}; any SWF file will do)" if spec.endswith((".swf", ".gz")) else ""
        raise CLIError(f"workload {spec} not found{hint}")
    try:
        return workload.load(path, max_jobs)
    except workload.WorkloadError as exc:
        raise CLIError(str(exc)) from exc


def simulate(config: Annotated[str, typer.Argument(help="Cluster configuration (etc/*.conf).")],
             workload_spec: Annotated[str, typer.Argument(metavar="WORKLOAD",
                                                          help="SWF (.swf, .swf.gz), JSON, synthetic002:COUNT "
                                                               "or lightesp[:REPEAT]")],
             out: Annotated[Path, typer.Option("--out", "-o", help="Folder for jobs.csv, summary.json, report.md.")]
             = Path("simulation"),
             jobs: Annotated[int | None, typer.Option("--jobs", "-n", help="Only the first N jobs.")] = None,
             setting: Annotated[list[str] | None, typer.Option("--set", help="Key=Value over the configuration.")]
             = None,
             seed: Annotated[int, typer.Option(help="Seed of generated workloads.")] = 1,
             shared: Annotated[bool, typer.Option(
                 "--shared", help="Jobs ask for CPUs and share nodes (default: whole nodes, as in the seeds).")]
             = False,
             energy_model: Annotated[str, typer.Option(
                 "--energy-model", help="A job's accounted energy: 'node' (its nodes' power model) or 'cpu' "
                                        "(its CPU-seconds at MaxWatts per CPU, as in Georgiou et al. 2015).")] = "node",
             user_factor: Annotated[list[str] | None, typer.Option(
                 "--user-factor", help="USER=FACTOR: that user's energy efficiency (0.7 green, 1.3 gluttonous).")]
             = None,
             power_fit: Annotated[bool, typer.Option(
                 "--power-fit", help="Every job submitted with --power-fit: slower clocks (CpuFreqWatts) to fit "
                                     "under the cap, its run stretched as its energy factor says.")] = False,
             accounts: Annotated[str | None, typer.Option(
                 "--accounts", help="An accounting database (URL, or an SQLite file) whose QOS and associations, "
                                    "as sacctmgr made them, limit the jobs (AccountingStorageEnforce=limits in the "
                                    "configuration or --set).")] = None,
             quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False) -> None:
    """Replay a workload through the same scheduling, power-cap and power-saving code as the controller."""
    from wattsched.config import ConfigError
    from wattsched.simulator import report, workload
    from wattsched.simulator.plotter import PlotError
    from wattsched.simulator.plotter import beside as plotter_beside

    try:
        conf = platform(config, setting or [])
    except ConfigError as exc:
        raise CLIError(str(exc)) from exc
    cpus = min((n.cpus for n in conf.nodes), default=1)
    load = open_workload(workload_spec, jobs, cpus, sum(n.cpus for n in conf.nodes), seed)
    try:
        load = workload.with_user_factors(load, dict(_pair(p) for p in user_factor or []))
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    with plotter_beside() as plotter:  # (it loads matplotlib on another core while the replay runs)
        result = _replay(conf, load, quiet, shared, energy_model, accounts, power_fit)
        try:
            paths = report.write(result, out, f"Simulation of {workload_spec} on {config}", plotter)
        except PlotError as exc:
            raise CLIError(str(exc)) from exc
    _print_summary(result, load, paths)


def _replay(conf, load, quiet: bool, shared: bool, energy_model: str, accounts: str | None, power_fit: bool):
    """The replay, with its progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from wattsched.simulator import engine

    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                  TimeElapsedColumn(), disable=quiet, transient=True, console=None) as bar:
        task = bar.add_task("jobs", total=len(load.jobs), rate="")
        sim = None

        def progress(done: int, total: int) -> None:
            elapsed = bar.tasks[0].elapsed or 0
            rate = f"{sim.events / elapsed:,.0f} events/s" if sim and elapsed > 0 else ""
            bar.update(task, completed=done, total=total, rate=rate)

        try:
            limits_shell = _accounts(conf, accounts, min((j.submit for j in load.jobs), default=0.0)) \
                if accounts else None
            sim = engine.Simulation(conf, load, progress=progress, shared=shared, energy_model=energy_model,
                                    accounts=limits_shell, power_fit=power_fit)
            result = sim.run()
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
    return result


def _print_summary(result, load, paths) -> None:
    summary = result.summary()
    held = f", {summary['never_started']} held to the end by a limit or the cap" if summary["never_started"] else ""
    capped = f"power: peak {summary['peak_w']:,.0f} W, over the cap in force {summary['over_cap_s']:.0f} s " \
             f"(by at most {summary['over_cap_w']:,.0f} W), {len(result.cap_changes)} changes of the cap\n" \
        if result.cap_changes else ""
    preempted = ", ".join(f"{summary[k]} {k}" for k in ("preempted", "requeued", "suspended") if summary[k])
    timeouts = f"timeouts: {summary['timeouts']} slowed past the time limit\n" if summary["timeouts"] else ""
    sys.stdout.write(f"{summary['jobs']} jobs ({summary['infeasible']} too large for the platform{held}, "
                     f"{load.skipped} skipped, {load.clipped} clipped) in {summary['wall_s']:.1f} s "
                     f"({summary['events_per_s']:,.0f} events/s)\n"
                     f"energy {summary['energy_j'] / 3.6e9:.3f} MWh, mean wait {summary['mean_wait_s']:.0f} s, "
                     f"max wait {summary['max_wait_s']:.0f} s, utilization {summary['utilization']:.3f}, "
                     f"switches {summary['switches_off']} off / {summary['switches_on']} on\n"
                     + (f"preemption: {preempted}\n" if preempted else "") + capped
                     + timeouts +
                     f"written: {', '.join(str(p) for p in paths.values())}\n")


def _accounts(conf, url: str, origin: float):
    """The simulation's limits shell, from the accounting database at ``url`` (a path: SQLite)."""
    from sqlalchemy.exc import SQLAlchemyError

    from wattsched.simulator.accounts import SimAccounts

    if "://" not in url:
        if not Path(url).is_file():
            raise CLIError(f"--accounts {url}: no such database file")
        url = f"sqlite:///{Path(url).resolve()}"
    try:
        return SimAccounts.load(conf, url, origin)
    except SQLAlchemyError as exc:
        raise CLIError(f"--accounts {url}: {exc.__class__.__name__}: cannot read its QOS and associations") from exc


def _pair(text: str) -> tuple[str, float]:
    user, sep, value = text.partition("=")
    try:
        if not sep or not user:
            raise ValueError
        return user, float(value)
    except ValueError:
        raise CLIError(f"bad --user-factor '{text}': USER=FACTOR, e.g. alice=0.7") from None

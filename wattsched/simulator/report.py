"""What a simulation writes: one CSV row per job, a summary (JSON), and a markdown report with
its plots (PNG), drawn here or by a :class:`wattsched.simulator.plotter.Plotter` beside the replay."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattsched.simulator.result import BOUNDED_SLOWDOWN_TAU_S, Result

if TYPE_CHECKING:
    from wattsched.simulator.plotter import Plotter

JOB_COLUMNS = ("id", "user", "submit", "start", "end", "wait", "runtime", "nodes", "stretch", "bounded_slowdown",
               "energy_j", "frequency_khz")


def job_rows(result: Result) -> list[tuple]:
    rows = []
    for r in sorted(result.records, key=lambda r: r.job.job_id):
        if r.end < 0:
            continue
        stretch = r.response / r.runtime if r.runtime > 0 else 1.0
        bsld = max(1.0, r.response / max(r.runtime, BOUNDED_SLOWDOWN_TAU_S))
        rows.append((r.job.job_id, r.job.user, f"{r.submit:.0f}", f"{r.start:.1f}", f"{r.end:.1f}",
                     f"{r.wait:.1f}", f"{r.runtime:.1f}", r.nodes, f"{stretch:.4f}", f"{bsld:.4f}",
                     f"{r.energy_j:.0f}", r.freq_khz or ""))
    return rows


def write(result: Result, out: Path, title: str, plotter: Plotter | None = None) -> dict[str, Path]:
    """jobs.csv, summary.json, report.md and its PNGs in ``out``; returns their paths. With a
    ``plotter``, it draws the plots while the rest is written."""
    out.mkdir(parents=True, exist_ok=True)
    waits = [r.wait / 3600 for r in result.records if r.end >= 0]
    if plotter is not None:
        plotter.send(out, waits, result.energy_by_state)
    paths = {"jobs": out / "jobs.csv", "summary": out / "summary.json", "report": out / "report.md"}
    with open(paths["jobs"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        writer.writerows(job_rows(result))
    summary = result.summary()
    paths["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    plots = plotter.drawn() if plotter is not None else draw_plots(out, waits, result.energy_by_state)
    lines = [f"# {title}", "", "| metric | value |", "| --- | --- |"]
    lines += [f"| {key} | {_fmt(value)} |" for key, value in summary.items()]
    lines += [""] + [f"![{name}]({path.name})" for name, path in plots.items()]
    paths["report"].write_text("\n".join(lines) + "\n")
    paths.update(plots)
    return paths


def _fmt(value: float | int) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def draw_plots(out: Path, waits_h: list[float], energy_by_state: dict[str, float]) -> dict[str, Path]:
    """The report's plots in ``out``: the waiting times (hours) and the energy by node state (J)."""

    def waits(ax) -> None:
        ax.hist(waits_h, bins=50, color="#4477aa")
        ax.set_xlabel("waiting time (h)")
        ax.set_ylabel("jobs")
        ax.set_yscale("log")
        ax.set_title("Waiting times")

    def energy(ax) -> None:
        names = list(energy_by_state)
        ax.bar(names, [energy_by_state[n] / 3.6e9 for n in names], color="#228833")
        ax.set_ylabel("energy (MWh)")
        ax.set_title("Energy by node state")

    return {"waiting times": save_plot(out / "waits.png", waits),
            "energy by node state": save_plot(out / "energy.png", energy)}


def load_plotting() -> None:
    """Import what :func:`save_plot` draws with (a plotter's child does it ahead)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot


def save_plot(path: Path, draw: Callable[[Any], None]) -> Path:
    """A 7 x 4 in PNG of what ``draw`` puts on its axes."""
    load_plotting()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""What a simulation writes: one CSV row per job, a summary (JSON), and a markdown report with
its plots (PNG)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wattsched.simulator.engine import BOUNDED_SLOWDOWN_TAU_S, Result

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


def write(result: Result, out: Path, title: str) -> dict[str, Path]:
    """jobs.csv, summary.json, report.md and its PNGs in ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"jobs": out / "jobs.csv", "summary": out / "summary.json", "report": out / "report.md"}
    with open(paths["jobs"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        writer.writerows(job_rows(result))
    summary = result.summary()
    paths["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    plots = _plots(result, out)
    lines = [f"# {title}", "", "| metric | value |", "| --- | --- |"]
    lines += [f"| {key} | {_fmt(value)} |" for key, value in summary.items()]
    lines += [""] + [f"![{name}]({path.name})" for name, path in plots.items()]
    paths["report"].write_text("\n".join(lines) + "\n")
    paths.update(plots)
    return paths


def _fmt(value: float | int) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plots(result: Result, out: Path) -> dict[str, Path]:
    done = [r for r in result.records if r.end >= 0]

    def waits(ax) -> None:
        ax.hist([r.wait / 3600 for r in done], bins=50, color="#4477aa")
        ax.set_xlabel("waiting time (h)")
        ax.set_ylabel("jobs")
        ax.set_yscale("log")
        ax.set_title("Waiting times")

    def energy(ax) -> None:
        names = list(result.energy_by_state)
        ax.bar(names, [result.energy_by_state[n] / 3.6e9 for n in names], color="#228833")
        ax.set_ylabel("energy (MWh)")
        ax.set_title("Energy by node state")

    return {"waiting times": save_plot(out / "waits.png", waits),
            "energy by node state": save_plot(out / "energy.png", energy)}


def save_plot(path: Path, draw: Callable[[Any], None]) -> Path:
    """A 7 x 4 in PNG of what ``draw`` puts on its axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

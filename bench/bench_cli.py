"""CLI start-up and latency, and controller memory.

Targets: issue 17 - squeue on an empty cluster under 60 ms wall, 1,000 sequential ``sbatch --wrap true``
at 20 per second or more, both beside the cost of starting Python at all (``python3 -c pass``);
issue 2 - squeue with 10,000 pending jobs under 0.5 s. When Slurm's own commands are installed and
answer (Debian's slurm-wlm with a running slurmctld), the same commands are timed against it too.

Every figure is the median of several runs of the real console scripts, as a user types them, from
two installations: the development one (``pip install -e``: since the package tree is plain, one path
in a .pth file, no import hook) and a plain ``pip install .`` into a fresh virtual environment, as a
cluster installs it. Python's byte-code cache is written first (the environment may set
PYTHONDONTWRITEBYTECODE, which would make every run compile the sources: an installed package always
has its .pyc files).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report, rss_mib

from wattsched.harness.testing import BIN, Cluster

ROOT = Path(__file__).resolve().parent.parent


def wall(argv: list[str], env: dict[str, str], runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def sbatch_rate(argv: list[str], env: dict[str, str], count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return count / (time.perf_counter() - started)


def plain_install(where: Path) -> Path | None:
    """wattsched installed with ``pip install .`` (no editable hook) into a new venv: its bin/."""
    venv = where / "plain"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(ROOT)],
                          capture_output=True, text=True)
    return venv / "bin" if done.returncode == 0 else None


def real_slurm() -> dict[str, str]:
    """The same commands against an installed Slurm, when there is one that answers."""
    squeue, sbatch = shutil.which("squeue", path="/usr/bin"), shutil.which("sbatch", path="/usr/bin")
    if not squeue or not sbatch or subprocess.run([squeue], capture_output=True).returncode != 0:
        return {"real_slurm": "not installed or no slurmctld answering (Debian's slurm-wlm): not measured"}
    env = dict(os.environ)
    rate = sbatch_rate([sbatch, "--wrap", "true", "-o", "/dev/null"], env, 200)
    return {"slurm_squeue_empty_wall_ms": f"{wall([squeue], env) * 1000:.1f}",
            "slurm_sbatch_per_s (200 sequential)": f"{rate:.0f}"}


def main(jobs: int = 10_000, sequential: int = 1000) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT)], env=env, stdout=subprocess.DEVNULL)
    python = str(BIN / "python")
    figures: dict[str, str] = {
        "python3_-S_-c_pass_wall_ms (no site at all)": f"{wall([python, '-S', '-c', 'pass'], env) * 1000:.1f}",
        "editable: squeue_--version_wall_ms": f"{wall([str(BIN / 'squeue'), '--version'], env) * 1000:.1f}"}
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), nodes=16, cpus=8, agents=2, extra="MaxJobCount=20000").start()
        try:
            cenv = {k: v for k, v in cluster.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            plain = plain_install(Path(root))
            for label, bindir in (("editable", BIN), ("pip_install", plain)):
                if bindir is None:
                    figures[f"{label}: not measured"] = "pip install . failed"
                    continue
                python = str(bindir / "python")
                figures[f"{label}: python3_-c_pass_wall_ms"] = f"{wall([python, '-c', 'pass'], env) * 1000:.1f}"
                figures[f"{label}: squeue_empty_wall_ms (median of 20)"] = \
                    f"{wall([str(bindir / 'squeue')], cenv) * 1000:.1f}"
                held = sbatch_rate([str(bindir / "sbatch"), "-H", "--wrap", "true", "-o", "/dev/null"], cenv, 200)
                figures[f"{label}: sbatch_per_s (200 sequential sbatch -H --wrap true: held, not run)"] = f"{held:.1f}"
                rate = sbatch_rate([str(bindir / "sbatch"), "--wrap", "true", "-o", "/dev/null"], cenv, sequential)
                figures[f"{label}: sbatch_per_s ({sequential} sequential sbatch --wrap true, each job run)"] = \
                    f"{rate:.1f}"
            cluster.run("scancel", "-u", "root")
            rss_empty = rss_mib(cluster.controller.pid)
            body = {"script": "#!/bin/sh\ntrue\n", "work_dir": root, "hold": True, "output": "/dev/null"}
            import httpx

            headers = {"Authorization": f"Bearer {cluster.token()}"}
            with httpx.Client(base_url=f"http://127.0.0.1:{cluster.port}", headers=headers) as client:
                for _ in range(jobs):
                    client.post("/v1/jobs", json=body).raise_for_status()
            figures[f"squeue_{jobs}_pending_wall_s (median of 5)"] = f"{wall([str(BIN / 'squeue')], cenv, 5):.3f}"
            figures[f"squeue_{jobs}_pending_custom_format_wall_s"] = \
                f"{wall([str(BIN / 'squeue'), '-h', '-o', '%i %T %r'], cenv, 5):.3f}"
            figures["controller_rss_empty_mib"] = f"{rss_empty:.0f}"
            figures[f"controller_rss_{jobs}_jobs_mib"] = f"{rss_mib(cluster.controller.pid):.0f}"
        finally:
            cluster.stop()
    figures.update(real_slurm())
    report("cli start-up, latency and controller memory",
           f"16 virtual nodes x 8 CPUs, 2 agents, on this host; {sequential} sbatch run one after another "
           f"(each job runs 'true'); then {jobs} held jobs submitted through the API", figures)


if __name__ == "__main__":
    main()

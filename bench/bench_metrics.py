"""Scraping and watching Curie (etc/curie.conf: 5,040 virtual nodes x 16 cores, metered by the emulated
energy plugin) with 10,000 jobs held in the queue and 100 running.

Prints, as medians of 10 calls from a client on this host: /metrics time and size (all families),
each agent's /metrics, and the dashboard's data calls (power series, nodes, queue, energy).
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
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

ETC = Path(__file__).resolve().parent.parent / "etc"
JOBS, RUNNING = 10_000, 100


def timed(client: httpx.Client, url: str, repeat: int = 10) -> tuple[float, int]:
    """Median seconds and the size in bytes of GET url."""
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
        size = len(response.content)
    return statistics.median(times), size


def main() -> None:
    from wattsched import auth

    root = Path(tempfile.mkdtemp(prefix="wattsched-metrics-"))
    conf = root / "curie.conf"
    text = (ETC / "curie.conf").read_text().replace("../wattsched-state/curie", str(root / "state"))
    text = text.replace("SlurmctldPort=6837", "SlurmctldPort=6848")
    text = text.replace("EmulatedAgents=8", "EmulatedAgents=8\nMetricsType=metrics/openmetrics\nMaxJobCount=20000\n"
                        "AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=10\nPowerCap=600000")
    conf.write_text(text)
    env = dict(os.environ, WATTSCHED_CONF=str(conf))
    bindir = Path(sys.executable).parent
    try:
        subprocess.run([bindir / "wattsched", "emulate", "--daemon", str(conf)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        key = (root / "state" / "ctld" / "jwt_hs256.key").read_bytes().strip()
        headers = {"Authorization": f"Bearer {auth.user_token(key, 0, 'root')}"}
        base = "http://127.0.0.1:6848"
        with httpx.Client(headers=headers, timeout=120) as client:
            for _ in range(JOBS // 1000):
                subprocess.run([bindir / "sbatch", "-H", "--array=0-999", "-o", "/dev/null", "--wrap", "true"],
                               env=env, check=True, stdout=subprocess.DEVNULL)
            for _ in range(RUNNING):
                subprocess.run([bindir / "sbatch", "-N", "2", "-o", "/dev/null", "--wrap", "sleep 600"], env=env,
                               check=True, stdout=subprocess.DEVNULL)
            deadline = time.time() + 120
            while time.time() < deadline:
                running = [j for j in client.get(f"{base}/v1/jobs").json()["jobs"] if j["state"] == "RUNNING"]
                if len(running) == RUNNING:
                    break
                time.sleep(1)
            time.sleep(25)  # two readings from every node: power and energy figures are all present
            figures = {}
            for name, path in (("metrics_all", "/metrics"), ("metrics_jobs", "/metrics/jobs"),
                               ("metrics_nodes", "/metrics/nodes"), ("dashboard_power_hour", "/v1/dashboard/power"),
                               ("dashboard_power_day", "/v1/dashboard/power?period=86400"),
                               ("nodes", "/v1/nodes"), ("jobs", "/v1/jobs"),
                               ("dashboard_energy_day", "/v1/dashboard/energy")):
                seconds, size = timed(client, base + path)
                figures[name] = f"{seconds * 1000:.0f} ms, {size / 1024:.0f} KiB"
            info = json.loads((root / "state" / "ctld" / "emulate.json").read_text())
            agent_urls = [u for u in {n["agent_url"] for n in client.get(f"{base}/v1/nodes").json()["nodes"]} if u]
            agent = [timed(client, f"{u}/metrics", 3) for u in sorted(agent_urls)]
            slowest, largest = max(s for s, _ in agent), max(b for _, b in agent)
            figures["agent_metrics"] = (f"{slowest * 1000:.0f} ms, {largest / 1024:.0f} KiB (slowest and largest "
                                        f"of {len(agent)} agents)")
            sample = client.get(f"{base}/metrics").text
            figures["metrics_series"] = str(sum(1 for line in sample.splitlines() if line and line[0] != "#"))
            figures["agent_processes"] = str(len(info["agents"]))
    finally:
        subprocess.run([bindir / "wattsched", "emulate", "--stop", str(conf)], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    report("Metrics and dashboard at Curie's scale",
           f"etc/curie.conf, 5040 virtual nodes, {JOBS} held jobs and {RUNNING} running (2 nodes each)", figures)


if __name__ == "__main__":
    main()

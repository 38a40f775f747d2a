"""Prometheus metrics: the controller's and the agents' ``/metrics`` checked by ``promtool``, their
access rules, and a real Prometheus server (Debian's package) scraping the emulated cluster.

Without Debian's prometheus package (``.ci/run`` installs it) the Prometheus tests are skipped,
saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from wattsched.harness.testing import ALICE, Cluster, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(not (PROMETHEUS and PROMTOOL),
                                      reason="needs Debian's prometheus package (prometheus, promtool)")
METERED = ("AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\nEmulatedNodes=yes\n"
           "PowerCap=2000\n")


@pytest.fixture(scope="module")
def metered(tmp_path_factory) -> Iterator[Cluster]:
    """Four emulated, metered nodes on two agents, metrics for tokens of MetricsAuthUsers."""
    running = Cluster(tmp_path_factory.mktemp("metrics"), agents=2,
                      extra=METERED + "MetricsType=metrics/openmetrics\nMetricsAuthUsers=prom",
                      node_extra="IdleWatts=100 MaxWatts=300").start()
    yield running
    running.stop()


def scrape(url: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, headers=headers, timeout=30)


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, from the text format."""
    result = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            result[key] = float(value)
    return result


def agent_urls(cluster: Cluster) -> list[str]:
    return [f"http://127.0.0.1:{port}/metrics" for port in cluster.agent_ports]


def test_metrics_show_jobs_nodes_scheduler_and_energy(metered: Cluster) -> None:
    job_id = metered.sbatch("-N", "2", "--wrap", "sleep 2")
    metered.wait_state(job_id, "RUNNING")
    url = f"http://127.0.0.1:{metered.port}/metrics"
    running = samples(scrape(url, metered.token()).text)
    assert running["slurm_jobs_running"] == 1 and running["slurm_jobs_nodes_alloc"] == 2
    assert running["slurm_nodes_mixed"] == 2 and running["slurm_nodes_idle"] == 2
    assert running['slurm_partition_jobs_running{partition="debug"}'] == 1
    assert running['slurm_user_jobs_running{username="root"}'] == 1
    assert running["slurm_nodes"] == 4 and running['slurm_node_cpus{node="n01"}'] == 4
    assert running["wattsched_power_cap_watts"] == 2000
    assert running["wattsched_adjusted_max_watts"] == 2 * 300 + 2 * 300
    metered.wait_state(job_id, "COMPLETED")
    energy = metered.accounted(job_id)[0]["consumed_energy_j"]
    assert energy > 0
    ended = samples(scrape(url, metered.token()).text)
    assert ended[f'wattsched_job_energy_joules{{account="root",job_id="{job_id}",partition="debug",user="root"}}'] \
        == energy
    assert ended['wattsched_user_energy_joules_total{user="root"}'] >= energy
    assert ended["slurm_schedule_cycle_cnt"] > 0 and ended["slurm_jobs_completed"] >= 1
    assert 4 * 90 <= ended["wattsched_cluster_power_watts"] <= 4 * 300
    nodes_only = samples(scrape(f"{url}/nodes", metered.token()).text)
    assert "slurm_nodes_idle" in nodes_only and "slurm_jobs" not in nodes_only
    assert scrape(f"{url}/nonsense", metered.token()).status_code == 404
    per_agent = [samples(scrape(u, metered.token()).text) for u in agent_urls(metered)]
    assert sorted(k for a in per_agent for k in a if k.startswith("wattsched_node_power_watts")) == \
        [f'wattsched_node_power_watts{{node="n0{i}"}}' for i in range(1, 5)]
    assert all(v < 30 for a in per_agent for k, v in a.items() if "reading_age" in k)


def test_scrapes_are_admitted_as_metrics_auth_users_says(metered: Cluster) -> None:
    url = f"http://127.0.0.1:{metered.port}/metrics"
    for target in (url, *agent_urls(metered)):
        assert scrape(target, None).status_code == 401
        assert scrape(target, metered.token(*ALICE)).status_code == 403
        assert scrape(target, metered.token(1234, "prom")).status_code == 200
        assert scrape(target, metered.token()).status_code == 200  # root is always admitted


def test_metrics_are_off_unless_configured(cluster: Cluster) -> None:
    response = cluster.api("GET", "/metrics")
    assert response.status_code == 404 and "MetricsType" in response.text


@needs_prometheus
def test_promtool_accepts_both_endpoints(metered: Cluster) -> None:
    for target in (f"http://127.0.0.1:{metered.port}/metrics", *agent_urls(metered)):
        text = scrape(target, metered.token()).text
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


@needs_prometheus
def test_prometheus_scrapes_cluster_power_and_job_energy(metered: Cluster, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(metered.token(1234, "prom"))
    token_file.chmod(0o600)
    port = free_port()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in metered.agent_ports)
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: wattsched-controller
    authorization: {{credentials_file: {token_file}}}
    static_configs: [{{targets: ['127.0.0.1:{metered.port}']}}]
  - job_name: wattsched-noded
    authorization: {{credentials_file: {token_file}}}
    static_configs: [{{targets: [{targets}]}}]
""")
    with open(tmp_path / "prometheus.log", "wb") as log:
        server = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def query(expr: str) -> list[dict]:
            response = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": expr}, timeout=10)
            return response.json()["data"]["result"] if response.status_code == 200 else []

        job_id = metered.sbatch("--wrap", "sleep 1")
        metered.wait_state(job_id, "COMPLETED")
        energy = metered.accounted(job_id)[0]["consumed_energy_j"]
        wait_for(lambda: len(query("up == 1")) == 3, 60, what="Prometheus scraping the controller and both agents")
        power = wait_for(lambda: query("wattsched_cluster_power_watts"), 30, what="cluster power in Prometheus")
        assert 4 * 90 <= float(power[0]["value"][1]) <= 4 * 300
        by_agents = wait_for(lambda: query('sum(wattsched_node_power_watts{job="wattsched-noded"})'), 30,
                             what="node power from the agents")
        assert 4 * 90 <= float(by_agents[0]["value"][1]) <= 4 * 300
        job = wait_for(lambda: query(f'wattsched_job_energy_joules{{job_id="{job_id}"}}'), 30,
                       what="the job's energy in Prometheus")
        assert float(job[0]["value"][1]) == energy
        started = time.time()
        rising = wait_for(lambda: query('increase(wattsched_node_energy_joules_total{job="wattsched-noded"}[10s])'),
                          30, what="energy counters rising")
        assert all(float(r["value"][1]) > 0 for r in rising), (rising, time.time() - started)
        # the Grafana dashboard in deploy/: every query is good PromQL over series Prometheus has
        held = metered.sbatch("-H", "--wrap", "true")  # a pending job: the pending reasons exist
        wait_for(lambda: query("wattsched_jobs_pending_by_reason"), 30, what="the pending reasons scraped")
        names = {r["metric"]["__name__"] for r in query('count by (__name__) ({__name__=~"(slurm|wattsched)_.+"})')}
        dashboard = json.loads((ROOT / "deploy" / "grafana" / "wattsched.json").read_text())
        exprs = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
        assert len(exprs) >= 15
        for title, expr in exprs:
            response = httpx.get(f"http://127.0.0.1:{port}/api/v1/query",
                                 params={"query": expr.replace("$__rate_interval", "1m")}, timeout=10)
            assert response.status_code == 200 and response.json()["status"] == "success", (title, response.text)
            assert set(re.findall(r"\b(?:slurm|wattsched)_[a-z_]+", expr)) <= names, (title, expr)
        metered.run("scancel", str(held))
    finally:
        server.terminate()
        server.wait(timeout=30)

"""The web dashboard in headless Chromium (Debian's package, installed by .ci/run) while jobs run on
an emulated cluster under a power cap: the power series and the cap line are drawn and current,
a power reservation ahead is drawn as a planned cap, a node turns busy when a job lands on it,
the queue lists the job, and a job's page draws its nodes' power. Screenshots are saved as test
artefacts (build/test-artifacts/, or $WATTSCHED_ARTIFACTS).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import ALICE, Cluster

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium package (.ci/run installs it)")
playwright = pytest.importorskip("playwright.sync_api")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("WATTSCHED_ARTIFACTS", ROOT / "build" / "test-artifacts"))
# Chromium as root needs --no-sandbox; the others keep it off this machine's closed network
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("dashboard"), nodes=8, cpus=4, agents=2,
                      extra="AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n"
                            "EmulatedNodes=yes\nPowerCap=2000",
                      node_extra="IdleWatts=100 MaxWatts=300").start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


def test_dashboard_shows_power_against_the_cap_nodes_and_queue(capped: Cluster, browser) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    capped.run("scontrol", "create", "reservation", "ReservationName=powerlab", "StartTime=now+5minutes",
               "Duration=30", "Watts=600", "Users=root")
    quick = capped.sbatch("-w", "n08", "--wrap", "sleep 1")
    capped.wait_state(quick, "COMPLETED")
    joules = capped.accounted(quick)[0]["consumed_energy_j"]
    first = capped.sbatch("-N", "2", "--exclusive", "-w", "n0[1-2]", "--wrap", "sleep 120")
    capped.wait_state(first, "RUNNING")
    capped.run("sacctmgr", "-i", "modify", "account", "root", "set", "GrpTRES=power=1500",
               "GrpTRESMins=energy=50000000")
    capped.run("scontrol", "update", "nodename=n03", "capwatts=200")  # a node held to a limit shows it
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    page.goto(f"http://127.0.0.1:{capped.port}/dashboard/#token={capped.token()}")
    # the power series is drawn and current, under the cap line, with the reservation's planned cap ahead
    page.wait_for_function("() => { const p = document.querySelector('#power-chart path.series.measured');"
                           " return p && Date.now() / 1000 - Number(p.dataset.last) < 30"
                           " && Number(p.dataset.watts) > 0; }", timeout=60_000)
    assert page.get_attribute("#power-chart path.cap", "data-watts") == "2000"
    assert page.get_attribute("#power-chart path.planned", "data-name") == "powerlab"
    measured = float(page.get_attribute("#power-chart path.series.measured", "data-watts"))
    assert 8 * 90 <= measured <= 2000
    assert "token" not in page.url  # taken out of the address bar once kept
    page.wait_for_selector("#node-map .node[data-name=n01][data-state=busy]")
    assert page.get_attribute("#node-map .node[data-name=n05]", "data-state") == "idle"
    page.wait_for_selector("#node-map .node[data-name=n03][data-cap='200']")
    assert "/ 200 W" in page.inner_text("#node-map .node[data-name=n03]")
    page.wait_for_selector(f"#queue-rows tr[data-job='{first}'][data-state=RUNNING]")
    # energy of the jobs that ended today, by user: the quick job's, summed by the database
    assert float(page.get_attribute("#energy-users tr[data-name=root] td[data-joules]", "data-joules")) == joules > 0
    # a job submitted while the page is open: its node turns busy without a reload
    second = capped.sbatch("-w", "n05", "--exclusive", "--wrap", "sleep 120")
    page.wait_for_selector("#node-map .node[data-name=n05][data-state=busy]", timeout=30_000)
    page.wait_for_selector(f"#queue-rows tr[data-job='{second}']")
    # the budgets: root's power share held by its running jobs, its energy budget and what is left
    page.wait_for_selector("#budget-rows tr[data-owner=root][data-limit=GrpTRES][data-tres=power]", timeout=30_000)
    held = float(page.get_attribute("#budget-rows tr[data-owner=root][data-limit=GrpTRES][data-tres=power]",
                                    "data-used"))
    assert held > 0  # the two-node job's share of its nodes' MaxWatts
    assert page.query_selector("#budget-rows tr[data-owner=root][data-limit=GrpTRESMins][data-tres=energy]")
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    # a job's page: its nodes' power over its run
    page.goto(f"http://127.0.0.1:{capped.port}/dashboard/#job={first}")
    page.wait_for_function("() => document.querySelectorAll('#job-chart path.node-power').length === 2",
                           timeout=30_000)
    assert f"Job {first}" in page.inner_text("#job-title")
    page.screenshot(path=str(ARTIFACTS / "dashboard-job.png"), full_page=True)
    capped.run("scancel", str(first), str(second))
    page.close()


def test_dashboard_asks_for_a_token_and_refuses_a_forged_one(capped: Cluster, browser) -> None:
    page = browser.new_page()
    page.goto(f"http://127.0.0.1:{capped.port}/dashboard/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#token", "e30.e30.forged")
    page.click("#login button")
    page.wait_for_function("() => document.getElementById('login-error').textContent.includes('refused')")
    # a user's own token (as scontrol token prints it) opens it: users see the cluster as squeue shows it
    page.fill("#token", "SLURM_JWT=" + capped.token(*ALICE))
    page.click("#login button")
    page.wait_for_selector("#node-map .node[data-name=n08]")
    assert "(alice)" in page.inner_text("#cluster")
    started = time.time()
    page.wait_for_function("() => Number(document.getElementById('status').dataset.updated) > 0")
    assert time.time() - started < 30
    page.close()

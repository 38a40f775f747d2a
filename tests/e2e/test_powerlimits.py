"""A node's power limit on the emulated cluster, through the real controller, agents and commands:
scontrol update CapWatts= has the node's agent hold it there through its (kernel-shaped) RAPL tree,
the virtual node then draws no more and its job runs slower; the limit survives a kill -9 of the
agent (which gives the site its settings back first) and is lifted with NONE."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from wattsched.harness.testing import Cluster, wait_for

pytestmark = pytest.mark.e2e

FREQS = "CpuFreqWatts=2400000:190,2000000:158,1600000:134,1200000:116"
BURN = "python3 -c 'import time\nend = time.time() + {s}\nwhile time.time() < end: pass'"


def _watts(c: Cluster, node: str) -> int:
    shown = c.run("scontrol", "show", "node", node).stdout
    found = re.search(r"CurrentWatts=(\d+)", shown)
    return int(found.group(1)) if found else -1


def _limit_uw(c: Cluster, node: str) -> str:
    zone = c.root / "spool" / node / "sysfs" / "sys" / "class" / "powercap" / "intel-rapl:0"
    if not zone.exists():
        return "absent"  # laid out at the first limit
    if (zone / "enabled").read_text().strip() != "1":
        return "off"
    return (zone / "constraint_0_power_limit_uw").read_text().strip()


def test_capwatts_holds_a_busy_virtual_node_and_outlives_its_agent(tmp_path: Path) -> None:
    c = Cluster(tmp_path, nodes=2, cpus=1, extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\n"
                "AcctGatherNodeFreq=1\nMetricsType=metrics/openmetrics",
                node_extra=f"IdleWatts=95 MaxWatts=190 {FREQS}").start()
    try:
        job = c.sbatch("-w", "n01", "-t", "5", "--wrap", BURN.format(s=240))
        c.wait_state(job, "RUNNING", timeout=15)
        wait_for(lambda: _watts(c, "n01") >= 180, 30, what="n01 busy at full speed")
        refused = c.run("scontrol", "update", "nodename=n01", "capwatts=50", check=False)
        assert refused.returncode != 0 and "under n01's IdleWatts (95)" in refused.stderr
        assert c.run("scontrol", "update", "nodename=n01", "capwatts=140").returncode == 0
        wait_for(lambda: _limit_uw(c, "n01") == "140000000", 15, what="n01's RAPL limit written")
        assert "CapWatts=140\n" in c.run("scontrol", "show", "node", "n01").stdout
        # the hardware holds 140 W: the virtual CPUs drop to 1.6 GHz (134 W busy) and the node with them
        wait_for(lambda: 120 <= _watts(c, "n01") <= 140, 30, what="n01 drawing what its limit allows")
        assert "CapWatts=n/a" in c.run("scontrol", "show", "node", "n02").stdout
        metrics = httpx.get(f"http://127.0.0.1:{c.port}/metrics", headers={"Authorization": f"Bearer {c.token()}"},
                            timeout=30).text
        assert 'wattsched_node_power_limit_watts{held="yes",node="n01"} 140.0' in metrics, metrics
        # the job on it is shown the limit it runs under
        wait_for(lambda: "CapWatts=140 MinCapWatts=140\n" in c.run("scontrol", "show", "job", str(job)).stdout, 10,
                 what="the job's limit shown")
        page = c.api("GET", f"/v1/dashboard/job/{job}").json()["job"]  # what the dashboard's job page shows
        assert (page["cap_watts"], page["min_cap_watts"]) == (140, 140)
        metrics = httpx.get(f"http://127.0.0.1:{c.port}/metrics", headers={"Authorization": f"Bearer {c.token()}"},
                            timeout=30).text
        assert re.search(rf'wattsched_job_power_limit_watts{{[^}}]*job_id="{job}"[^}}]*}} 140.0', metrics), metrics
        # kill -9 of the agent: the next one gives the site its settings back, then holds the order again
        c.kill_agent(0)
        c.start_agent(0)
        wait_for(lambda: "power limit left by a stopped agent lifted" in (c.logs / "noded0.log").read_text(), 20,
                 what="the dead agent's limit lifted at start")
        wait_for(lambda: _limit_uw(c, "n01") == "140000000", 20, what="the limit held again")
        assert c.job(job)["state"] == "RUNNING"
        assert c.run("scontrol", "update", "nodename=n01", "capwatts=none").returncode == 0
        wait_for(lambda: _limit_uw(c, "n01") == "off", 15, what="the site's own settings back")
        assert not (c.root / "spool" / "n01" / "powerlimit.saved").exists()
        wait_for(lambda: _watts(c, "n01") >= 180, 30, what="n01 at full speed again")
        assert "CapWatts=n/a" in c.run("scontrol", "show", "node", "n01").stdout
        wait_for(lambda: "CapWatts=n/a MinCapWatts=140\n" in c.run("scontrol", "show", "job", str(job)).stdout, 10,
                 what="the job's limit lifted, its lowest kept")
        # kept with the controller's state: an order survives its restart
        assert c.run("scontrol", "update", "nodename=n01", "capwatts=150").returncode == 0
        c.kill_controller()
        c.start_controller()
        assert "CapWatts=150\n" in c.run("scontrol", "show", "node", "n01").stdout
        started = time.time()
        wait_for(lambda: _limit_uw(c, "n01") == "150000000", 20, what="the order held after a controller restart")
        assert time.time() - started < 20
    finally:
        c.stop()


HALF = ("python3 -c 'import time\nend = time.time() + {s}\nwhile time.time() < end:\n    t = time.time() + 0.05\n"
        "    while time.time() < t: pass\n    time.sleep(0.05)'")  # busy half the time: draws less than it may


def _limits(c: Cluster) -> dict[str, float | None]:
    return {n["name"]: n["cap_watts"] for n in c.nodes()}


# the budget follows each node's draw, which the emulation makes of its job's measured CPU use: another
# test's load on the same cores moves it (make test runs these alone)
@pytest.mark.serial
def test_the_budget_moves_from_a_node_that_leaves_power_unused_to_one_that_would_use_it(tmp_path: Path) -> None:
    """PowerPlugin=power/balance under PowerCap=330: a compute-bound job on n01 and a job busy half
    the time on n02 start with even limits; the half-busy node's unused watts move to n01, the
    limits never sum over the cap, nor does the measured draw."""
    c = Cluster(tmp_path, nodes=2, cpus=1, extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\n"
                "AcctGatherNodeFreq=1\nPowerCap=330\nPowerPlugin=power/balance\n"
                "PowerParameters=balance_interval=2,recent_job=4",
                node_extra=f"IdleWatts=95 MaxWatts=190 {FREQS}").start()
    try:
        shown = c.run("scontrol", "show", "config").stdout
        assert re.search(r"^PowerParameters\s+= balance_interval=2,lower_threshold=90,", shown, re.M), shown
        compute = c.sbatch("-w", "n01", "-t", "5", "--wrap", BURN.format(s=240))
        c.wait_state(compute, "RUNNING", timeout=15)
        # at MaxWatts the second would pass the cap (190 + 190): --power-fit starts it at 1.6 GHz (134 W)
        half = c.sbatch("-w", "n02", "-t", "5", "--power-fit", "--wrap", HALF.format(s=240))
        c.wait_state(half, "RUNNING", timeout=30)
        wait_for(lambda: all(w is not None for w in _limits(c).values()), 15, what="both nodes limited")
        first = _limits(c)
        assert sum(first.values()) <= 330 + 0.5, first
        # the half-busy node is lowered step by step, and n01 raised with what it leaves
        moved = wait_for(lambda: (lim := _limits(c))["n01"] >= 185 and lim["n02"] <= 140 and lim, 60, interval=0.5,
                         what="the budget moved to the compute-bound node")
        assert sum(moved.values()) <= 330 + 0.5, moved
        for _ in range(10):  # the measured draw stays under the cap, sample after sample
            shown = {n["name"]: n["current_watts"] for n in c.nodes()}
            assert sum(shown.values()) <= 330 + 1, shown
            time.sleep(0.5)
        limits = _limits(c)
        assert _watts(c, "n01") <= limits["n01"] + 1  # held by its hardware
        # each job is shown its node's limit, and the lowest it has been (the half-busy one's: its last)
        shown = {j["job_id"]: (j["cap_watts"], j["min_cap_watts"]) for j in c.jobs(str(compute), str(half))}
        assert shown[compute][0] is not None and shown[compute][1] <= first["n01"] + 0.5, shown
        assert shown[half][1] <= 140, shown
        # kept with the controller's state: a restart does not lift, even for a heartbeat, limits the
        # cap's admission counts on
        c.kill_controller()
        c.start_controller()
        assert all(w is not None for w in _limits(c).values()), _limits(c)
        for _ in range(6):
            assert _limit_uw(c, "n02") not in ("off", "absent")
            time.sleep(0.5)
        c.run("scancel", str(compute), str(half))
        rows = c.run("sacct", "-X", "-n", "-P", "-j", f"{compute},{half}", "-o", "JobID,MinCapWatts").stdout
        lowest = dict(line.split("|") for line in rows.split())
        assert float(lowest[str(half)]) <= 140 and float(lowest[str(compute)]) <= first["n01"] + 0.5, rows
        wait_for(lambda: set(_limits(c).values()) == {None}, 30, what="the limits lifted once the jobs ended")
        wait_for(lambda: _limit_uw(c, "n01") == "off" and _limit_uw(c, "n02") == "off", 15,
                 what="the site's settings back on both nodes")
    finally:
        c.stop()



# the budget follows each node's draw, which the emulation makes of its job's measured CPU use: another
# test's load on the same cores moves it (make test runs these alone)
@pytest.mark.serial
def test_under_the_budget_a_job_that_does_not_fit_starts_held_to_what_fits(tmp_path: Path) -> None:
    """PowerPlugin=power/balance under PowerCap=330: with a compute-bound job on n01 (190 W), a
    second job without --power-fit does not fit at MaxWatts (380 W) but starts at once, its node
    held by a limit to what fits (134 W, 1.6 GHz), sent with its allocation; its clock is not
    pinned, and the budget then moves the limits, the measured draw under the cap throughout."""
    c = Cluster(tmp_path, nodes=2, cpus=1, extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\n"
                "AcctGatherNodeFreq=1\nPowerCap=330\nPowerPlugin=power/balance\n"
                "PowerParameters=balance_interval=2,recent_job=4",
                node_extra=f"IdleWatts=95 MaxWatts=190 {FREQS}").start()
    try:
        compute = c.sbatch("-w", "n01", "-t", "5", "--wrap", BURN.format(s=240))
        c.wait_state(compute, "RUNNING", timeout=15)
        wait_for(lambda: _limits(c)["n01"] is not None, 15, what="n01 given its share")
        half = c.sbatch("-w", "n02", "-t", "5", "--wrap", HALF.format(s=240))
        started = c.wait_state(half, "RUNNING", timeout=30)
        assert started["cpu_freq_khz"] is None and started["start_limit_khz"] == 1600000, started
        wait_for(lambda: _limit_uw(c, "n02") == "134000000", 10, what="n02 held to what fits")
        wait_for(lambda: "CapWatts=134 MinCapWatts=134\n" in c.run("scontrol", "show", "job", str(half)).stdout, 10,
                 what="the job's limit shown")
        for _ in range(16):  # the budget moves the limits; neither they nor the measured draw pass the cap
            limits = _limits(c)
            assert sum(w or 190 for w in limits.values()) <= 330 + 0.5, limits
            shown = {n["name"]: n["current_watts"] for n in c.nodes()}
            assert sum(shown.values()) <= 330 + 1, shown
            time.sleep(0.5)
        moved = _limits(c)
        assert moved["n02"] != 134 or moved["n01"] != 190, moved  # (the half-busy node's watts moved)
        c.run("scancel", str(compute), str(half))
    finally:
        c.stop()


def test_a_limited_node_shares_its_limit_with_the_gpu_its_job_holds(tmp_path: Path) -> None:
    """CapWatts=300 on a virtual node whose job holds one of its two GPUs: the CPU side (95-190 W)
    and that GPU (30-250 W) each get their floor and the same share of their span, the idle GPU
    its floor (30 W); its emulated NVML holds the GPUs' limits, the node draws no more than 300 W,
    and NONE gives the GPUs the site's limits back."""
    c = Cluster(tmp_path, nodes=1, cpus=2, extra="EmulatedNodes=YES\nGresTypes=gpu\n"
                "AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1",
                node_extra=f"Gres=gpu:2 GpuIdleWatts=30 GpuMaxWatts=250 IdleWatts=95 MaxWatts=190 {FREQS}").start()
    nvml = c.root / "spool" / "n01" / "nvml.json"
    try:
        job = c.sbatch("-n", "2", "--gpus=1", "-t", "5", "--wrap", f"srun -n 2 {BURN.format(s=240)}")
        c.wait_state(job, "RUNNING", timeout=15)
        wait_for(lambda: _watts(c, "n01") >= 400, 30, what="n01, its CPUs and one GPU busy")
        assert c.run("scontrol", "update", "nodename=n01", "capwatts=300").returncode == 0
        # floors 95 + 30 + 30, spans 95 + 220: (300 - 155) / 315 of each span
        share = (300 - 155) / 315
        # the agent sets one GPU, then the other, then the CPU side: wait for the last of them
        cpu_uw = str(int((300 - 30 - 30 - share * 220) * 1e6))
        wait_for(lambda: nvml.exists() and len(json.loads(nvml.read_text())) == 2 and _limit_uw(c, "n01") == cpu_uw,
                 15, what="the GPUs' and the CPU side's limits set")
        limits = json.loads(nvml.read_text())
        busy = "0" if limits["0"] > 30 else "1"
        assert limits[busy] == pytest.approx(30 + share * 220, abs=0.01) and min(limits.values()) == 30
        wait_for(lambda: _watts(c, "n01") <= 301, 30, what="n01 drawing no more than its limit")
        assert "CapWatts=300\n" in c.run("scontrol", "show", "node", "n01").stdout  # held by every part
        assert c.run("scontrol", "update", "nodename=n01", "capwatts=none").returncode == 0
        saved = c.root / "spool" / "n01" / "gpulimit.saved"
        # the agent writes the saved limits back, then removes the file that kept them
        wait_for(lambda: json.loads(nvml.read_text()) == {"0": 250.0, "1": 250.0} and not saved.exists(), 15,
                 what="the GPUs' own limits back and their saved copy gone")
    finally:
        c.stop()

"""Energy accounting: sensor plugins against kernel-shaped sysfs trees, the agent's meter, job
energy from node counters (Georgiou et al. 2014, eqs. 1-2), and a real job's ConsumedEnergyRaw."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from wattsched.config import Config, NodeConf
from wattsched.controller.energysplit import NodeHistory, Occupant, counter_at, job_energy
from wattsched.harness.testing import Cluster, wait_for
from wattsched.noded.energymeter import EnergyMeter
from wattsched.plugins.acct_gather_energy.emulated import EmulatedEnergy
from wattsched.plugins.acct_gather_energy.rapl import RaplEnergy


def _zone(root: Path, name: str, label: str, uj: int, wrap: int) -> Path:
    zone = root / "sys" / "class" / "powercap" / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return zone


def test_rapl_sums_packages_and_dram_and_survives_wraparound(tmp_path) -> None:
    wrap = 262143328850
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", wrap - 1_000_000, wrap)
    dram = _zone(tmp_path, "intel-rapl:0/intel-rapl:0:0", "dram", 5_000_000, wrap)
    core = _zone(tmp_path, "intel-rapl:0/intel-rapl:0:1", "core", 7_000_000, wrap)  # inside the package: not added
    _zone(tmp_path, "intel-rapl:1", "package-1", 0, wrap)
    rapl = RaplEnergy(Config(energy_sysfs_root=str(tmp_path)), [])
    assert [Path(z).name for z in rapl.zones] == ["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1"]
    assert rapl.read("n", 0, 0) == 0.0
    (pkg / "energy_uj").write_text("3000000\n")  # wrapped: 1 J to the top, 3 J after, plus the wrap's 1 uJ
    (dram / "energy_uj").write_text("7000000\n")  # +2 J
    (core / "energy_uj").write_text("9000000\n")
    assert rapl.read("n", 1, 0) == pytest.approx(1.000001 + 3 + 2)


def test_emulated_model_lag_and_trapezoid_integration(tmp_path) -> None:
    node = NodeConf(name="v1", cpus=4, idle_watts=100, max_watts=300)
    model = EmulatedEnergy(Config(), [node])
    assert model.read("v1", 0, []) == 100 and model.read("v1", 0, [(0.5, 0, 0)]) == 200
    assert model.read("v1", 0, [(0.7, 0, 0), (0.7, 0, 0)]) == 300  # busy shares are capped at the whole node
    # at half the highest frequency a busy node draws idle + (max - idle) / 8 without a CpuFreqWatts table
    assert model.read("v1", 0, [(1.0, 1200000, 2400000)]) == pytest.approx(100 + 200 / 8)
    lagged = EmulatedEnergy(Config(energy_emulated_lag_s=70), [node])
    lagged.read("v1", 0, [])
    after = lagged.read("v1", 70, [(1.0, 0, 0)])
    assert after == pytest.approx(100 + 200 * (1 - 1 / 2.718281828), rel=1e-3)  # one time constant: 63 %
    meter = EnergyMeter(model, {"v1": 4}, str(tmp_path), 1.0, lambda: {"v1": {}})
    for t in range(0, 11):
        meter.poll_once(1000.0 + t)
    assert meter.samples()["v1"].joules == pytest.approx(100 * 10)  # idle: E = P * t exactly
    meter._save()
    again = EnergyMeter(model, {"v1": 4}, str(tmp_path), 1.0, lambda: {"v1": {}})
    again.poll_once(2000.0)
    again.poll_once(2002.0)
    assert again.samples()["v1"].joules == pytest.approx(1000 + 200)  # the count goes on after a restart


def test_a_nodes_count_follows_it_to_another_agent(tmp_path) -> None:
    """Agents sharing a spool save one file each; a node re-hosted keeps its latest count."""
    nodes = [NodeConf(name=n, cpus=1, idle_watts=100, max_watts=200) for n in ("v1", "v2")]
    model = EmulatedEnergy(Config(), nodes)
    both = EnergyMeter(model, {"v1": 1, "v2": 1}, str(tmp_path), 1.0, lambda: {})
    for t in range(3):
        both.poll_once(1000.0 + t)
    both._save()
    alone = EnergyMeter(model, {"v2": 1}, str(tmp_path), 1.0, lambda: {})  # v2 in an agent of its own
    assert alone.nodes["v2"].joules == pytest.approx(200)
    alone.poll_once(2000.0)
    alone.poll_once(2001.0)
    alone._save()
    again = EnergyMeter(model, {"v1": 1, "v2": 1}, str(tmp_path), 1.0, lambda: {})  # together again
    assert (again.nodes["v1"].joules, again.nodes["v2"].joules) == (pytest.approx(200), pytest.approx(300))
    assert len(list((tmp_path / "energy").iterdir())) == 2


def test_hung_sensor_is_flagged_stale_and_does_not_block_others(tmp_path) -> None:
    class Sticky(EmulatedEnergy):
        def read(self, node, now, load):
            if node == "v2":
                time.sleep(3)
            return super().read(node, now, load)

    nodes = [NodeConf(name=n, cpus=1, idle_watts=50, max_watts=100) for n in ("v1", "v2")]
    meter = EnergyMeter(Sticky(Config(), nodes), {"v1": 1, "v2": 1}, str(tmp_path), 1.0, lambda: {},
                        read_timeout_s=0.2)
    started = time.monotonic()
    meter.poll_once(1.0)
    meter.poll_once(2.0)
    assert time.monotonic() - started < 1.5
    samples = meter.samples()
    assert samples["v1"].joules == pytest.approx(50) and "v2" not in samples
    assert meter.nodes["v2"].stale


def test_meter_never_waits_for_the_agent_while_holding_its_own_lock(tmp_path) -> None:
    """The profiler holds the agent's lock and then asks the meter for a job's usage: a meter
    that asked the agent for its jobs while holding its own lock would deadlock with it."""
    agent_lock = threading.Lock()

    def jobs_of_the_agent() -> dict:
        with agent_lock:
            return {"v1": {}}

    node = NodeConf(name="v1", cpus=4, idle_watts=100, max_watts=300)
    meter = EnergyMeter(EmulatedEnergy(Config(), [node]), {"v1": 4}, str(tmp_path), 1.0, jobs_of_the_agent)
    with agent_lock:  # as the profiler does, across a whole sample
        poll = threading.Thread(target=meter.poll_once, args=(1000.0,), daemon=True)
        poll.start()
        time.sleep(0.3)  # the poll is now waiting for the agent's lock
        free = meter._lock.acquire(timeout=2)  # what the profiler's meter.job_usage() needs
        assert free, "the meter holds its lock while waiting for the agent's"
        meter._lock.release()
    poll.join(5)
    assert not poll.is_alive()


def test_job_energy_is_the_sum_of_node_deltas_and_shared_nodes_are_split() -> None:
    samples = {"a": [(0.0, 0.0), (10.0, 1000.0), (20.0, 3000.0)], "b": [(0.0, 500.0), (20.0, 2500.0)]}
    assert counter_at(samples["a"], 15.0) == 2000.0 and counter_at(samples["a"], 25.0) is None
    alone = {n: NodeHistory(s, occupants=[Occupant(5, 15, 4, 1)]) for n, s in samples.items()}
    assert job_energy(alone, 5.0, 15.0, {"a": 4, "b": 4}, 1) == pytest.approx((2000 - 500) + (2000 - 1000))
    assert job_energy(alone, 5.0, 25.0, {"a": 4}, 1) is None  # the end is not covered yet
    # without IdleWatts: split by allocated CPUs (1 of 4 while the other job runs)
    shared = {"a": NodeHistory(samples["a"], occupants=[Occupant(0, 20, 1, 1), Occupant(0, 10, 3, 2)])}
    assert job_energy(shared, 0.0, 20.0, {"a": 1}, 1) == pytest.approx(1000 * 1 / 4 + 2000 * 1 / 1)


def test_shared_node_idle_part_by_cpus_dynamic_part_by_cpu_time() -> None:
    # 10 s at 100 W idle + 200 W dynamic = 3000 J; job 1 holds 1 CPU and computes 9 CPU-s,
    # job 2 holds 3 CPUs and computes 1 CPU-s: job 1 gets 1000/4 + 2000*0.9, job 2 1000*3/4 + 2000*0.1
    history = NodeHistory([(0.0, 0.0), (10.0, 3000.0)], [{}, {1: 9.0, 2: 1.0}], idle_watts=100,
                          occupants=[Occupant(0, 10, 1, 1), Occupant(0, 10, 3, 2)])
    one = job_energy({"a": history}, 0.0, 10.0, {"a": 1}, 1)
    two = job_energy({"a": history}, 0.0, 10.0, {"a": 3}, 2)
    assert one == pytest.approx(250 + 1800) and two == pytest.approx(750 + 200)
    assert one + two == pytest.approx(3000)  # nothing is charged twice or lost
    idle_only = NodeHistory([(0.0, 0.0), (10.0, 1000.0)], [{}, {}], idle_watts=100, occupants=history.occupants)
    assert job_energy({"a": idle_only}, 0.0, 10.0, {"a": 1}, 1) == pytest.approx(250)


@pytest.mark.e2e
def test_a_4_node_job_is_charged_the_sum_of_its_nodes_energy(tmp_path) -> None:
    c = Cluster(tmp_path, agents=2, extra="AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1",
                node_extra="IdleWatts=100 MaxWatts=300").start()
    try:
        wait_for(lambda: all(n["metered"] for n in c.nodes()), 20, what="nodes metered")
        job_id = c.sbatch("-N", "4", "-n", "4", "-t", "2", "--wrap",
                          "srun sh -c 'end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do :; done'")
        job = c.wait_state(job_id, "COMPLETED", timeout=60)
        row = wait_for(lambda: (r := c.accounted(job_id)[0])["consumed_energy_j"] and r, 30,
                       what="energy accounted")
        expected = 0.0
        for name in job["alloc_cpus"]:
            samples = [tuple(s) for s in c.api("GET", f"/v1/nodes/{name}/energy").json()["samples"]]
            expected += counter_at(samples, job["end_time"]) - counter_at(samples, job["start_time"])
        assert row["consumed_energy_j"] == pytest.approx(expected, abs=1)
        elapsed = job["end_time"] - job["start_time"]
        # four nodes, each between idle (100 W) and busy (300 W) for the job's run
        assert 4 * 100 * elapsed * 0.9 <= row["consumed_energy_j"] <= 4 * 300 * elapsed * 1.1
        assert row["consumed_energy_j"] > 4 * 100 * elapsed  # the busy loop drew more than idle power
        raw = c.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "ConsumedEnergyRaw").stdout.strip()
        assert raw == str(row["consumed_energy_j"])
        shown = c.run("scontrol", "show", "node", "n01").stdout
        assert "ConsumedJoules=" in shown and "CurrentWatts=" in shown
    finally:
        c.stop()


@pytest.mark.e2e
def test_the_record_that_first_says_completed_carries_the_energy(tmp_path) -> None:
    # Nodes are read once an hour here: only the reading each agent takes when a job ends can
    # settle the energy, and until it does the job stays COMPLETING, as in Slurm.
    c = Cluster(tmp_path, agents=2, extra="AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=3600",
                node_extra="IdleWatts=100 MaxWatts=300").start()
    try:
        wait_for(lambda: all(n["metered"] for n in c.nodes()), 20, what="nodes metered")
        done = c.sbatch("-N", "2", "-n", "2", "--wrap", "srun sleep 1")
        cancelled = c.sbatch("-N", "2", "-n", "2", "--wrap", "srun sleep 300")
        c.wait_state(cancelled, "RUNNING", timeout=30)
        seen: dict[str, list[str]] = {}

        def first_final() -> bool:
            out = c.run("sacct", "-X", "-n", "-P", "-j", f"{done},{cancelled}", "-o",
                        "JobID,State,ConsumedEnergyRaw").stdout
            for line in out.splitlines():
                job, state, joules = line.split("|")
                if state.split()[0] in ("COMPLETED", "CANCELLED"):
                    seen.setdefault(job, [state.split()[0], joules])
            if str(done) in seen and str(cancelled) not in seen and c.job(cancelled)["state"] == "RUNNING":
                c.run("scancel", str(cancelled))
            return len(seen) == 2

        wait_for(first_final, 60, 0.05, what="both jobs final in sacct")
        assert seen[str(done)][0] == "COMPLETED" and seen[str(cancelled)][0] == "CANCELLED"
        for _state, joules in seen.values():
            assert joules and int(joules) > 0, seen  # never a final state with 0 J
        assert c.run("squeue", "-h", "-t", "all", "-j", str(done), "-o", "%T").stdout.strip() == "COMPLETED"
    finally:
        c.stop()


def _nvml_available() -> str:
    """'' when NVML answers here, else why not."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return "" if pynvml.nvmlDeviceGetCount() else "NVML found no GPU"
    except Exception as exc:  # the library loads, but no driver or device: NVMLError and its kin
        return f"NVML is not available: {exc}"


def test_gpu_plugin_sums_the_gpus_energy_counters() -> None:
    reason = _nvml_available()
    if reason:
        pytest.skip(f"acct_gather_energy/gpu needs an NVIDIA GPU and driver: {reason}")
    from wattsched.plugins.acct_gather_energy.gpu import GpuEnergy

    plugin = GpuEnergy(Config(), [])
    first = plugin.read("n", 1.0, [])
    time.sleep(1)
    assert plugin.read("n", 2.0, []) >= first > 0


def test_gpu_plugin_without_nvml_says_so() -> None:
    if not _nvml_available():
        pytest.skip("this machine has a GPU: the error path is not reachable")
    from wattsched.plugins.acct_gather_energy.gpu import GpuEnergy

    with pytest.raises(RuntimeError, match="acct_gather_energy/gpu: NVML is not available here"):
        GpuEnergy(Config(), [])


def test_calc_adjustment_carries_the_counter_to_now_at_the_last_power(tmp_path) -> None:
    node = NodeConf(name="v1", cpus=4, idle_watts=100, max_watts=300)
    meter = EnergyMeter(EmulatedEnergy(Config(), [node]), {"v1": 4}, str(tmp_path), 1.0, lambda: {"v1": {}},
                        calc_adjustment=True)
    then = time.time() - 2.0
    meter.poll_once(then - 1.0)
    meter.poll_once(then)  # 100 J so far, at 100 W, two seconds ago
    sample = meter.samples()["v1"]
    assert sample.time >= then + 2.0 and sample.joules == pytest.approx(100 + 100 * (sample.time - then))

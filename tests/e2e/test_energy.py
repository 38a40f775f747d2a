"""Energy, profiles and CPU frequency on a real emulated cluster: agents metering their virtual
nodes over IPMI (RMCP+) from the emulated BMCs, HDF5 profiles merged per job, --cpu-freq set
in each node's kernel-shaped cpufreq tree and restored after completion, cancel, time limit
and an agent crash; sacct, sstat, sreport, sh5util and the profile plot."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import h5py
import pytest

from wattsched.controller.energysplit import counter_at
from wattsched.harness.testing import Cluster, free_port_block, wait_for
from wattsched.profiles import h5profile

FREQS = "CpuFreqWatts=2400000:190,2000000:158,1600000:134,1200000:116"
BURN = "python3 -c 'import time\nend = time.time() + {s}\nwhile time.time() < end: pass'"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("energy")
    c = Cluster(root, nodes=4, cpus=4, agents=2, bmc=True, extra="\n".join([
        "EmulatedNodes=YES", f"EmulatedBMCPort={free_port_block(4)}", "AcctGatherEnergyType=acct_gather_energy/ipmi",
        "AcctGatherNodeFreq=1",
        "AcctGatherProfileType=acct_gather_profile/hdf5", f"ProfileHDF5Dir={root / 'profile'}",
        "CpuFreqGovernors=OnDemand,Performance,PowerSave,UserSpace"]),
        node_extra=f"IdleWatts=95 MaxWatts=190 {FREQS}").start()
    wait_for(lambda: all(n["metered"] for n in c.nodes()), 30, what="nodes metered over IPMI")
    # started first, checked last: time limits are whole minutes
    c.timeout_job = c.sbatch("-w", "n04", "-t", "1", "--cpu-freq=low", "--wrap", "sleep 300")
    yield c
    c.stop()


def _cpufreq(c: Cluster, node: str, cpu: int = 0) -> dict[str, str]:
    """One CPU's cpufreq settings ({} until the agent lays out the node's tree, on first use)."""
    folder = c.root / "spool" / node / "sysfs" / "sys" / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
    if not folder.exists():
        return {}
    return {name: (folder / name).read_text().strip()
            for name in ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed",
                         "scaling_cur_freq")}


PRISTINE = {"scaling_governor": "performance", "scaling_min_freq": "1200000", "scaling_max_freq": "2400000",
            "scaling_setspeed": "<unsupported>", "scaling_cur_freq": "2400000"}


def test_four_node_job_energy_profile_and_frequency(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    job_id = c.sbatch("-N", "3", "-n", "3", "-x", "n04", "-t", "2", "--cpu-freq=1600000", "--profile=energy,task",
                      "--acctg-freq=energy=1,task=1", "--wrap", f"srun {BURN.format(s=10)}")
    running = c.wait_state(job_id, "RUNNING", timeout=15)
    node = sorted(running["alloc_cpus"])[0]
    wait_for(lambda: _cpufreq(c, node).get("scaling_cur_freq") == "1600000", 10, what="frequency set")
    assert _cpufreq(c, node)["scaling_governor"] == "userspace"
    stat = wait_for(lambda: (r := c.run("sstat", "-j", str(job_id), "-P", "-n", "-o",
                                        "JobID,ConsumedEnergyRaw,AveCPUFreq,ReqCPUFreqGov", check=False)).returncode
                    == 0 and len(row := r.stdout.strip().split("|")) == 4 and int(row[1]) > 0 and row[2] != "0"
                    and row,  # (no row while the step is not yet running: sstat says so, exit 0, as Slurm's)
                    15, what="sstat energy so far")
    assert stat[0] == f"{job_id}.0" and stat[2] == "1.60G" and stat[3] == "UserSpace"  # its first srun step
    job = c.wait_state(job_id, "COMPLETED", timeout=60)
    for name in job["alloc_cpus"]:
        assert _cpufreq(c, name) == PRISTINE  # restored after the job
    row = wait_for(lambda: (r := c.accounted(job_id)[0])["consumed_energy_j"] and r, 30, what="energy accounted")
    expected = 0.0
    for name in job["alloc_cpus"]:  # eq. 2: the sum over the nodes of EN(end) - EN(start)
        samples = [tuple(s) for s in c.api("GET", f"/v1/nodes/{name}/energy").json()["samples"]]
        expected += counter_at(samples, job["end_time"]) - counter_at(samples, job["start_time"])
    assert row["consumed_energy_j"] == pytest.approx(expected, abs=1)
    elapsed = job["end_time"] - job["start_time"]
    assert 3 * 95 * elapsed * 0.9 <= row["consumed_energy_j"] <= 3 * 190 * elapsed * 1.1
    fields = c.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o",
                   "ConsumedEnergyRaw,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,TRESUsageInTot"
                   ).stdout.strip().split("|")
    assert fields[0] == str(row["consumed_energy_j"]) and fields[1] == "1.60G"
    assert fields[2:5] == ["1.60G", "1.60G", "UserSpace"] and f"energy={row['consumed_energy_j']}" in fields[5]

    merged = h5profile.merged_path(str(c.root / "profile"), "root", job_id)
    wait_for(lambda: Path(merged).exists(), 15, what="merged profile")
    assert sorted(h5profile.nodes(merged)) == sorted(job["alloc_cpus"])
    for name in job["alloc_cpus"]:
        energy = h5profile.series_of(merged, name, "Energy")
        assert len(energy) >= 3 and set(energy["CPUFrequency"]) == {1600000}
        assert all(95 * 0.9 <= w <= 190 * 1.1 for w in energy["Power"])
        assert list(energy["Energy"]) == sorted(energy["Energy"])  # joules since the job started only grow
        task = h5profile.series_of(merged, name, "Task")
        assert len(task) >= 3 and max(task["CPUUtilization"]) > 20 and max(task["RSS"]) > 1000
    assert not list((c.root / "profile" / "root").glob(f"{job_id}_*.h5"))  # node files merged away

    listed = c.run("sh5util", "-L", "-i", merged, "-s", "Energy").stdout.split()
    assert listed == ["ElapsedTime", "EpochTime", "Power", "Energy", "CPUFrequency"]
    c.run("sh5util", "-j", str(job_id), "-o", str(tmp_path / "copy.h5"))
    c.run("sh5util", "-E", "-i", str(tmp_path / "copy.h5"), "-s", "Energy", "-o", str(tmp_path / "all.csv"))
    rows = list(csv.DictReader(io.StringIO((tmp_path / "all.csv").read_text())))
    assert {r["Node"] for r in rows} == set(job["alloc_cpus"]) and {r["CPUFrequency"] for r in rows} == {"1600000"}
    c.run("sh5util", "-I", "-i", merged, "-s", "Energy", "-d", "Power", "-o", str(tmp_path / "power.csv"))
    header = (tmp_path / "power.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["ElapsedTime", "EpochTime", "Min", "Ave", "Max", "Total"]
    assert sorted(header[6:]) == sorted(job["alloc_cpus"])
    png = tmp_path / "power.png"
    c.run("wattsched", "profile", "plot", "-j", str(job_id), "-o", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000

    report = c.run("sreport", "user", "TopUsage", "start=now-1hour", "end=now+1hour", "--tres=energy",
                   "-P", "-n").stdout.strip().splitlines()
    used = {line.split("|")[1]: int(line.split("|")[5]) for line in report}
    assert used["root"] >= row["consumed_energy_j"] * 0.99


def test_cancelled_job_frequency_restored_and_profile_readable(cluster: Cluster) -> None:
    c = cluster
    job_id = c.sbatch("-w", "n02", "--cpu-freq=PowerSave", "--profile=energy", "--acctg-freq=energy=1",
                      "--wrap", "sleep 120")
    c.wait_state(job_id, "RUNNING", timeout=15)
    wait_for(lambda: _cpufreq(c, "n02").get("scaling_governor") == "powersave", 10, what="governor set")
    # the driver follows the governor at once, but not in the same write: the speed is the next file
    wait_for(lambda: _cpufreq(c, "n02")["scaling_cur_freq"] == "1200000", 10, what="the speed of PowerSave")
    time.sleep(3)
    c.run("scancel", str(job_id))
    c.wait_state(job_id, "CANCELLED", timeout=30)
    wait_for(lambda: _cpufreq(c, "n02") == PRISTINE, 10, what="frequency restored after cancel")
    merged = Path(h5profile.merged_path(str(c.root / "profile"), "root", job_id))
    wait_for(merged.exists, 15, what="merged profile of the cancelled job")
    with h5py.File(merged, "r") as handle:  # a readable HDF5 file with the samples taken until the cancel
        assert len(handle["Nodes/n02/Energy"]) >= 2


def test_frequency_restored_after_an_agent_crash(cluster: Cluster) -> None:
    c = cluster
    job_id = c.sbatch("-w", "n01", "--cpu-freq=1200000-2000000:OnDemand", "--wrap", "sleep 120")
    c.wait_state(job_id, "RUNNING", timeout=15)
    wait_for(lambda: _cpufreq(c, "n01").get("scaling_max_freq") == "2000000", 10, what="range set")
    assert _cpufreq(c, "n01")["scaling_governor"] == "ondemand"
    agent = 0  # n01 and n02 are the first agent's; n04's timeout job runs on
    c.kill_agent(agent)
    c.run("scancel", str(job_id))  # the agent is down: the cancel waits for it
    time.sleep(1)
    assert _cpufreq(c, "n01")["scaling_max_freq"] == "2000000"  # nobody has restored it yet
    # past SlurmdTimeout the node is down: the job being cancelled ends so, it is not requeued
    job = c.wait_state(job_id, {"CANCELLED", "PENDING"}, timeout=30)
    assert job["state"] == "CANCELLED" and job["restart_count"] == 0
    c.start_agent(agent)  # the returning agent finds the script still running and is told to kill it
    wait_for(lambda: _cpufreq(c, "n01") == PRISTINE, 30, what="frequency restored after the restart")
    c.wait_nodes_up()
    assert c.job(job_id)["state"] == "CANCELLED"


def test_bad_frequency_profile_and_acctg_requests_are_refused(cluster: Cluster) -> None:
    c = cluster
    before = len(c.jobs())
    for args, message in [(["--cpu-freq=fast"], "Invalid --cpu-freq argument"),
                          (["--cpu-freq=low-high:UserSpace"], "UserSpace takes a single frequency"),
                          (["--cpu-freq=SchedUtil"], "is not in CpuFreqGovernors"),
                          (["--profile=lustre"], "Invalid --profile specification"),
                          (["--acctg-freq=energy=x"], "Invalid --acctg-freq specification"),
                          (["--cpu-freq=low", "--power-fit"], "mutually exclusive")]:
        result = c.run("sbatch", *args, "--wrap", "true", check=False)
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
    assert len(c.jobs()) == before  # nothing was accepted
    refused = c.api("POST", "/v1/jobs", json={"work_dir": "/tmp", "script": "#!/bin/sh\n", "profile": 7})
    assert refused.status_code == 422
    for args, message in [(["sstat", "-j", "99999"], "Invalid job id specified"),
                          (["sstat"], "You didn't give me any jobs to stat."),
                          (["sreport", "cluster", "Nonsense"], "Unknown report"),
                          (["sreport", "user", "TopUsage", "--tres=watts"], "Invalid TRES"),
                          (["sreport", "user", "TopUsage", "start=now", "end=now-1hour"],
                           "start time must be before end time"),
                          (["sh5util", "-j", "99999"], "No node-step files found for job 99999"),
                          (["sh5util", "-L", "-i", "/nonexistent.h5", "-s", "Energy"], "no such file"),
                          (["wattsched", "profile", "plot", "-j", "99999"], "no profile of job 99999")]:
        result = c.run(*args, check=False)
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)


def test_time_limit_restores_the_frequency(cluster: Cluster) -> None:
    c = cluster
    c.wait_state(c.timeout_job, "TIMEOUT", timeout=120)
    wait_for(lambda: _cpufreq(c, "n04") == PRISTINE, 15, what="frequency restored after the time limit")


def test_a_multi_node_mpi_step_has_its_nodes_energy_summed(cluster: Cluster, tmp_path: Path) -> None:
    """An MPI step over two nodes (srun --mpi=pmi2): its energy is the sum over both nodes of what
    their counters rose by while it ran (eq. 2 of the job, over the step's time), the profile holds
    both nodes, and sacct shows the step on its own line."""
    from tests.e2e.test_mpi import _compile

    hello = _compile("mpicc.mpich", tmp_path / "hello_mpich")
    burn = BURN.format(s=6).replace("'", '"')  # within sh -c '...'
    out = tmp_path / "step.out"
    job_id = cluster.sbatch("-N", "2", "-n", "2", "-w", "n01,n02", "--profile=energy", "--acctg-freq=energy=1",
                            "-o", str(out), "--wrap", f"srun --mpi=pmi2 sh -c '{hello} && {burn}'")
    assert cluster.wait_state(job_id, {"COMPLETED", "FAILED"}, timeout=120)["state"] == "COMPLETED", out.read_text()
    row = wait_for(lambda: (r := cluster.accounted(job_id)[0])["consumed_energy_j"] and r, 30,
                   what="energy accounted")
    step = next(s for s in row["steps"] if s["step_id"] == "0")
    assert (step["nnodes"], step["node_list"], step["state"]) == (2, "n[01-02]", "COMPLETED")
    expected = 0.0
    for name in ("n01", "n02"):
        samples = [tuple(s) for s in cluster.api("GET", f"/v1/nodes/{name}/energy").json()["samples"]]
        expected += counter_at(samples, step["time_end"]) - counter_at(samples, step["time_start"])
    assert step["consumed_energy_j"] == pytest.approx(expected, abs=1)
    one_node = expected / 2
    assert step["consumed_energy_j"] > 1.5 * one_node  # both nodes, not the first alone
    assert step["consumed_energy_j"] <= row["consumed_energy_j"]
    lines = cluster.run("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,NNodes,ConsumedEnergyRaw").stdout.split()
    assert f"{job_id}.0|2|{step['consumed_energy_j']}" in lines
    merged = h5profile.merged_path(str(cluster.root / "profile"), "root", job_id)
    wait_for(lambda: Path(merged).exists(), 15, what="merged profile")
    assert sorted(h5profile.nodes(merged)) == ["n01", "n02"]

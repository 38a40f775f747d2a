"""GPUs as generic resources on emulated GPU nodes: Gres= and gres.conf, --gres/--gpus/
--gpus-per-node/--gpus-per-task, jobs kept off GPUs others hold, CUDA_VISIBLE_DEVICES and
SLURM_JOB_GPUS, GPU energy in the job's energy, and squeue/sinfo/scontrol/sacct showing it all
like Slurm. The device cgroup (ConstrainDevices) is tested on this machine's cgroup v1 hierarchy
with device files made for the test, where root and a writable devices controller are there.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, reachable_by_all, restore_modes, sweep_cgroups, wait_for

GPU_NODES = "Gres=gpu:a100:2,gpu:v100:1 GpuIdleWatts=30 GpuMaxWatts=250 IdleWatts=100 MaxWatts=200"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("gres")
    running = Cluster(root, nodes=2, cpus=4, extra="\n".join([
        "EmulatedNodes=YES", "GresTypes=gpu", "AcctGatherEnergyType=acct_gather_energy/emulated",
        "AcctGatherNodeFreq=1"]), node_extra=GPU_NODES)
    (root / "gres.conf").write_text("Name=gpu Type=a100 File=/dev/nvidia[0-1]\nName=gpu Type=v100 File=/dev/nvidia2\n")
    running.start()
    yield running
    running.stop()


def _held(cluster: Cluster, tmp_path: Path, name: str, *options: str) -> tuple[int, Path]:
    """A job that prints its GPU variables and runs until its release file appears."""
    out, release = tmp_path / f"{name}.out", tmp_path / f"{name}.go"
    job_id = cluster.sbatch(*options, "-o", str(out), "--wrap",
                            "echo GPUS=$SLURM_JOB_GPUS CUDA=$CUDA_VISIBLE_DEVICES ON=$SLURM_GPUS_ON_NODE "
                            f"PER_NODE=$SLURM_GPUS_PER_NODE; while [ ! -e {release} ]; do sleep 0.1; done")
    return job_id, release


def test_gpus_are_held_by_one_job_at_a_time_and_shown_like_slurm(cluster: Cluster, tmp_path: Path) -> None:
    first, release_first = _held(cluster, tmp_path, "first", "-w", "n01", "--gres=gpu:a100:2")
    cluster.wait_state(first, "RUNNING")
    second, release_second = _held(cluster, tmp_path, "second", "-w", "n01", "--gres=gpu:a100:1")
    other_type, release_other = _held(cluster, tmp_path, "other", "-w", "n01", "--gpus-per-node=v100:1")
    # the node's v100 is free, and so are CPUs: the next backfill pass (every bf_interval=30 s) starts
    # it past the a100 job at the head, which strict passes stop at
    cluster.wait_state(other_type, "RUNNING", timeout=60)
    wait_for(lambda: cluster.job(second)["reason"] == "Resources", 20, what="the a100 job waits on GPUs")
    assert cluster.job(second)["state"] == "PENDING"
    wait_for(lambda: (tmp_path / "first.out").exists() and (tmp_path / "other.out").exists(), 20,
             what="both jobs printed")
    assert wait_for(lambda: (tmp_path / "first.out").read_text()).startswith("GPUS=0,1 CUDA=0,1 ON=2 PER_NODE=a100:2")
    assert wait_for(lambda: (tmp_path / "other.out").read_text()).startswith("GPUS=2 CUDA=2 ON=1 PER_NODE=v100:1")

    squeue = cluster.run("squeue", "-h", "-o", "%i %b", "-j", f"{first},{second}").stdout.split("\n")
    assert f"{first} gres/gpu:a100:2" in squeue and f"{second} gres/gpu:a100:1" in squeue
    node = cluster.run("scontrol", "show", "node", "n01").stdout
    assert "Gres=gpu:a100:2,gpu:v100:1" in node and "CfgTRES=cpu=4,mem=8000M,billing=4,gres/gpu=3" in node
    assert "gres/gpu=3" in node.split("AllocTRES=")[1].split()[0]
    assert cluster.run("sinfo", "-h", "-N", "-n", "n02", "-o", "%N %G").stdout.split() == \
        ["n02", "gpu:a100:2,gpu:v100:1"]
    assert cluster.run("sinfo", "-h", "-N", "-n", "n01", "-O", "NodeList,GresUsed:40").stdout.split() == \
        ["n01", "gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)"]
    assert "GresUsed=gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)" in cluster.run("scontrol", "-d", "show", "node",
                                                                          "n01").stdout
    shown_node = json.loads(cluster.run("scontrol", "show", "node", "n01", "--json").stdout)["nodes"][0]
    assert shown_node["gres"] == "gpu:a100:2,gpu:v100:1" and shown_node["tres"].endswith(",gres/gpu=3")
    shown = cluster.run("scontrol", "-d", "show", "job", str(first)).stdout
    assert "JOB_GRES=gpu:a100:2" in shown and "Nodes=n01 Mem=0 GRES=gpu:a100:2(IDX:0-1)" in shown
    assert "TresPerNode=gres/gpu:a100:2" in shown and ",gres/gpu=2" in shown
    parsed = json.loads(cluster.run("squeue", "--json", "-j", str(first)).stdout)["jobs"][0]
    assert parsed["tres_per_node"] == "gres/gpu:a100:2" and parsed["gres_detail"] == ["gpu:a100:2(IDX:0-1)"]

    release_first.touch()
    cluster.wait_state(second, "RUNNING")
    assert wait_for(lambda: (tmp_path / "second.out").exists() and (tmp_path / "second.out").read_text()) \
        .startswith("GPUS=0 CUDA=0 ON=1")
    release_second.touch()
    release_other.touch()
    rows = {r["job_id"]: r for r in cluster.accounted(first, second, other_type)}
    assert rows[first]["alloc_gpus"] == 2 and rows[first]["req_gpus"] == 2 and rows[first]["gpu_type"] == "a100"
    sacct = cluster.run("sacct", "-X", "-n", "-P", "-j", str(first), "-o", "ReqTRES,AllocTRES").stdout.strip()
    requested, allocated = sacct.split("|")
    assert "gres/gpu=2,gres/gpu:a100=2" in requested and "gres/gpu=2,gres/gpu:a100=2" in allocated
    tres = cluster.sacct_json(first)["jobs"][0]["tres"]["allocated"]
    assert {"type": "gres", "name": "gpu", "id": 1001, "count": 2} in tres


def test_gpus_per_task_and_per_job_spread_over_tasks_and_nodes(cluster: Cluster) -> None:
    per_task = cluster.run("srun", "-N1", "-n3", "--gpus-per-task=1", "-l", "sh", "-c",
                           "echo $SLURM_JOB_GPUS $SLURM_GPUS_ON_NODE").stdout.split("\n")
    assert sorted(line.split(": ", 1)[1] for line in per_task if line) == ["0,1,2 3"] * 3
    per_job = cluster.run("srun", "-N2", "--ntasks-per-node=1", "--gpus=4", "sh", "-c",
                          "echo $SLURMD_NODENAME $SLURM_JOB_GPUS").stdout.split("\n")
    assert sorted(line for line in per_job if line) == ["n01 0,1", "n02 0,1"]
    odd = cluster.run("srun", "-N2", "--ntasks-per-node=1", "--gpus=3", "sh", "-c",
                      "echo $SLURMD_NODENAME $SLURM_JOB_GPUS").stdout.split("\n")
    assert sorted(line for line in odd if line) == ["n01 0,1", "n02 0"]  # 3 in all, not 2 on each
    # a per-task request caps the tasks a node takes at its GPUs: 4 tasks need both nodes
    spread = cluster.run("srun", "-n4", "--gpus-per-task=a100:1", "sh", "-c", "echo $SLURMD_NODENAME").stdout
    assert sorted(spread.split()) == ["n01", "n01", "n02", "n02"]


@pytest.mark.parametrize(("option", "message"), [
    ("--gres=gpu:9", "Requested node configuration is not available"),
    ("--gpus-per-node=h100:1", "Requested node configuration is not available"),
    ("--gres=mps:1", "'mps' is not configured"),
    ("--gres=gpu:a100:1:2", "Invalid generic resource (gres) specification"),
    ("--gpus=99999999999", "Invalid GRES count"),
])
def test_impossible_or_malformed_gpu_requests_are_refused(cluster: Cluster, option: str, message: str) -> None:
    before = len(cluster.jobs())
    result = cluster.run("sbatch", option, "--wrap", "true", check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert len(cluster.jobs()) == before


def test_a_jobs_energy_carries_its_gpus(cluster: Cluster, tmp_path: Path) -> None:
    """Two jobs share n02: the one holding both a100s is charged their busy watts, the other not."""
    gpu_job, release_gpu = _held(cluster, tmp_path, "gpu", "-w", "n02", "-n1", "--gres=gpu:a100:2")
    cpu_job, release_cpu = _held(cluster, tmp_path, "cpu", "-w", "n02", "-n1")
    cluster.wait_state(gpu_job, "RUNNING")
    cluster.wait_state(cpu_job, "RUNNING")

    def n02_joules() -> int:
        return next(n["consumed_joules"] for n in cluster.nodes() if n["name"] == "n02")

    # several meter readings while both run (the split needs them): 3 kJ at the node's ~630 W
    shared_from = n02_joules()
    wait_for(lambda: n02_joules() - shared_from > 3000, 60, 0.5, what="3 kJ metered on n02 while shared")
    release_gpu.touch()
    release_cpu.touch()
    rows = {r["job_id"]: r for r in cluster.accounted(gpu_job, cpu_job)}
    for row in rows.values():
        assert row["consumed_energy_j"] is not None
    gpu_watts = rows[gpu_job]["consumed_energy_j"] / max(1e-9, rows[gpu_job]["time_end"] - rows[gpu_job]["time_start"])
    cpu_watts = rows[cpu_job]["consumed_energy_j"] / max(1e-9, rows[cpu_job]["time_end"] - rows[cpu_job]["time_start"])
    # two busy a100s draw 500 W; the node's idle 100 W and idle v100 are split by CPUs
    assert gpu_watts > 400 > cpu_watts, (gpu_watts, cpu_watts)


def _devices_usable(folder: Path) -> bool:
    """Whether device files made in ``folder`` can be opened (a nodev mount refuses them)."""
    probe = folder / "probe"
    os.mknod(probe, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    try:
        os.close(os.open(probe, os.O_RDONLY))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isfile("/sys/fs/cgroup/devices/cgroup.procs"),
                    reason="needs root and the cgroup v1 devices controller")
def test_the_device_cgroup_hides_the_gpus_of_other_jobs() -> None:
    """As nobody, with ConstrainDevices: the job's GPU file opens as far as the kernel's driver (no
    such device here), the other GPU's is refused by the cgroup; CUDA numbers its GPU 0."""
    root = Path(tempfile.mkdtemp(prefix="wattsched-gres-"))
    os.chmod(root, 0o755)
    devices = root / "dev"
    devices.mkdir()
    if not _devices_usable(devices):
        shutil.rmtree(root)
        pytest.skip(f"device files cannot be opened under {devices} (nodev)")
    for minor in (0, 1):
        # a major number no driver here has: opening it fails with ENXIO unless the cgroup refuses first
        os.mknod(devices / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        os.chmod(devices / f"nvidia{minor}", 0o666)
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o1777)
    cluster = Cluster(root, nodes=1, cpus=2, extra="GresTypes=gpu\nProctrackType=proctrack/cgroup\n"
                      "TaskPlugin=task/cgroup", node_extra="Gres=gpu:2")
    (root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n")
    (root / "gres.conf").write_text(f"Name=gpu File={devices}/nvidia[0-1]\n")
    probe = ("import errno, os\n"
             f"for i in (0, 1):\n"
             f"    try:\n"
             f"        os.open('{devices}/nvidia%d' % i, os.O_RDWR)\n"
             f"    except OSError as e:\n"
             f"        print(i, errno.errorcode[e.errno])\n"
             "print('CUDA', os.environ['CUDA_VISIBLE_DEVICES'], 'JOB', os.environ['SLURM_JOB_GPUS'])\n")
    (out / "probe.py").write_text(probe)
    modes = reachable_by_all([sys.executable, str(out)])
    try:
        cluster.start()
        holder = cluster.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap",
                                f"while [ ! -e {out}/go ]; do sleep 0.1; done")
        cluster.wait_state(holder, "RUNNING")
        job_id = cluster.sbatch("--gres=gpu:1", "-o", str(out / "%j.out"), "--wrap",
                                f"{sys.executable} {out}/probe.py", env=cluster.user_env(65534, "nobody"))
        cluster.wait_state(job_id, "COMPLETED")
        (out / "go").touch()
        text = (out / f"{job_id}.out").read_text().split("\n")
        # the holder has GPU 0: the job's GPU is 1, the other one is refused
        assert text[:3] == ["0 EPERM", f"1 {errno.errorcode[errno.ENXIO]}", "CUDA 0 JOB 1"], text
    finally:
        cluster.stop()
        restore_modes(modes)
        sweep_cgroups(cluster.name)
        shutil.rmtree(root, ignore_errors=True)


def _nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:  # NVML's own error classes: no library, no driver, no device
        return False


def test_autodetect_needs_the_gpus_it_declares(tmp_path: Path) -> None:
    """AutoDetect=nvml on a real node: without NVML (or with fewer GPUs than Gres= says) the agent
    does not start and says why; with a GPU, the node comes up with its devices."""
    cluster = Cluster(tmp_path, nodes=1, cpus=2, extra="GresTypes=gpu", node_extra="Gres=gpu:1")
    (tmp_path / "gres.conf").write_text("AutoDetect=nvml\n")
    if _nvml_present():
        cluster.start()
        try:
            assert cluster.nodes()[0]["gres"] == "gpu:1"
            job_id = cluster.sbatch("--gres=gpu:1", "-o", str(tmp_path / "gpu.out"), "--wrap",
                                    "echo $CUDA_VISIBLE_DEVICES")
            cluster.wait_state(job_id, "COMPLETED")
        finally:
            cluster.stop()
        return
    cluster.start_controller()  # the agent reads the controller's key first
    try:
        agent = subprocess.run([sys.executable, "-m", "wattsched.cli.wattsched", "noded", str(cluster.conf),
                                "--nodes", "n01", "--port", "0"], env=cluster.env, capture_output=True, text=True,
                               timeout=60)
    finally:
        cluster.stop()
    assert agent.returncode != 0 and "AutoDetect=nvml: NVML is not available here" in agent.stderr, agent.stderr


def test_rest_clients_ask_for_gpus_with_tres_fields(cluster: Cluster, tmp_path: Path) -> None:
    desc = {"script": "#!/bin/sh\necho $SLURM_JOB_GPUS\n", "current_working_directory": str(tmp_path),
            "standard_output": str(tmp_path / "rest.out"), "environment": ["PATH=/bin:/usr/bin"],
            "tres_per_node": "gres/gpu:v100:1"}
    reply = cluster.api("POST", "/slurm/v0.0.40/job/submit", json={"job": desc}).json()
    assert reply["errors"] == [], reply
    job_id = reply["job_id"]
    cluster.wait_state(job_id, "COMPLETED")
    assert (tmp_path / "rest.out").read_text() == "2\n"
    shown = cluster.api("GET", f"/slurm/v0.0.40/job/{job_id}").json()["jobs"][0]
    assert shown["tres_per_node"] == "gres/gpu:v100:1" and shown["gres_detail"] == ["gpu:v100:1(IDX:2)"]
    bad = cluster.api("POST", "/slurm/v0.0.40/job/submit", json={"job": {**desc, "tres_per_node": "gres/gpu:99"}})
    assert bad.status_code >= 400 and "Requested node configuration is not available" in bad.text


def test_tres_bind_is_checked_kept_shown_and_updated_like_slurm(cluster: Cluster) -> None:
    """--tres-bind and --gpu-bind are checked by Slurm's grammar, kept on the job, shown as TresBind
    and changed (or cleared) by scontrol update, a malformed one refused leaving the job as it was."""
    job_id = cluster.sbatch("-H", "-n1", "--tres-bind=gres/gpu:map_gpu:0,1", "--wrap", "true")
    assert "TresBind=gres/gpu:map_gpu:0,1" in cluster.run("scontrol", "show", "job", str(job_id)).stdout
    cluster.run("scontrol", "update", f"JobId={job_id}", "TresBind=gres/gpu:mask:0x1*2")
    shown = json.loads(cluster.run("scontrol", "--json", "show", "job", str(job_id)).stdout)
    assert shown["jobs"][0]["tres_bind"] == "gres/gpu:mask:0x1*2"
    refused = cluster.run("scontrol", "update", f"JobId={job_id}", "TresBind=gres/gpu:map:0x00", check=False)
    assert refused.returncode == 1
    assert "Invalid Trackable RESource (TRES) specification" in refused.stderr
    assert cluster.job(job_id)["tres_bind"] == "gres/gpu:mask:0x1*2"
    cluster.run("scontrol", "update", f"JobId={job_id}", "TresBind=")
    assert "TresBind" not in cluster.run("scontrol", "show", "job", str(job_id)).stdout
    cluster.run("scancel", str(job_id))
    before = len(cluster.jobs())
    bad = cluster.run("sbatch", "--tres-bind=gres/gpu:mask:wxyz", "--wrap", "true", check=False)
    assert bad.returncode == 1 and "Invalid Trackable RESource (TRES) specification" in bad.stderr
    gpu_bind = cluster.run("sbatch", "--gpu-bind=map_gpu:x", "--wrap", "true", check=False)
    assert gpu_bind.returncode == 1 and "Invalid --gpu-bind argument: map_gpu:x" in gpu_bind.stderr
    assert len(cluster.jobs()) == before
    bound = cluster.sbatch("-H", "--gpu-bind=closest", "--wrap", "true")
    assert cluster.job(bound)["tres_bind"] == "gres/gpu:closest"
    cluster.run("scancel", str(bound))

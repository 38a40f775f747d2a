"""GPU power limits, the GPU side of a node's limit: the node's limit shared by its CPU side and
the GPUs its jobs hold, set through NVML's calls (an emulated device file for virtual nodes, the
real library where a GPU is present), read back, the site's own limits saved and restored, also
by the next agent after a crash; a value the device refuses is reported, never assumed held."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wattsched import config
from wattsched.noded import gpulimits
from wattsched.noded.gpus import GpuMeter
from wattsched.noded.powerlimits import NodeLimits


def _node(tmp_path: Path) -> config.NodeConf:
    path = tmp_path / "g.conf"
    path.write_text("GresTypes=gpu\nNodeName=g1 CPUs=8 Gres=gpu:2 IdleWatts=100 MaxWatts=300 GpuIdleWatts=50 "
                    "GpuMaxWatts=250\nPartitionName=p Nodes=g1 Default=YES\n")
    return config.load(path).nodes[0]


def test_a_node_limit_is_shared_by_its_cpu_side_and_the_gpus_its_jobs_hold() -> None:
    ranges = {0: (50.0, 250.0), 1: (50.0, 250.0)}
    # one GPU busy: floors 100 + 50 + 50 = 200, spans 200 + 200; 400 W is half of them
    cpu, each = gpulimits.split(400.0, (100.0, 300.0), ranges, {0})
    assert each == {0: 150.0, 1: 50.0} and cpu == 200.0
    assert gpulimits.split(1000.0, (100.0, 300.0), ranges, {0, 1}) == (500.0, {0: 250.0, 1: 250.0})
    # under the floors the parts stay at theirs: no hardware holds less than it draws idle
    assert gpulimits.split(150.0, (100.0, 300.0), ranges, {0, 1}) == (100.0, {0: 50.0, 1: 50.0})
    # the parts add up to the limit wherever it lies between the floors and the tops
    for limit in (210.0, 333.0, 599.0):
        cpu, each = gpulimits.split(limit, (100.0, 300.0), ranges, {0, 1})
        assert cpu + sum(each.values()) == pytest.approx(limit)


def test_virtual_gpus_are_limited_restored_and_recovered_after_a_crash(tmp_path: Path) -> None:
    node = _node(tmp_path)
    spool = tmp_path / "spool"
    limits = NodeLimits({"g1": node}, str(spool), "/", emulated=True)
    limits.order("g1", 400.0, None, 1000.0, busy_gpus=[0])
    assert limits.held("g1") == 400.0 and "g1" not in limits.errors
    assert json.loads((spool / "g1" / gpulimits.EMULATED).read_text()) == {"0": 150.0, "1": 50.0}
    assert limits.emulated_limit("g1") == 200.0  # the CPU side's part
    saved = spool / "g1" / gpulimits.SAVED
    assert json.loads(saved.read_text()) == {"0": 250.0, "1": 250.0} and saved.stat().st_mode & 0o777 == 0o600
    # the emulated GPUs draw no more than their limits
    meter = GpuMeter({"g1": node}, True, lambda: {"g1": {7: [0, 1]}}, limit_of=limits.gpu_limit)
    meter.poll(1000.0, {"g1": {7: object()}}, {"g1": {7: [0, 1]}})
    assert meter.watts("g1") == 150.0 + 50.0
    # a new agent (the old one killed while the limit was set) gives the site its limits back first
    again = NodeLimits({"g1": node}, str(spool), "/", emulated=True)
    assert again.recover() == ["g1"]
    assert json.loads((spool / "g1" / gpulimits.EMULATED).read_text()) == {"0": 250.0, "1": 250.0}
    assert not saved.exists()
    again.order("g1", 500.0, None, 1001.0, busy_gpus=[0, 1])
    again.order("g1", None, None, 1002.0)
    assert json.loads((spool / "g1" / gpulimits.EMULATED).read_text()) == {"0": 250.0, "1": 250.0}
    assert again.held("g1") is None and not saved.exists()


def test_a_limit_a_gpu_refuses_is_reported_not_assumed(tmp_path: Path) -> None:
    node = _node(tmp_path)
    spool = tmp_path / "spool"

    class Stubborn(gpulimits.EmulatedNvml):  # a device that keeps its own limit, whatever is set
        def get_limit(self, index: int) -> float:
            return 250.0

    limits = NodeLimits({"g1": node}, str(spool), "/", emulated=True)
    limits.gpus["g1"].nvml = Stubborn(str(spool / "g1" / gpulimits.EMULATED), node)
    limits.order("g1", 400.0, None, 1000.0, busy_gpus=[0])
    assert limits.held("g1") is None and "GPU 0 took 250 W for 150 W" in limits.errors["g1"]
    (spool / "g1" / gpulimits.EMULATED).write_text("not json")
    limits.gpus["g1"].nvml = gpulimits.EmulatedNvml(str(spool / "g1" / gpulimits.EMULATED), node)
    limits.order("g1", 400.0, None, 1001.0, busy_gpus=[0])
    assert limits.held("g1") is None and "nvml.json" in limits.errors["g1"]


def _nvml_gpu() -> str:
    """Why the real-GPU test cannot run here ("" where it can)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return "NVML finds no GPU on this machine"
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"no NVML here: {exc}"
    return "" if os.geteuid() == 0 else "setting a GPU's power limit needs root"


@pytest.mark.skipif(bool(_nvml_gpu()), reason=_nvml_gpu() or "a GPU is present")
def test_a_real_gpus_limit_is_set_through_nvml_and_given_back(tmp_path: Path) -> None:
    path = tmp_path / "g.conf"
    path.write_text("GresTypes=gpu\nNodeName=g1 CPUs=8 Gres=gpu:1 IdleWatts=100 MaxWatts=300\n"
                    "PartitionName=p Nodes=g1 Default=YES\n")
    node = config.load(path).nodes[0]
    # (the CPU side under an empty tree: this test changes the machine's GPU, not its packages)
    limits = NodeLimits({"g1": node}, str(tmp_path / "spool"), str(tmp_path), emulated=False)
    nvml = limits.gpus["g1"].nvml
    low, high = nvml.constraints(0)
    before = nvml.get_limit(0)
    limits.order("g1", 100.0 + low + (high - low) / 2 + 100.0, None, 1000.0, busy_gpus=[0])
    try:
        assert abs(nvml.get_limit(0) - (low + (high - low) / 2)) <= 1.0, limits.errors
    finally:
        limits.order("g1", None, None, 1001.0)
    assert abs(nvml.get_limit(0) - before) <= 1.0

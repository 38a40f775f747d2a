"""Node power limits on a kernel-shaped powercap tree (noded.powerlimits): RAPL package limits
written, read back and restored to the site's own settings, after a crash too; never under the
node's idle floor nor over what a package allows; a limit the hardware does not take reported;
and a virtual node's CPUs slowed to what its limit lets them draw."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wattsched import powermodel
from wattsched.config import NodeConf
from wattsched.noded import powerlimits
from wattsched.noded.powerlimits import NodeLimits, PowercapTree

NODE = NodeConf(name="n1", cpus=8, idle_watts=95, max_watts=190,
                cpu_freq_watts=((2400000, 190), (2000000, 158), (1600000, 134), (1200000, 116)))


def _kernel_tree(root: Path, packages: int = 2) -> Path:
    """Two packages with their dram subzones, as intel_rapl lays them out (limits in microwatts)."""
    base = root / "sys" / "class" / "powercap"
    for index in range(packages):
        zone = base / f"intel-rapl:{index}"
        dram = zone / f"intel-rapl:{index}:0"
        dram.mkdir(parents=True)
        for folder, name, limit, most in ((zone, f"package-{index}", 125_000_000, 165_000_000),
                                          (dram, "dram", 0, 0)):
            files = {"name": name, "enabled": "0", "energy_uj": "1000000", "max_energy_range_uj": "262143328850",
                     "constraint_0_name": "long_term", "constraint_0_power_limit_uw": str(limit),
                     "constraint_0_time_window_us": "27983872", "constraint_0_max_power_uw": str(most)}
            for key, value in files.items():
                (folder / key).write_text(value + "\n")
    return base


def _value(base: Path, zone: str, name: str) -> str:
    return (base / zone / name).read_text().strip()


def test_a_node_limit_is_shared_by_its_packages_and_the_sites_settings_come_back(tmp_path: Path) -> None:
    base = _kernel_tree(tmp_path)
    tree = PowercapTree(str(tmp_path), str(tmp_path / "spool"), NODE)
    assert [os.path.basename(z) for z in tree.packages()] == ["intel-rapl:0", "intel-rapl:1"]  # not dram
    applied = tree.hold(150.0, rest_watts=30.0)
    assert applied.watts == 150.0 and tree.watts == 150.0
    for zone in ("intel-rapl:0", "intel-rapl:1"):
        assert _value(base, zone, "constraint_0_power_limit_uw") == "60000000"  # (150 - 30) / 2 W
        assert _value(base, zone, "enabled") == "1"
    assert _value(base, "intel-rapl:0/intel-rapl:0:0", "constraint_0_power_limit_uw") == "0"  # dram untouched
    saved = json.loads((tmp_path / "spool" / "n1" / powerlimits.SAVED).read_text())
    assert saved["intel-rapl:0"] == {"constraint_0_power_limit_uw": "125000000",
                                     "constraint_0_time_window_us": "27983872", "enabled": "0"}
    assert (tmp_path / "spool" / "n1" / powerlimits.SAVED).stat().st_mode & 0o777 == 0o600
    tree.hold(500.0)  # over what a package allows: each gets its most
    assert _value(base, "intel-rapl:1", "constraint_0_power_limit_uw") == "165000000"
    tree.hold(10.0)  # under the idle floor: held at IdleWatts
    assert tree.watts == 95.0 and _value(base, "intel-rapl:0", "constraint_0_power_limit_uw") == "47500000"
    assert tree.lift().watts is None
    for zone in ("intel-rapl:0", "intel-rapl:1"):
        assert _value(base, zone, "constraint_0_power_limit_uw") == "125000000"
        assert _value(base, zone, "enabled") == "0"
    assert not (tmp_path / "spool" / "n1" / powerlimits.SAVED).exists()
    assert tree.lift().watts is None  # nothing to lift: nothing changes


def test_an_agent_that_died_limiting_a_node_gives_the_site_its_settings_back(tmp_path: Path) -> None:
    base = _kernel_tree(tmp_path)
    spool = str(tmp_path / "spool")
    NodeLimits({"n1": NODE}, spool, str(tmp_path), emulated=False).order("n1", 120.0, None, 1000.0)
    assert _value(base, "intel-rapl:0", "enabled") == "1"
    # the agent is killed; the next one finds the saved settings and restores them first
    limits = NodeLimits({"n1": NODE}, spool, str(tmp_path), emulated=False)
    assert limits.recover() == ["n1"]
    assert _value(base, "intel-rapl:0", "constraint_0_power_limit_uw") == "125000000"
    assert _value(base, "intel-rapl:0", "enabled") == "0" and limits.held("n1") is None
    assert limits.recover() == []


def test_a_limit_the_hardware_does_not_take_is_reported_not_assumed(tmp_path: Path) -> None:
    base = _kernel_tree(tmp_path, packages=1)
    limit_file = base / "intel-rapl:0" / "constraint_0_power_limit_uw"
    limits = NodeLimits({"n1": NODE}, str(tmp_path / "spool"), str(tmp_path), emulated=False)
    limit_file.unlink()
    limit_file.mkdir()  # the write fails, as on a locked-down BIOS
    limits.order("n1", 120.0, None, 1000.0)
    assert limits.held("n1") is None and "Is a directory" in limits.errors["n1"]
    limit_file.rmdir()
    limit_file.write_text("125000000\n")
    limit_file.chmod(0o444)
    if os.geteuid() != 0:  # (root writes a read-only file: the read-back check is then what catches it)
        limits.order("n1", 120.0, None, 1000.0)
        assert limits.held("n1") is None and limits.errors["n1"]
    limit_file.chmod(0o644)
    limits.order("n1", 120.0, None, 1000.0)
    assert limits.held("n1") == 120.0 and "n1" not in limits.errors
    no_tree = NodeLimits({"n1": NODE}, str(tmp_path / "spool2"), str(tmp_path / "bare"), emulated=False)
    no_tree.order("n1", 120.0, None, 1000.0)
    assert no_tree.held("n1") is None and "no RAPL package" in no_tree.errors["n1"]


def test_the_rest_of_a_real_node_is_measured_and_left_its_part(tmp_path: Path) -> None:
    base = _kernel_tree(tmp_path, packages=1)
    limits = NodeLimits({"n1": NODE}, str(tmp_path / "spool"), str(tmp_path), emulated=False)
    limits.order("n1", 160.0, 150.0, 1000.0)  # first order: the packages' power not yet known
    (base / "intel-rapl:0" / "energy_uj").write_text(str(1_000_000 + 110_000_000) + "\n")  # 110 J in 1 s
    limits.order("n1", 160.0, 150.0, 1001.0)  # the node draws 150 W of which the package 110 W
    assert _value(base, "intel-rapl:0", "constraint_0_power_limit_uw") == "120000000"  # 160 - 40


@pytest.mark.parametrize(("limit", "khz"), [(None, 2400000), (200.0, 2400000), (190.0, 2400000), (174.0, 2200000),
                                            (158.0, 2000000), (134.0, 1600000), (125.0, 1400000), (116.0, 1200000),
                                            (100.0, 1200000)])
def test_a_virtual_node_runs_as_fast_as_its_limit_lets_it(limit: float | None, khz: int) -> None:
    """Between the clock steps RAPL holds its average: the mean frequency draws the limit exactly."""
    assert powermodel.limited_khz(NODE, 2400000, 2400000, limit) == pytest.approx(khz, abs=2)
    assert powermodel.limited_khz(NODE, 1600000, 2400000, limit) == pytest.approx(min(khz, 1600000), abs=2)


def test_a_virtual_nodes_tree_is_laid_out_as_the_kernels_and_read_back(tmp_path: Path) -> None:
    limits = NodeLimits({"n1": NODE}, str(tmp_path), "/", emulated=True)
    assert limits.emulated_limit("n1") is None
    limits.order("n1", 150.0, None, 1000.0)
    zone = tmp_path / "n1" / "sysfs" / "sys" / "class" / "powercap" / "intel-rapl:0"
    assert (zone / "name").read_text().strip() == "package-0"
    assert (zone / "constraint_0_power_limit_uw").read_text().strip() == "150000000"
    assert limits.emulated_limit("n1") == 150.0
    limits.order("n1", None, None, 1001.0)
    assert limits.emulated_limit("n1") is None
    assert (zone / "constraint_0_power_limit_uw").read_text().strip() == "190000000"  # its firmware's


def test_the_cap_counts_a_node_at_the_limit_its_hardware_reports_holding() -> None:
    from wattsched import snapbuild
    from wattsched.model import Node

    free = snapbuild.node_power(NODE)
    held = snapbuild.node_power(NODE, (), 140.0)
    assert (free.max, held.max, held.idle) == (190, 140, 95)
    assert held.busy_at(2400000) == 140 and held.busy_at(1200000) == 116  # no frequency draws more than the limit
    assert snapbuild.node_power(NODE, (), 50.0).max == 95  # never under the idle floor
    node = Node(name="n1", cpus=8, real_memory_mb=1000, idle_watts=95, max_watts=190)
    assert node.held_limit is None
    node.cap_watts = 140.0
    assert node.held_limit is None  # ordered, not yet held: the cap counts MaxWatts
    node.limit_watts = 140.0
    assert node.held_limit == 140.0
    node.limit_watts = 95.0  # held to another limit than the one ordered
    assert node.held_limit is None


def test_the_cap_counts_a_node_moving_between_limits_at_the_higher_of_the_two() -> None:
    """Until the agent reports the new limit held, the hardware may still hold the old one."""
    from wattsched.model import Node

    node = Node(name="n1", cpus=1, real_memory_mb=100)
    assert node.counted_limit is None  # none ordered
    node.balance_watts = 150
    assert node.counted_limit is None  # ordered, not yet held: the cap counts its MaxWatts
    node.limit_watts = 150.0
    assert node.counted_limit == 150 and node.held_limit == 150
    node.balance_watts = 120  # lowered: until it is held, 150 W may still be drawn
    assert node.counted_limit == 150 and node.held_limit is None
    node.limit_watts = 120.0
    assert node.counted_limit == 120
    node.cap_watts = 180  # an administrator's higher cap: the budget's lower one stands
    node.balance_watts = 170  # raised: at most the new limit
    assert node.counted_limit == 170
    node.balance_watts = None
    node.cap_watts = None  # lifted: no limit to count on
    assert node.counted_limit is None

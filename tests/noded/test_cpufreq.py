"""CPU frequency: --cpu-freq as Slurm reads it, the emulated frequency models, and cpufreq sysfs
control against trees laid out exactly as the kernel lays them out."""

from __future__ import annotations

import os

import pytest

from wattsched import cpufreq
from wattsched.cpufreq import FreqError, FreqRequest, FreqSetting
from wattsched.noded.cpufreq import CpuFreqSysfs, layout_tree

FREQS = [1200000, 1600000, 2000000, 2400000]


@pytest.mark.parametrize(("spec", "expected"), [
    ("2000000", FreqRequest(low="2000000")),
    ("Low", FreqRequest(low="low")),
    ("highm1", FreqRequest(low="highm1")),
    ("OnDemand", FreqRequest(governor="ondemand")),
    ("1200000-2000000", FreqRequest(low="1200000", high="2000000")),
    ("low-high:Performance", FreqRequest(low="low", high="high", governor="performance")),
])
def test_parse_slurm_forms(spec: str, expected: FreqRequest) -> None:
    assert cpufreq.parse(spec) == expected


@pytest.mark.parametrize("spec", ["fast", "1-2-3", "-2000000", "2000000:Performance", "low-high:UserSpace",
                                  "low-high:turbo", "1200000-"])
def test_parse_refuses_what_slurm_refuses(spec: str) -> None:
    with pytest.raises(FreqError, match="Invalid --cpu-freq argument"):
        cpufreq.parse(spec)


def test_governors_are_checked_against_cpufreqgovernors() -> None:
    allowed = cpufreq.DEFAULT_GOVERNORS  # OnDemand, Performance, UserSpace
    assert cpufreq.check("2000000", allowed).governor_needed == "userspace"
    assert cpufreq.check("Performance", allowed) is not None
    with pytest.raises(FreqError, match="powersave is not in CpuFreqGovernors"):
        cpufreq.check("PowerSave", allowed)
    with pytest.raises(FreqError, match="userspace is not in CpuFreqGovernors"):
        cpufreq.check("1600000", ("performance",))


def test_resolve_on_a_frequency_table() -> None:
    assert cpufreq.resolve(cpufreq.parse("low"), FREQS) == FreqSetting(governor="userspace", setspeed=1200000)
    assert cpufreq.resolve(cpufreq.parse("high"), FREQS).setspeed == 2400000
    assert cpufreq.resolve(cpufreq.parse("highm1"), FREQS).setspeed == 2000000
    assert cpufreq.resolve(cpufreq.parse("medium"), FREQS).setspeed == 1600000
    # a value between two listed frequencies goes up, as the kernel's CPUFREQ_RELATION_L does
    assert cpufreq.resolve(cpufreq.parse("1700000"), FREQS).setspeed == 2000000
    assert cpufreq.resolve(cpufreq.parse("9999999"), FREQS).setspeed == 2400000
    assert cpufreq.resolve(cpufreq.parse("low-highm1:OnDemand"), FREQS) == \
        FreqSetting(governor="ondemand", min_khz=1200000, max_khz=2000000)
    assert cpufreq.resolve(cpufreq.parse("PowerSave"), FREQS) == FreqSetting(governor="powersave")
    with pytest.raises(FreqError, match="minimum above maximum"):
        cpufreq.resolve(cpufreq.parse("high-low"), FREQS)


def test_power_and_runtime_models() -> None:
    table = ((2400000, 190), (1600000, 134))
    assert cpufreq.busy_watts(2400000, 2400000, 95, 190, table) == 190
    assert cpufreq.busy_watts(2000000, 2400000, 95, 190, table) == pytest.approx(162)  # linear between points
    assert cpufreq.busy_watts(1200000, 2400000, 100, 300) == pytest.approx(125)  # (1/2)^3 of the dynamic part
    assert cpufreq.runtime_factor(1200000, 2400000, 1.0) == 2.0
    assert cpufreq.runtime_factor(1200000, 2400000, 0.5) == 1.5
    assert cpufreq.effective_khz("userspace", 1600000, 1200000, 2400000) == 1600000
    assert cpufreq.effective_khz("powersave", None, 1200000, 2000000) == 1200000
    assert cpufreq.effective_khz("ondemand", None, 1200000, 2000000) == 2000000


def test_layout_is_shaped_like_the_kernels(tmp_path) -> None:
    layout_tree(str(tmp_path), 4, FREQS)
    cpu = tmp_path / "sys" / "devices" / "system" / "cpu"
    assert (cpu / "online").read_text() == "0-3\n"
    assert os.readlink(cpu / "cpu2" / "cpufreq") == "../cpufreq/policy2"
    policy = cpu / "cpufreq" / "policy2"
    assert sorted(p.name for p in policy.iterdir()) == sorted([
        "affected_cpus", "related_cpus", "cpuinfo_min_freq", "cpuinfo_max_freq", "cpuinfo_transition_latency",
        "scaling_driver", "scaling_available_frequencies", "scaling_available_governors", "scaling_governor",
        "scaling_min_freq", "scaling_max_freq", "scaling_setspeed", "scaling_cur_freq"])
    assert (policy / "scaling_available_frequencies").read_text() == "2400000 2000000 1600000 1200000 \n"
    assert (policy / "scaling_setspeed").read_text() == "<unsupported>\n"
    sysfs = CpuFreqSysfs(str(tmp_path), emulated=True)
    assert sysfs.cpus() == [0, 1, 2, 3] and sysfs.available(0) == FREQS and sysfs.max_khz(1) == 2400000


def test_apply_and_restore_on_the_jobs_cpus_only(tmp_path) -> None:
    layout_tree(str(tmp_path), 4, FREQS)
    sysfs = CpuFreqSysfs(str(tmp_path), emulated=True)
    before = {c: sysfs.settings(c) for c in range(4)}
    saved = sysfs.apply([1, 2], cpufreq.resolve(cpufreq.parse("1600000"), FREQS))
    assert sysfs.settings(1)["scaling_governor"] == "userspace" and sysfs.current_khz(2) == 1600000
    assert sysfs.settings(0) == before[0] and sysfs.current_khz(3) == 2400000  # other CPUs untouched
    sysfs.restore(saved)
    assert {c: sysfs.settings(c) for c in range(4)} == before and sysfs.current_khz(1) == 2400000


def test_range_writes_never_put_min_above_max(tmp_path) -> None:
    """On a real tree the kernel refuses min > max: raising the range writes max first."""
    layout_tree(str(tmp_path), 1, FREQS)
    sysfs = CpuFreqSysfs(str(tmp_path))  # a real node's tree: no emulated driver updates
    low = sysfs.apply([0], FreqSetting(min_khz=1200000, max_khz=1600000))
    writes = []
    original = sysfs._write

    def record(cpu, name, value):
        if name in ("scaling_min_freq", "scaling_max_freq"):
            assert name != "scaling_min_freq" or int(value) <= int(sysfs._read(cpu, "scaling_max_freq"))
        writes.append(name)
        original(cpu, name, value)

    sysfs._write = record
    sysfs.apply([0], FreqSetting(min_khz=2000000, max_khz=2400000))
    assert writes == ["scaling_max_freq", "scaling_min_freq"]
    sysfs.restore(low)
    assert sysfs.settings(0)["scaling_max_freq"] == "2400000"


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def test_throttle_never_leaves_a_job_stopped() -> None:
    """Released or shut down mid-cycle, the throttle lets the job's processes run again."""
    import subprocess
    import time

    from wattsched.harness.testing import wait_for
    from wattsched.noded.throttle import PERIOD_S, Throttle

    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True) for _ in range(2)]
    try:
        throttle = Throttle(lambda key: {procs[key[1]].pid})
        throttle.set(("n", 0), 0.3)
        throttle.set(("n", 1), 0.3)
        stopped_seen = False
        deadline = time.monotonic() + 3 * PERIOD_S
        while time.monotonic() < deadline and not stopped_seen:
            stopped_seen = _state(procs[0].pid) == "T"
            time.sleep(0.01)
        assert stopped_seen  # the duty cycle does stop the job
        throttle.release(("n", 0))
        time.sleep(2 * PERIOD_S)
        assert _state(procs[0].pid) != "T"
        # back to full speed (an energy policy raising the frequency) while stopped: it goes on
        wait_for(lambda: _state(procs[1].pid) == "T", 3 * PERIOD_S, interval=0.005, what="job 1 stopped")
        throttle.set(("n", 1), 1.0)
        assert ("n", 1) not in throttle.ratios
        wait_for(lambda: _state(procs[1].pid) != "T", 1.0, interval=0.005, what="job 1 running again")
        throttle.stop()
        time.sleep(PERIOD_S)
        assert _state(procs[1].pid) != "T"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

"""Power-saving policies on hand-built snapshots (pure: no clock, no daemons), the switching
model and the saving report."""

from __future__ import annotations

import math

import pytest

from wattsched import capadmission, powerreport, powersave, states, switching
from wattsched.config import ConfigError, load
from wattsched.nodestates import PowerFlag, PowerState
from wattsched.plugins.power_save.energy_aware import EnergyAware
from wattsched.plugins.power_save.idle import IdleTimeout
from wattsched.plugins.power_save.inertial import AWAKENING, SEDATING, Inertial
from wattsched.plugins.power_save.reclaim import Reclaim
from wattsched.powersave import PendingBrief, PowerSaveSnap, PsNode


def _nodes(spec: str, now: float = 1000.0) -> tuple[PsNode, ...]:
    """'i:100 b i:10 o' -> n0 idle since 100, n1 busy, n2 idle since 10, n3 off."""
    result = []
    for index, item in enumerate(spec.split()):
        kind, _, since = item.partition(":")
        state = {"i": PowerState.IDLE, "b": PowerState.BUSY, "o": PowerState.OFF, "s": PowerState.SWITCHING_OFF,
                 "x": PowerState.IDLE}[kind]
        result.append(PsNode(f"n{index}", state, float(since or now), excluded=kind == "x"))
    return tuple(result)


def test_idle_timeout_switches_off_nodes_idle_long_enough_never_excluded_ones() -> None:
    snap = PowerSaveSnap(1000.0, _nodes("i:100 b i:950 x:0 o"))
    assert IdleTimeout(t_idle=600).decide(snap, {}).suspend == ["n0"]
    assert IdleTimeout(t_idle=0).decide(snap, {}).suspend == ["n0", "n2"]  # longest idle first


def test_energy_aware_waits_for_the_first_jobs_estimated_start() -> None:
    policy = EnergyAware(threshold=50)
    nodes = _nodes("b b i:900 i:990")
    # nothing queued: every idle node goes off
    assert policy.decide(PowerSaveSnap(1000.0, nodes), {}).suspend == ["n2", "n3"]
    # the first job needs 3 nodes: 2 free now, the third when a running job ends at its limit
    far = PowerSaveSnap(1000.0, nodes, (PendingBrief(1, 3, 3600),), ((1100.0, 1), (5000.0, 1)))
    assert powersave.first_start(far) == 1100.0
    assert policy.decide(far, {}).suspend == ["n2", "n3"]
    near = PowerSaveSnap(1000.0, nodes, (PendingBrief(1, 3, 3600),), ((1040.0, 1),))
    assert policy.decide(near, {}).suspend == []
    # the scheduler's own estimate (backfill's expected start) wins over the rough one
    planned = PowerSaveSnap(1000.0, nodes, (PendingBrief(1, 3, 3600, expected_start=1030.0),), ((9000.0, 1),))
    assert policy.decide(planned, {}).suspend == []
    # a job that can start now (off nodes count as available) keeps the nodes on
    now = PowerSaveSnap(1000.0, _nodes("o i:900"), (PendingBrief(1, 2, 60),))
    assert powersave.first_start(now) == 1000.0 and policy.decide(now, {}).suspend == []


def test_inertial_state_machine_and_inertia() -> None:
    policy = Inertial(period=100, mu_threshold=500, inertia="double")
    nodes = _nodes("b b i:0 i:0 i:0 i:0 o o")
    quiet = PowerSaveSnap(0.0, nodes)
    # first call: no period has passed yet, only the estimate is kept
    first = policy.decide(quiet, {})
    assert first.suspend == first.resume == [] and first.memory["count"] == 1
    # period ends with MU = 0 and no previous MU: awakening decides, but there is no previous
    # switch, so nb = max(f(0), 1) = 1 node on
    second = policy.decide(PowerSaveSnap(100.0, nodes), first.memory)
    assert second.resume == ["n6"] and second.memory["state"] == AWAKENING and second.memory["switched"] == 1
    # MU did not rise: awakening -> sedating, no decision this time
    third = policy.decide(PowerSaveSnap(200.0, nodes), second.memory)
    assert third.suspend == third.resume == [] and third.memory["state"] == SEDATING
    # still quiet: sedating decides; the last call switched nothing (S_e empty), so the inertia
    # starts again from one node: nb = max(f(0), 1) = 1 idle node off, the longest idle first
    fourth = policy.decide(PowerSaveSnap(300.0, nodes), third.memory)
    assert fourth.suspend == ["n2"] and fourth.memory["switched"] == 1
    # load arrives: 4 jobs x 2 nodes x 1000 s over 6 usable nodes = 1333 s >= 500: awakening, decide now,
    # nb = min(max(f(1), 1), |off nodes|) = 2
    queue = tuple(PendingBrief(i, 2, 1000.0) for i in range(4))
    loaded = PowerSaveSnap(400.0, nodes, queue)
    fifth = policy.decide(loaded, fourth.memory)
    assert fifth.memory["state"] == AWAKENING and fifth.resume == ["n6", "n7"]
    with pytest.raises(ValueError):
        Inertial(inertia="triple")


def _leaf_power(off: int, busy: int, cap: float) -> tuple[capadmission.PowerSnap, tuple[PsNode, ...]]:
    """Seed 003's cluster: leaf0 always at MaxWatts, 256 virtual nodes 450/950 W, PowerSaveWatts=5."""
    nodes = {"leaf0": capadmission.NodePower(450, 950, 450, 950, always_max=True)}
    node_states = {"leaf0": PowerState.IDLE}
    ps = []
    for i in range(256):
        name = f"leaf{1000 + i}"
        nodes[name] = capadmission.NodePower(450, 950, 5, 950)
        state = PowerState.BUSY if i < busy else PowerState.OFF if i >= 256 - off else PowerState.IDLE
        node_states[name] = state
        ps.append(PsNode(name, state, 0.0))
    return capadmission.PowerSnap(nodes, node_states, cap), tuple(ps)


def test_reclaim_switches_off_just_enough_idle_nodes_for_the_blocked_job() -> None:
    snap, nodes = _leaf_power(off=0, busy=0, cap=121000)
    assert capadmission.summary(snap.nodes, snap.states) == {"min_watts": 2230, "current_watts": 116150,
                                                       "adjusted_max_watts": 244150, "max_watts": 244150}
    blocked = PendingBrief(2, 10, math.inf, reason=states.R_POWER)
    # 116150 + 10 x 500 = 121150: 150 W over; one node going from 450 W to 5 W gives 445 W back
    decision = Reclaim().decide(PowerSaveSnap(0.0, nodes, (blocked,), power=snap), {})
    assert decision.suspend == ["leaf1255"]
    # while it switches off, it counts as reclaimed: nothing more is switched
    switching_off = tuple(PsNode(n.name, PowerState.SWITCHING_OFF if n.name == "leaf1255" else n.state) for n in nodes)
    assert Reclaim().decide(PowerSaveSnap(0.0, switching_off, (blocked,), power=snap), {}).suspend == []
    # a job blocked by something else, or no cap at all: nothing
    other = PendingBrief(2, 10, math.inf, reason=states.R_RESOURCES)
    assert Reclaim().decide(PowerSaveSnap(0.0, nodes, (other,), power=snap), {}).suspend == []
    assert Reclaim().decide(PowerSaveSnap(0.0, nodes, (blocked,), power=None), {}).suspend == []
    # a cap no switching can meet leaves the nodes on
    low, _ = _leaf_power(off=0, busy=0, cap=5000)
    assert Reclaim().decide(PowerSaveSnap(0.0, nodes, (blocked,), power=low), {}).suspend == []


def test_the_seeds_example_2_figures_from_node_states() -> None:
    snap, _ = _leaf_power(off=107, busy=10, cap=121000)
    assert capadmission.summary(snap.nodes, snap.states) == {"min_watts": 2230, "current_watts": 73535,
                                                       "adjusted_max_watts": 143035, "max_watts": 244150}


def test_decide_merges_policies_and_applies_rates() -> None:
    nodes = _nodes("i:0 i:0 i:0 o o")

    class Wants:
        def __init__(self, off=(), on=()):
            self.off, self.on = list(off), list(on)

        def decide(self, snap, memory):
            return powersave.Decision(suspend=self.off, resume=self.on, memory={"seen": True})

    snap = PowerSaveSnap(0.0, nodes, suspended_last_min=1)
    off, on, memories = powersave.decide([("a", Wants(off=["n0", "n1"])), ("b", Wants(off=["n2"], on=["n1", "n3"]))],
                                         snap, {}, suspend_rate=2, resume_rate=0)
    assert off == ["n0"]  # n1 is wanted on by b; the rate leaves room for one more this minute
    assert on == ["n3"]  # n1 is not off: nothing to resume
    assert memories == {"a": {"seen": True}, "b": {"seen": True}}


def test_chassis_switching_states_and_watts() -> None:
    sw = switching.Switching(on_s=6.1, off_s=151.52, on_watts=125.174, off_watts=100.997)
    chassis = switching.Chassis()
    assert chassis.state(0.0, sw) == switching.ON
    off = switching.command(chassis, switching.OFF, 100.0, sw)
    assert off.state(200.0, sw) == switching.SWITCHING_OFF and off.state(251.52, sw) == switching.OFF
    assert switching.command(off, switching.OFF, 300.0, sw) is off  # repeating a command changes nothing
    on = switching.command(off, switching.ON, 400.0, sw)
    assert on.state(406.0, sw) == switching.SWITCHING_ON and on.state(406.1, sw) == switching.ON
    assert switching.parse_chassis(on.dumps()) == on and switching.parse_chassis("off\n").state(0, sw) == "off"
    assert switching.state_watts(switching.SWITCHING_ON, sw, 9.75) == 125.174
    assert switching.state_watts(switching.OFF, sw, 9.75) == 9.75
    assert switching.state_watts(switching.ON, sw, 9.75) is None


def test_saving_report_from_power_events() -> None:
    sw = switching.Switching(on_s=10, off_s=20, on_watts=120, off_watts=100)
    watts = {"n1": powerreport.NodeWatts(idle=95, save=10, switching=sw)}
    events = [(100.0, "n1", PowerFlag.POWERING_DOWN, ""), (130.0, "n1", PowerFlag.POWERED_DOWN, ""),
              (1000.0, "n1", PowerFlag.POWERING_UP, "job 7"), (1012.0, "n1", "POWERED_UP", "job 7")]
    report = powerreport.saving(events, watts, 0.0, 2000.0)
    # 20 s switching off at 100 W, 880 s off at 10 W, 12 s switching on at 120 W, against 95 W idle
    assert report.switches_off == report.switches_on == 1
    assert report.switching_s == pytest.approx(32) and report.off_s == pytest.approx(880)
    assert report.saved_j == pytest.approx(20 * (95 - 100) + 880 * (95 - 10) + 12 * (95 - 120))
    assert report.jobs_delayed == 1 and report.wait_added_s == pytest.approx(12)


def test_power_saving_config_keys_and_errors(tmp_path) -> None:
    good = tmp_path / "good.conf"
    good.write_text("SuspendTime=300\nSuspendTimeout=45\nResumeTimeout=120\nSuspendRate=10\nResumeRate=0\n"
                    "SuspendProgram=/usr/sbin/suspend\nResumeProgram=/usr/sbin/resume\nSuspendExcNodes=n[1-2]\n"
                    "SuspendExcParts=debug\nPowerSaveType=power_save/energy_aware,power_save/reclaim\n"
                    "PowerSaveParameters=threshold=50,period=300,inertia=double\n"
                    "NodeName=n[1-4] SwitchOnTime=6.1 SwitchOffTime=151.52 SwitchOnWatts=125 SwitchOffWatts=101\n"
                    "PartitionName=debug Nodes=n[1-4]\n")
    conf = load(good)
    assert conf.suspend_time_s == 300 and conf.suspend_exc_nodes == ("n1", "n2") and conf.power_saving
    assert conf.power_save_parameters == (("threshold", 50.0), ("period", 300.0), ("inertia", "double"))
    assert conf.nodes[0].switching == switching.Switching(6.1, 151.52, 125, 101)
    assert conf.suspend_rate == 10 and conf.resume_rate == 0
    none = tmp_path / "none.conf"
    none.write_text("SuspendTime=NONE\n")
    assert load(none).suspend_time_s is None and not load(none).power_saving
    for text, key in [("SuspendTime=soon\n", "SuspendTime"), ("PowerSaveType=idle\n", "PowerSaveType"),
                      ("PowerSaveParameters=speed=3\n", "PowerSaveParameters"),
                      ("SuspendExcNodes=zz9\nNodeName=n1\n", "SuspendExcNodes"),
                      ("SuspendExcParts=nope\nNodeName=n1\n", "SuspendExcParts"),
                      ("NodeName=n1 SwitchOnTime=-1\n", "SwitchOnTime")]:
        bad = tmp_path / "bad.conf"
        bad.write_text(text)
        with pytest.raises(ConfigError) as info:
            load(bad)
        assert info.value.key == key and info.value.line == 1 and str(bad) in str(info.value)

"""The energy policies' choices (wattsched.energypolicy) on the emulated node of etc/emulated.conf."""

from __future__ import annotations

import pytest

from wattsched import energypolicy, prediction
from wattsched.controller import jobs, launching
from wattsched.controller import nodes as nodes_mod
from wattsched.energypolicy import NodePower, Settings, Signature

# etc/emulated.conf's node: 95 W idle, 190 W busy at 2.4 GHz, 116 W at 1.2 GHz
NODE = NodePower(95.0, 190.0, ((2400000, 190), (2000000, 158), (1600000, 134), (1200000, 116)))
LADDER = [2400000, 2000000, 1600000, 1200000]
TOP = 2400000


def signature(memory_bound: float, khz: int = TOP) -> Signature:
    """A job alone on a busy node, with the memory-bound share ``memory_bound`` at the top frequency."""
    compute = (1 - memory_bound) * TOP / khz
    share = memory_bound / (memory_bound + compute)
    return Signature(khz=khz, memory_share=share, watts=NODE.busy(khz, TOP), busy=1.0)


def test_a_compute_bound_job_keeps_its_frequency_under_min_energy() -> None:
    decision = energypolicy.decide(Settings("min_energy", 0.10), signature(0.0), LADDER, TOP, NODE, TOP)
    # 2.0 GHz would save energy (158 W for 1.2x the time: 0.998) but costs 20 % time: over the bound
    assert decision.khz == TOP and decision.time_factor == 1.0 and decision.energy_factor == 1.0


def test_a_memory_bound_job_runs_at_the_lowest_energy_within_the_penalty() -> None:
    decision = energypolicy.decide(Settings("min_energy", 0.10), signature(0.85), LADDER, TOP, NODE, TOP)
    # 1.6 GHz: 0.15 * 1.5 + 0.85 = 1.075 the time at 134 W; 1.2 GHz would be 1.15 the time
    assert decision.khz == 1600000
    assert decision.time_factor == pytest.approx(1.075)
    assert decision.energy_factor == pytest.approx(1.075 * 134 / 190)
    looser = energypolicy.decide(Settings("min_energy", 0.20), signature(0.85), LADDER, TOP, NODE, TOP)
    assert looser.khz == 1200000 and looser.time_factor == pytest.approx(1.15)


def test_the_penalty_is_against_the_ceiling_whatever_frequency_the_signature_was_taken_at() -> None:
    """EAR's issue #5: a signature taken below the top must not make its own time the reference."""
    at_top = energypolicy.decide(Settings("min_energy", 0.10), signature(0.85), LADDER, TOP, NODE, TOP)
    lowered = energypolicy.decide(Settings("min_energy", 0.10), signature(0.85, 1600000), LADDER, TOP, NODE, TOP)
    assert lowered.khz == at_top.khz and lowered.time_factor == pytest.approx(at_top.time_factor)
    assert signature(0.85, 1600000).bound_at(TOP) == pytest.approx(0.85)


def test_a_lower_ceiling_bounds_the_policy() -> None:
    capped = energypolicy.decide(Settings("min_energy", 0.10), signature(0.0, 2000000), LADDER, 2000000, NODE, TOP)
    assert capped.khz == 2000000 and capped.time_factor == 1.0


def test_min_time_raises_the_frequency_only_where_it_pays() -> None:
    settings = Settings("min_time", 0.7)  # starts at the medium frequency: 1.6 GHz
    assert energypolicy.start_khz(settings, LADDER, TOP) == 1600000
    compute = energypolicy.decide(settings, signature(0.0, 1600000), LADDER, TOP, NODE, TOP)
    assert compute.khz == TOP  # each step gains time in proportion to the clock
    memory = energypolicy.decide(settings, signature(0.9, 1600000), LADDER, TOP, NODE, TOP)
    assert memory.khz == 1600000  # a 25 % faster clock would gain under 3 % of time
    assert memory.time_factor > 1 and memory.energy_factor < 1


def test_monitoring_only_projects() -> None:
    decision = energypolicy.decide(Settings("monitoring"), signature(0.5, 2000000), LADDER, TOP, NODE, TOP)
    assert decision.khz == 2000000 and decision.time_factor > 1


def test_a_phase_change_is_a_move_of_the_memory_bound_share_at_the_top() -> None:
    assert not energypolicy.phase_changed(0.5, signature(0.5, 1200000), TOP)
    assert energypolicy.phase_changed(0.1, signature(0.5), TOP)


def test_names_and_the_application_model_are_checked() -> None:
    assert energypolicy.check("MIN_Energy") == "min_energy"
    with pytest.raises(energypolicy.PolicyError):
        energypolicy.check("fastest")
    env = energypolicy.APP_ENV
    assert energypolicy.app_model({env: "0.25"}) == ((0.25, 0.0),)
    assert energypolicy.app_model({}) == ((0.0, 0.0),)
    phases = energypolicy.app_model({env: "0.9@20, 0.1@5,0.5"})
    assert phases == ((0.9, 20.0), (0.1, 5.0), (0.5, 0.0))
    assert [energypolicy.share_at(phases, t) for t in (0, 19.9, 20, 24.9, 25, 1e6)] == [0.9, 0.9, 0.1, 0.1, 0.5, 0.5]
    for bad in ("1.5", "-0.1", "nan", "half", "1e999", "0.5@10", "0.5,0.1", "0.5@0,0.1", "0.5@nan,0.1",
                ",".join(["0.1@1"] * 16 + ["0.2"]), "0.1@inf,0.2"):
        with pytest.raises(energypolicy.PolicyError):
            energypolicy.app_model({env: bad})


def test_a_prediction_is_the_mean_of_the_last_runs_of_the_same_job() -> None:
    key = prediction.job_key("alice", "sim", "#!/bin/sh\nrun\n", 2, 16)
    assert key != prediction.job_key("alice", "sim", "#!/bin/sh\nrun\n", 2, 32)  # another size
    assert key != prediction.job_key("bob", "sim", "#!/bin/sh\nrun\n", 2, 16)
    assert len(key) == 16 and key == prediction.job_key("alice", "sim", "#!/bin/sh\nrun\n", 2, 16)
    # newest first: only the last RUNS_KEPT count, and a run that did not last is no evidence
    rows = [(key, 100.0, 20000.0)] * prediction.RUNS_KEPT + [(key, 1000.0, 1.0), ("other", 0.0, 5.0)]
    found = prediction.from_history(rows)
    assert set(found) == {key}
    assert found[key] == prediction.Prediction(100.0, 20000.0, 200.0, prediction.RUNS_KEPT)
    mixed = prediction.from_history([(key, 100.0, 10000.0), (key, 300.0, 50000.0)])[key]
    assert mixed.elapsed_s == 200.0 and mixed.joules == 30000.0 and mixed.watts == 150.0  # the ratio of sums


def test_the_choice_a_job_end_carries_is_recorded(tmp_path) -> None:
    """A policy may decide just before its job ends, after the last heartbeat: the end carries the
    choice, and the controller records it before it ends the job (in process, on a real state)."""
    from wattsched import auth, config, states
    from wattsched.api import AgentHeartbeat, JobEvent, JobSubmit, JobUsage, NodeReport
    from wattsched.auth import Identity
    from wattsched.controller.startup import load_plugins, open_state
    from wattsched.controller.store import StateStore

    path = tmp_path / "c.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    "NodeName=a1 CPUs=1 RealMemory=1000\nPartitionName=p Nodes=a1 Default=YES MaxTime=INFINITE\n")
    conf = config.load(path)
    now = 1_800_000_000.0
    state = open_state(conf, StateStore(str(tmp_path / "ctld")), load_plugins(conf),
                       auth.ensure_key(str(tmp_path / "key")), now)
    nodes_mod.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=now, nodes=[
        NodeReport(name="a1", cpus=1, real_memory_mb=1000)]), now)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", energy_policy="min_energy"),
                      Identity(0, "root"), now)[0]
    launching.schedule(state, now)
    jobs.launched(state, job.job_id)
    assert job.state == states.RUNNING and job.energy.policy_freq_khz == 0
    chosen = JobUsage(job_id=job.job_id, policy_khz=1_600_000, time_factor=1.075, energy_factor=0.8)
    nodes_mod.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=now, nodes=[], events=[
        JobEvent(job_id=job.job_id, node="a1", end_time=now + 5, policy=chosen)]), now + 5)
    assert job.state != states.RUNNING
    energy = job.energy
    assert (energy.policy_freq_khz, energy.pred_time_factor, energy.pred_energy_factor) == (1_600_000, 1.075, 0.8)

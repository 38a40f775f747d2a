"""Meeting a lowered cap (wattsched.capshed), pure: the steps in order, the shedding order, what
counts as gone, and giving back."""

from __future__ import annotations

from wattsched import capshed
from wattsched.capadmission import NodePower, PowerSnap
from wattsched.limits import Qos
from wattsched.nodestates import PowerState
from wattsched.scheduling.records import PreemptSettings, RunningJob

TABLE = ((2_000_000, 300), (1_500_000, 220), (1_000_000, 160))
REQUEUE = PreemptSettings("preempt/none", "REQUEUE")


def _snap(cap: float, nodes: int = 3) -> PowerSnap:
    names = [f"n{i}" for i in range(nodes)]
    return PowerSnap({n: NodePower(100, 300, 100, 300, freq_watts=TABLE) for n in names},
                     dict.fromkeys(names, PowerState.BUSY), cap)


def _job(job_id: int, node: str, qos: str = "normal", **kw) -> RunningJob:
    return RunningJob(job_id, {node: 2}, {node: 0}, None, qos=qos, start=float(job_id), **kw)


QOS = {"normal": Qos("normal"), "gold": Qos("gold", priority=10)}


def test_slower_cpus_first_youngest_job_first_highest_frequency_that_covers() -> None:
    running = [_job(1, "n0"), _job(2, "n1"), _job(3, "n2")]
    sheds = capshed.shed(_snap(700), running, QOS, REQUEUE, ("cpufreq", "requeue"))
    # 200 W to shed: the youngest (3) gives 140 W at 1 GHz (1.5 GHz's 80 W do not cover), then 2 the
    # 60 W left at 1.5 GHz
    assert [(s.job_id, s.step, s.khz, s.watts) for s in sheds] == [(3, "cpufreq", 1_000_000, 140.0),
                                                                  (2, "cpufreq", 1_500_000, 80.0)]
    assert capshed.shed(_snap(900), running, QOS, REQUEUE, ("cpufreq",)) == []


def test_then_preemptable_jobs_go_lowest_qos_first() -> None:
    running = [_job(1, "n0", "gold"), _job(2, "n1"), _job(3, "n2", pinned=True)]
    sheds = capshed.shed(_snap(400), running, QOS, REQUEUE, ("cpufreq", "requeue"))
    steps = [(s.job_id, s.step) for s in sheds]
    # the pinned job keeps its frequency; the normal ones go before gold, youngest first
    assert ("3", "cpufreq") not in [(str(j), s) for j, s in steps]
    assert steps[:2] == [(2, "cpufreq"), (1, "cpufreq")]
    assert [j for j, s in steps if s == "requeue"] == [3, 2]
    model = capshed.Model(_snap(400), running)
    assert model.total == 900
    # a job that may not be preempted is never requeued
    off = PreemptSettings("preempt/none", "OFF")
    assert all(s.step == "cpufreq" for s in capshed.shed(_snap(400), running, QOS, off, ("cpufreq", "requeue")))


def test_jobs_on_their_way_out_or_frozen_count_as_gone_and_shared_nodes_follow_their_fastest_job() -> None:
    ending = [_job(1, "n0", ending=True), _job(2, "n1", suspended=True), _job(3, "n2")]
    assert capshed.Model(_snap(0), ending).total == 100 + 100 + 300
    shared = [RunningJob(1, {"n0": 1}, {}, None, start=1.0), RunningJob(2, {"n0": 1}, {}, None, start=2.0)]
    model = capshed.Model(_snap(0, nodes=1), shared)
    assert model.saving(shared[1], 1_000_000) == 0  # job 1 still runs the node at full speed
    model.change(shared[1], 1_000_000)
    assert model.saving(shared[0], 1_000_000) == 140


def test_what_was_taken_comes_back_when_it_fits() -> None:
    running = [_job(1, "n0", freq_khz=1_000_000), _job(2, "n1", suspended=True), _job(3, "n2")]
    # 160 + 100 + 300 = 560 now; the suspended job adds 200, the slowed one 140
    assert [(s.job_id, s.step) for s in capshed.restore(_snap(800), running, QOS, {1: None}, [2])] == \
        [(2, "resume")]
    assert [(s.job_id, s.step, s.khz) for s in capshed.restore(_snap(900), running, QOS, {1: None}, [2])] == \
        [(2, "resume", None), (1, "restore", None)]
    assert capshed.restore(_snap(600), running, QOS, {1: None}, [2]) == []

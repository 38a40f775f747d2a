"""The live controller and the simulator make the same decisions: a workload is simulated, then
replayed through the controller's own state machine (ClusterState, in process, on a virtual
clock: jobs submitted and ended at the simulated times), and at every pass the controller
starts exactly the jobs the simulator started, on the same nodes; power-saving decisions are
compared the same way. A disagreement is a bug in one of the two shells, never in policy code
they share."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from wattsched import auth, config, states
from wattsched.api import AgentHeartbeat, JobEvent, JobSubmit, NodeReport
from wattsched.auth import Identity
from wattsched.controller import jobend, launching
from wattsched.controller import jobs as jobs_mod
from wattsched.controller import nodes as nodes_mod
from wattsched.controller.startup import load_plugins, open_state
from wattsched.controller.store import StateStore
from wattsched.simulator import engine, workload
from wattsched.simulator.result import Result
from wattsched.simulator.workload import SimJob, Workload

ROOT = Identity(0, "root")
EPOCH = 1_800_000_000.0  # a real clock's time: the controller's first backfill pass is due from its start


def _config(tmp_path, extra: str = "", bf_interval: int = 1) -> config.Config:
    path = tmp_path / "agree.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    f"SchedulerType=sched/backfill\nSchedulerParameters=bf_interval={bf_interval}\n"
                    "SelectType=select/linear\n"
                    f"{extra}\nNodeName=a[01-12] CPUs=1 RealMemory=1000 IdleWatts=95 MaxWatts=191 PowerSaveWatts=10\n"
                    "PartitionName=p Nodes=a[01-12] Default=YES MaxTime=INFINITE\n")
    return config.load(path)


def _replay(conf: config.Config, jobs: Workload, result: Result, tmp_path) -> None:
    state = open_state(conf, StateStore(str(tmp_path / "ctld")), load_plugins(conf), auth.ensure_key(
        str(tmp_path / "key")), EPOCH)
    nodes_mod.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=EPOCH, nodes=[
        NodeReport(name=n.name, cpus=n.cpus, real_memory_mb=n.real_memory_mb) for n in conf.nodes]), EPOCH)
    records = {r.job.job_id: r for r in result.records}
    submits, ends, starts = defaultdict(list), defaultdict(list), defaultdict(set)
    for record in records.values():
        submits[record.job.submit].append(record)
        ends[record.end].append(record)
        starts[record.start].add(record.job.job_id)
    ids: dict[int, int] = {}  # simulated id -> controller id
    # the controller's loop passes at each change and when its backfill timer is due
    for now in sorted(set(submits) | set(ends) | set(result.pass_times)):
        for record in ends.get(now, []):
            job = state.jobs[ids[record.job.job_id]]
            ended = JobEvent(job_id=job.job_id, node=job.alloc.batch_host, exit_code=0, end_time=now)
            jobend.batch_ended(state, ended, now)
            for node in list(job.alloc.completing_nodes):
                jobend.node_clean(state, job.job_id, node)
        for record in sorted(submits.get(now, []), key=lambda r: r.job.job_id):
            job = jobs_mod.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", nodes_min=record.nodes,
                                                   ntasks=record.nodes, exclusive=True,
                                                   time_limit=str(math.ceil(record.job.walltime / 60))), ROOT, now)[0]
            ids[record.job.job_id] = job.job_id
        if now == result.last_end:
            break
        launching.schedule(state, now)
        started = {sim_id for sim_id, job_id in ids.items() if state.jobs[job_id].start_time == now
                   and state.jobs[job_id].state == states.RUNNING}
        assert started == starts.get(now, set()), f"at t={now}: controller {started}, simulator {starts.get(now)}"
        for sim_id in started:
            assert sorted(state.jobs[ids[sim_id]].alloc.alloc_cpus) == sorted(records[sim_id].alloc)


def test_hand_built_queue_same_decisions(tmp_path) -> None:
    conf = _config(tmp_path)
    jobs = Workload([SimJob(1, EPOCH, 600, 600, 9), SimJob(2, EPOCH + 10, 300, 600, 6),
                     SimJob(3, EPOCH + 20, 300, 300, 3), SimJob(4, EPOCH + 30, 1200, 1200, 3),
                     SimJob(5, EPOCH + 40, 60, 60, 12)])
    _replay(conf, jobs, engine.Simulation(conf, jobs).run(), tmp_path)


@pytest.mark.parametrize(("seed", "bf_interval"), [(1, 1), (2, 1), (3, 150)])
def test_generated_workload_same_decisions(tmp_path, seed, bf_interval) -> None:
    # bf_interval=150: strict passes between full backfill passes, in both
    conf = _config(tmp_path, bf_interval=bf_interval)
    generated = workload.synthetic_002(80, 12, 1, seed=seed)
    # minutes-long jobs on a minute grid, run times below limits, so that backfilling has work
    jobs = Workload([SimJob(j.job_id, EPOCH + round(j.submit / 600) * 60, float(60 * (1 + j.job_id % 5)),
                            float(60 * (2 + j.job_id % 7)), j.procs) for j in generated.jobs])
    # numbered in submission order, as the controller numbers them (priority/basic breaks ties by id)
    ordered = sorted(jobs.jobs, key=lambda j: (j.submit, j.job_id))
    jobs.jobs = [SimJob(i, j.submit, min(j.runtime, j.walltime), j.walltime, j.procs)
                 for i, j in enumerate(ordered, start=1)]
    _replay(conf, jobs, engine.Simulation(conf, jobs).run(), tmp_path)


def test_a_job_between_two_power_ticks_starts_its_nodes_idle_time_again(tmp_path) -> None:
    """The simulator starts a node's idle time when its job ends; the controller reads it at its power
    ticks, and a job that started and ended between two of them must still count (the seed's Example 2
    on leaf257 runs a one-second job, then expects power saving to spare its ten nodes)."""
    from wattsched.controller import powersavecontrol

    conf = _config(tmp_path, "SuspendTime=45\nSuspendProgram=/bin/true\nResumeProgram=/bin/true")
    state = open_state(conf, StateStore(str(tmp_path / "ctld")), load_plugins(conf), auth.ensure_key(
        str(tmp_path / "key")), EPOCH)
    nodes_mod.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=EPOCH, nodes=[
        NodeReport(name=n.name, cpus=n.cpus, real_memory_mb=n.real_memory_mb) for n in conf.nodes]), EPOCH)
    powersavecontrol.power_tick(state, EPOCH)
    assert {n.idle_since for n in state.nodes.values()} == {EPOCH}
    job = jobs_mod.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", nodes_min=2, ntasks=2, exclusive=True,
                                           time_limit="1"), ROOT, EPOCH + 1)[0]
    launching.schedule(state, EPOCH + 1)
    assert state.jobs[job.job_id].state == states.RUNNING
    jobend.batch_ended(state, JobEvent(job_id=job.job_id, node=job.alloc.batch_host, exit_code=0, end_time=EPOCH + 2),
                       EPOCH + 2)
    for node in list(job.alloc.completing_nodes):
        jobend.node_clean(state, job.job_id, node)
    powersavecontrol.power_tick(state, EPOCH + 3)
    ran = set(job.alloc.alloc_cpus)
    assert {state.nodes[n].idle_since for n in ran} == {EPOCH + 3}
    assert {n.idle_since for n in state.nodes.values() if n.name not in ran} == {EPOCH}
    # 45 s on, the idle timeout takes every node but the two that ran the job
    powersavecontrol.power_tick(state, EPOCH + 46)
    assert {n.name for n in state.nodes.values() if n.power} == {n.name for n in conf.nodes} - ran

"""What an agent knows of a job on one of its nodes (in process: the agent itself, emulated
nodes, real processes as the steps' tasks).

A step that reaches a node's agent before its job's allocation does (both are sent as the job
starts) waits for it and goes on the moment it arrives; a job unknown there is refused after
MessageTimeout, one that ended there at once. What the agent keeps of a job goes when the job
is over there: on a node that is not its batch host too (terminated by the controller, its
steps killed after KillWait), so that a long-lived agent does not keep a record per job it ever
ran."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from wattsched import config
from wattsched.api import JobAllocation
from wattsched.noded.agent import Agent, build


def _agent(tmp_path: Path, extra: str) -> Agent:
    path = tmp_path / "c.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    f"{extra}\nEmulatedNodes=yes\nAcctGatherEnergyType=acct_gather_energy/none\n"
                    "NodeName=a[1-2] CPUs=2 RealMemory=1000\nPartitionName=p Nodes=a[1-2] Default=YES\n")
    conf = config.load(path)
    return build(conf, list(conf.nodes), "http://127.0.0.1:1", b"k" * 32)


async def _until(done, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_terminated_jobs_steps_are_killed_and_forgotten_on_a_node_other_than_its_batch_host(
        tmp_path: Path) -> None:
    agent = _agent(tmp_path, "KillWait=1")
    task = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a step's task, in a group of its own

    async def scenario() -> None:
        agent.allocate(JobAllocation(job_id=5, uid=1000, user="alice", start_time=time.time(),
                                     nodes={"a1": 1, "a2": 1}))
        agent.jobs_here.step_groups("a2", 5).add(task.pid)
        agent.jobs_here.step_groups("a1", 6)  # a step of another job that has started no task yet
        agent.allocate(JobAllocation(job_id=6, uid=1000, user="alice", start_time=time.time(), nodes={"a1": 1}))
        assert agent.signal_job(5, ["a2"], signal.SIGTERM, False, True) == ["a2"]
        assert agent.signal_job(6, ["a1"], signal.SIGTERM, False, True) == ["a1"]
        await _until(lambda: task.poll() is not None, 10, "the step's task killed")
        assert ("a1", 6) not in agent.jobs_here.records  # nothing to kill: forgotten at once
        # its steps' groups are looked at again after KillWait, then their daemons' grace
        await _until(lambda: ("a2", 5) not in agent.jobs_here.records, 15, "the job's record on a2 gone")
        assert list(agent.jobs_here.records) == [("a1", 5)]  # where it still runs
        assert agent.job_pgids("a2", 5) == set()

    try:
        asyncio.run(scenario())
    finally:
        task.kill()
        task.wait()


def _waiting(agent: Agent) -> list[tuple[str, int]]:
    """The jobs steps wait for, by (node, job id)."""
    return [key for key, record in agent.jobs_here.records.items() if record.arrival is not None]


def test_a_step_goes_on_as_soon_as_its_jobs_allocation_arrives(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "MessageTimeout=2")

    async def scenario() -> None:
        waiting = asyncio.create_task(agent.runs_job("a1", 7))
        await asyncio.sleep(0)
        assert not waiting.done()
        agent.allocate(JobAllocation(job_id=7, uid=1000, user="alice", start_time=time.time(), nodes={"a1": 1}))
        for _ in range(3):  # woken by the arrival itself: a few turns of the loop, no polling period
            await asyncio.sleep(0)
        assert waiting.done() and waiting.result() is True
        assert _waiting(agent) == []

    asyncio.run(scenario())


def test_an_unknown_job_is_refused_after_message_timeout_an_ended_one_at_once(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "MessageTimeout=2")

    async def scenario() -> None:
        started = time.monotonic()
        assert await agent.runs_job("a1", 8) is False
        assert time.monotonic() - started >= 2 and agent.jobs_here.records == {}  # nothing of job 8 is kept
        agent.allocate(JobAllocation(job_id=9, uid=1000, user="alice", start_time=time.time(), nodes={"a1": 1}))
        agent.jobs_here.over("a1", 9)
        refused = asyncio.create_task(agent.runs_job("a1", 9))
        for _ in range(3):
            await asyncio.sleep(0)
        assert refused.done() and refused.result() is False and _waiting(agent) == []

    asyncio.run(scenario())

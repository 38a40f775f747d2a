"""A step that reaches a node's agent before its job's allocation does (both are sent as the job
starts) waits for it and goes on the moment it arrives; a job unknown there is refused after
MessageTimeout, one that ended there at once (in process: the agent itself, emulated nodes)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from wattsched import config
from wattsched.api import JobAllocation
from wattsched.noded.agent import Agent, build


def _agent(tmp_path: Path) -> Agent:
    path = tmp_path / "c.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    "MessageTimeout=2\nEmulatedNodes=yes\nAcctGatherEnergyType=acct_gather_energy/none\n"
                    "NodeName=a1 CPUs=2 RealMemory=1000\nPartitionName=p Nodes=a1 Default=YES\n")
    conf = config.load(path)
    return build(conf, list(conf.nodes), "http://127.0.0.1:1", b"k" * 32)


def _waiting(agent: Agent) -> list[tuple[str, int]]:
    """The jobs steps wait for, by (node, job id)."""
    return [key for key, record in agent.here.items() if record.arrival is not None]


def test_a_step_goes_on_as_soon_as_its_jobs_allocation_arrives(tmp_path: Path) -> None:
    agent = _agent(tmp_path)

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
    agent = _agent(tmp_path)

    async def scenario() -> None:
        started = time.monotonic()
        assert await agent.runs_job("a1", 8) is False
        assert time.monotonic() - started >= 2 and agent.here == {}  # nothing of job 8 is kept
        agent.allocate(JobAllocation(job_id=9, uid=1000, user="alice", start_time=time.time(), nodes={"a1": 1}))
        agent.ended[("a1", 9)] = None
        refused = asyncio.create_task(agent.runs_job("a1", 9))
        for _ in range(3):
            await asyncio.sleep(0)
        assert refused.done() and refused.result() is False and _waiting(agent) == []

    asyncio.run(scenario())

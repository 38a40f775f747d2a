"""The agent: the nodes it hosts, their energy meter, its outbox of job ends, and its heartbeat
to the controller (which carries each node's energy counter).

One agent process can host many virtual nodes (emulation) or just its own host. Each
batch script's end is written to the outbox folder before it is reported, and removed only
when the controller acknowledges it, so neither side's restart loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time

import httpx
from wattsched import auth, plugins
from wattsched.api import AgentHeartbeat, JobEvent, NodeReport
from wattsched.config import Config, NodeConf
from wattsched.noded import procs
from wattsched.noded.batch import BatchRunner
from wattsched.noded.energy import EnergyMeter

log = logging.getLogger("wattsched.noded")


class Agent:
    def __init__(self, config: Config, nodes: list[NodeConf], url: str, key: bytes):
        self.config, self.nodes, self.url, self.key = config, {n.name: n for n in nodes}, url, key
        self.boot_time = time.time()
        self.spool = config.slurmd_spool_dir
        self.outbox = os.path.join(self.spool, "outbox")
        os.makedirs(self.outbox, exist_ok=True)
        self.batch = BatchRunner(self.spool, config.kill_wait_s, self._job_ended)
        self.step_pgids: dict[tuple[str, int], set[int]] = {}
        self._kick = asyncio.Event()
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(config.message_timeout_s))
        self.heartbeat_s = max(0.5, min(30.0, config.slurmd_timeout_s / 4))
        self._token, self._token_time = "", 0.0
        self.connected = False
        self.energy = EnergyMeter(plugins.load(config.acct_gather_energy_type, config=config, nodes=nodes),
                                  {n.name: n.cpus for n in nodes}, self.spool, config.acct_gather_node_freq_s,
                                  self._job_pgids)

    def _job_pgids(self) -> dict[str, set[int]]:
        """Per node, the process groups of its jobs (batch scripts and step tasks)."""
        groups: dict[str, set[int]] = {name: set() for name in self.nodes}
        for job in list(self.batch.jobs.values()):
            groups.setdefault(job.node, set()).add(job.supervisor_pid)
        for (node, _job_id), pgids in list(self.step_pgids.items()):
            groups.setdefault(node, set()).update(pgids)
        return groups

    def _headers(self) -> dict[str, str]:
        now = time.time()
        if now - self._token_time > 600:
            self._token = auth.user_token(self.key, 0, "slurm", role="node")
            self._token_time = now
        return {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}

    # --- job ends ----------------------------------------------------------------------------

    def _job_ended(self, event: JobEvent) -> None:
        path = os.path.join(self.outbox, f"{event.node}.{event.job_id}.json")
        with open(path + ".tmp", "w") as handle:
            handle.write(event.model_dump_json())
        os.replace(path + ".tmp", path)
        for pgid in self.step_pgids.pop((event.node, event.job_id), set()):
            procs.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(RuntimeError):
            self._kick.set()

    def pending_events(self) -> list[JobEvent]:
        events = []
        for name in sorted(os.listdir(self.outbox)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError), open(os.path.join(self.outbox, name)) as handle:
                    events.append(JobEvent.model_validate(json.load(handle)))
        return events

    def _acknowledged(self, events: list[JobEvent], acked: list[int]) -> None:
        done = set(acked)
        for event in events:
            if event.job_id in done:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.outbox, f"{event.node}.{event.job_id}.json"))
                self.batch.forget(event.node, event.job_id)

    # --- signals ---------------------------------------------------------------------------------

    def signal_job(self, job_id: int, nodes: list[str], sig: int, batch_only: bool, terminate: bool) -> list[str]:
        """Signal or terminate a job on some of our nodes; returns the nodes now clean of it."""
        clean = []
        for node in nodes:
            if node not in self.nodes:
                continue
            pgids = self.step_pgids.get((node, job_id), set())
            on_node = job_id in self.batch.jobs and self.batch.jobs[job_id].node == node
            if terminate:
                for pgid in pgids:
                    procs.killpg(pgid, signal.SIGTERM)
                if pgids:
                    asyncio.get_running_loop().call_later(self.config.kill_wait_s, self._kill_steps, node, job_id)
                if not on_node or self.batch.terminate(job_id):
                    clean.append(node)
            else:
                if not batch_only:
                    for pgid in pgids:
                        procs.killpg(pgid, sig)
                if on_node:
                    self.batch.signal(job_id, sig, batch_only)
        return clean

    def _kill_steps(self, node: str, job_id: int) -> None:
        for pgid in self.step_pgids.get((node, job_id), set()):
            procs.killpg(pgid, signal.SIGKILL)

    # --- talking to the controller ----------------------------------------------------------------

    def report(self, with_events: bool = True, with_nodes: bool = True) -> AgentHeartbeat:
        energy = self.energy.samples() if with_nodes else {}
        nodes = [NodeReport(name=n.name, cpus=n.cpus, real_memory_mb=n.real_memory_mb,
                            running_jobs=self.batch.running_on(n.name), energy=energy.get(n.name))
                 for n in self.nodes.values()] if with_nodes else []
        return AgentHeartbeat(agent_url=self.url, boot_time=self.boot_time, nodes=nodes,
                              events=self.pending_events() if with_events else [])

    async def send(self, hb: AgentHeartbeat) -> None:
        try:
            reply = await self.client.post(f"{self.config.controller_url}/v1/agents/heartbeat",
                                           content=hb.model_dump_json(), headers=self._headers())
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            if self.connected:
                log.warning("controller unreachable", extra={"error": str(exc)})
            self.connected = False
            return
        self.connected = True
        body = reply.json()
        self._acknowledged(hb.events, body.get("acknowledged", []))
        for job_id in body.get("cancel", []):
            self.signal_job(job_id, [n.name for n in hb.nodes], signal.SIGKILL, False, True)

    async def run(self) -> None:
        """Heartbeats every few seconds; job ends as soon as they happen (in small batches)."""
        self.batch.recover(list(self.nodes))
        self.energy.start()
        last_beat = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=min(1.0, self.heartbeat_s))
            self._kick.clear()
            await asyncio.sleep(0.02)  # let job ends that finish together travel together
            await self.batch.poll_adopted()
            now = time.monotonic()
            full = now - last_beat >= self.heartbeat_s or not self.connected
            hb = self.report(with_nodes=full)
            if full or hb.events:
                await self.send(hb)
                if full and self.connected:
                    last_beat = now

    async def close(self) -> None:
        self.energy.stop()
        await self.client.aclose()

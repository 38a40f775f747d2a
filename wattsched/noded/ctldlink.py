"""The agent's link to the controllers: its outbox of job and step ends, its heartbeats, and
which controller's orders it obeys.

Each end of a batch script or of a step's tasks on a node is written to the outbox folder
(root's alone) before it is reported, and removed only when the controller acknowledges it, so
neither side's restart loses it. Heartbeats go every few seconds (a quarter of SlurmdTimeout, at
most AcctGatherNodeFreq apart when energy is metered), and at once when an end is written or a
reading asked for by job ends is done. They go to the controller that answered last, else to the
next one listed (SlurmctldHost, in order): a standby refuses them, and so does a controller that
lost its lease. Orders are obeyed only from a controller whose fencing token is not older than
the newest one heard of for the same state store (the older one may not know yet that it lost
its lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable

import httpx

from wattsched import auth
from wattsched.api import AgentHeartbeat, JobEvent, fencing
from wattsched.config import Config

log = logging.getLogger("wattsched.noded")

TOKEN_RENEWAL_S = 600.0  # a node's token is signed again this often (the controller accepts it longer)


class Outbox:
    """Ends not yet acknowledged, one file each, written whole before they are reported."""

    def __init__(self, spool: str):
        self.path = os.path.join(spool, "outbox")
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        os.chmod(self.path, 0o700)

    def _file(self, event: JobEvent) -> str:
        return os.path.join(self.path, f"{event.node}.{event.job_id}.{event.run}.{event.step_id}.json")

    def write(self, event: JobEvent) -> None:
        path = self._file(event)
        with open(path + ".tmp", "w") as handle:
            handle.write(event.model_dump_json())
        os.replace(path + ".tmp", path)

    def pending(self) -> list[JobEvent]:
        events = []
        for name in sorted(os.listdir(self.path)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError), open(os.path.join(self.path, name)) as handle:
                    events.append(JobEvent.model_validate(json.load(handle)))
        return events

    def remove(self, event: JobEvent) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(event))


class ControllerLink:
    """Heartbeats to the active controller and the lease its orders are obeyed under."""

    def __init__(self, config: Config, key: bytes, outbox: Outbox):
        self.urls = config.controller_urls
        self.key = key
        self.outbox = outbox
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(config.message_timeout_s))
        self.heartbeat_s = max(0.5, min(30.0, config.slurmd_timeout_s / 4))
        if config.acct_gather_energy_type != "acct_gather_energy/none":
            # node energy reaches the controller every AcctGatherNodeFreq, as in Slurm (sstat reads it)
            self.heartbeat_s = max(0.5, min(self.heartbeat_s, config.acct_gather_node_freq_s))
        self._token, self._token_time = "", 0.0
        self._kick = asyncio.Event()
        self._fresh_energy = False  # a reading taken for ended jobs awaits the next heartbeat
        self.connected = False
        self.controller = 0  # which of the controllers (SlurmctldHost, in order) heartbeats go to
        self.lease: tuple[str, int] = ("", 0)  # the newest controller lease heard of: (store, epoch)

    def headers(self) -> dict[str, str]:
        now = time.time()
        if now - self._token_time > TOKEN_RENEWAL_S:
            self._token = auth.user_token(self.key, 0, "slurm", role="node")
            self._token_time = now
        return {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}

    def report(self, event: JobEvent) -> None:
        """An end, kept in the outbox until acknowledged; the next heartbeat goes at once."""
        self.outbox.write(event)
        with contextlib.suppress(RuntimeError):  # (no running loop: the next heartbeat carries it)
            self._kick.set()

    def energy_read(self) -> None:
        """A reading asked for by job ends is done: it goes to the controller now."""
        self._fresh_energy = True
        self._kick.set()

    def follow(self, token: str) -> bool:
        """Whether orders of a controller with this fencing token are obeyed: not once a controller
        of a newer epoch of the same state store has been heard from. A token of another store (the
        state started afresh) is followed."""
        lease = fencing(token)
        if lease is None or (lease[0] == self.lease[0] and lease[1] < self.lease[1]):
            return False
        self.lease = lease
        return True

    async def send(self, hb: AgentHeartbeat) -> dict | None:
        """The heartbeat to the active controller; its reply, or None when none took it (the next
        controller is tried on the next heartbeat, at most a second away)."""
        url = self.urls[self.controller % len(self.urls)]
        try:
            reply = await self.client.post(f"{url}/v1/agents/heartbeat", content=hb.model_dump_json(),
                                           headers=self.headers())
            reply.raise_for_status()
            body = reply.json()
            if not self.follow(str(body.get("lease", ""))):
                raise httpx.HTTPError(f"controller at lease {str(body.get('lease'))[:60]} replaced by one at "
                                      f"{self.lease}")
        except httpx.HTTPError as exc:
            if self.connected:
                log.warning("controller unreachable", extra={"url": url, "error": str(exc)})
            self.connected = False
            self.controller += 1
            return None
        self.connected = True
        return body

    async def beat(self, before: Callable[[], Awaitable[None]], report: Callable[[bool], AgentHeartbeat],
                   obey: Callable[[AgentHeartbeat, dict], None]) -> None:
        """Heartbeats every few seconds, and ends as soon as they happen (in small batches): each
        turn awaits ``before``, sends ``report(full)`` (``full``: with the nodes' readings, else
        only its ends) and hands the reply to ``obey``."""
        last_beat = 0.0
        self._kick.set()  # the first heartbeat (the nodes' registration) goes at once, not a second later
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=min(1.0, self.heartbeat_s))
            self._kick.clear()
            await asyncio.sleep(0.02)  # let job ends that finish together travel together
            try:
                await before()
                now = time.monotonic()
                full = now - last_beat >= self.heartbeat_s or not self.connected or self._fresh_energy
                self._fresh_energy = False
                hb = report(full)
                if full or hb.events:
                    body = await self.send(hb)
                    if body is not None:
                        obey(hb, body)
                        if full:
                            last_beat = now
            except Exception:  # one bad report must not end the heartbeats for good
                log.exception("heartbeat failed")

    async def close(self) -> None:
        await self.client.aclose()

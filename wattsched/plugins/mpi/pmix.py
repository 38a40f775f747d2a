"""mpi/pmix (and Slurm's versioned name pmix_v4): OpenPMIx's server for a step's tasks on a node,
so that Open MPI and other PMIx programs start directly under srun.

The server library runs in a step daemon of its own, as the job's user and under the node's name
(wattsched.noded.pmixhost, which says why there and how clients are checked). This side starts it
before the tasks, gives each task the environment the library made for it, and relays:

* a fence: the node's contribution (the library's packed data, base64) goes up the task stream to
  srun as ``blobs``; srun hands every node's back to every node, which passes them on, joined, to
  its library (one node: at once);
* an abort (``PMIx_Abort``) or a rank that connected and ended without finalizing: the step ends on
  every node, as with mpi/pmi2.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
from typing import Any

from wattsched.plugins.mpi import MpiError, StepInfo, process_mapping

log = logging.getLogger("wattsched.noded")

START_TIMEOUT_S = 60.0  # the library's start and the step's registration, on a loaded node
LINE_MAX = 64 << 20  # a line from the server: a fence's contribution, bounded as srun's relay is


class PmixServer:
    """One step's PMIx server on one node (see the module)."""

    def __init__(self, info: StepInfo) -> None:
        self.info = info
        self.loop = asyncio.get_running_loop()
        self.single_node = len(info.layout) == 1
        self.ranks = info.layout[info.node]
        self.envs: dict[int, dict[str, str]] = {}
        self.ready: asyncio.Future[None] = self.loop.create_future()
        self.proc: Any = None
        self.inbox = b""
        self.aborted = False

    async def start(self) -> None:
        if self.info.spawn is None:
            raise MpiError("mpi/pmix: this agent cannot start a PMIx server")
        # Slurm's name, and a part no other user can guess: with PMIx 4.2.2, a connection refused in a
        # rank's name leaves that rank unable to connect after it, so none may get as far as naming one
        nspace = f"slurm.pmix.{self.info.job_id}.{self.info.step_id}.{self.info.secret}".rstrip(".")
        spec = {"nspace": nspace, "job_id": self.info.job_id,
                "step_id": self.info.step_id, "node": self.info.node, "layout": self.info.layout,
                "anl_map": process_mapping(self.info.layout)}
        try:
            self.proc = self.info.spawn("pmix", spec)
        except OSError as exc:
            raise MpiError(f"mpi/pmix: cannot start the PMIx server: {exc}") from exc
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.loop.add_reader(self.proc.stdout.fileno(), self._readable)
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), START_TIMEOUT_S)
        except TimeoutError:
            self.close()
            raise MpiError(f"mpi/pmix: the PMIx server did not start within {START_TIMEOUT_S:.0f} s") from None
        except MpiError:
            self.close()
            raise

    def task_setup(self, local_id: int) -> tuple[dict[str, str], int | None]:
        return dict(self.envs.get(local_id, {})), None

    def task_started(self, local_id: int) -> None:
        """Nothing to close: the tasks reach the server by the address in their environment."""

    def task_ended(self, local_id: int) -> None:
        self._tell({"ended": self.ranks[local_id]})

    def deliver(self, message: dict[str, Any]) -> None:
        if message.get("pmi") != "fence":
            return
        blobs = message.get("blobs") or {}
        joined = b"".join(base64.b64decode(blobs.get(node, "")) for node in self.info.layout)
        self._tell({"fence": int(message.get("seq", 0)), "data": base64.b64encode(joined).decode()})

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.proc.stdout.fileno())
        self.proc.end(START_TIMEOUT_S)  # end of input: it finalizes and ends, or is ended after that

    # the server's side

    def _tell(self, message: dict[str, Any]) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):  # ended: its end is seen on its output
            pass

    def _readable(self) -> None:
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.loop.remove_reader(self.proc.stdout.fileno())
            self._failed("the PMIx server ended")
            return
        self.inbox += chunk
        if len(self.inbox) > LINE_MAX and b"\n" not in self.inbox:
            self._failed(f"the PMIx server sent a line of more than {LINE_MAX} bytes")
            return
        *lines, self.inbox = self.inbox.split(b"\n")
        for line in lines:
            try:
                self._handle(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("mpi/pmix: bad line from the PMIx server", extra={"error": str(exc)})

    def _handle(self, message: dict[str, Any]) -> None:
        if "env" in message:
            self.envs = {int(k): {str(n): str(v) for n, v in env.items()} for k, env in message["env"].items()}
            if not self.ready.done():
                self.ready.set_result(None)
        elif "error" in message:
            self._failed(str(message["error"]))
        elif "fence" in message:
            seq = int(message["fence"])
            if self.single_node:
                self._tell({"fence": seq, "data": message["data"]})
            else:
                self.info.send({"pmi": "fence", "seq": seq, "blobs": {self.info.node: message["data"]}})
        elif "abort" in message:
            self._abort(f"task {message.get('rank', '?')} called PMIx_Abort with status {message['abort']}"
                        + (f": {message['msg']}" if message.get("msg") else ""))
        elif "lost" in message:
            self._abort(f"task {message['lost']} ended without finalizing PMIx")

    def _failed(self, why: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(MpiError(f"mpi/pmix: {why}"))
        elif not self.aborted:
            self._abort(why)

    def _abort(self, reason: str) -> None:
        """End the step on this node, and through srun on the others (as mpi/pmi2 does)."""
        if self.aborted:
            return
        self.aborted = True
        log.info("mpi/pmix: step aborted", extra={"node": self.info.node, "reason": reason})
        if not self.single_node:
            self.info.send({"pmi": "abort", "reason": reason})
        self.info.abort(reason)

"""sbcast's door on the agent (``POST /v1/bcast``): a file for a running job's nodes, written by the
job's user.

The request body is one line of :class:`wattsched.api.BcastFile` (the job, its nodes here, the
controller's credential, the destination and the source's modes), then the file's bytes. The line
is read within a bound; the credential must be the controller's for this job, name these nodes and
be brought by the job's user (or root), and the job must run on each node. Then a step daemon in
``bcast`` mode becomes the user and writes what follows (wattsched.noded.bcast): root opens no path
the user named. The bytes go through as they arrive, never held whole.

Virtual nodes of one agent share its file system: the file is written once for all of them (and,
as the agents of an emulated cluster share the host's, one that finds it written by another with the
same bytes counts it as delivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from wattsched import auth
from wattsched.api import BcastFile
from wattsched.noded import procs

if TYPE_CHECKING:
    from wattsched.noded.agent import Agent

HEAD_MAX = 2 << 20  # the first line: a credential naming up to COUNT_MAX nodes, and a path


async def first_line(chunks: AsyncIterator[bytes]) -> tuple[bytes, bytes]:
    """The body's first line and what came after it in the same chunks; 400 past HEAD_MAX."""
    head = b""
    async for chunk in chunks:
        head += chunk
        line, newline, rest = head.partition(b"\n")
        if newline:
            return line, rest
        if len(head) > HEAD_MAX:
            break
    raise HTTPException(400, "sbcast: the request's first line (its description of the file) is missing or "
                             f"longer than {HEAD_MAX} bytes")


def check(agent: Agent, req: BcastFile, who: auth.Identity) -> dict[str, Any]:
    """The sbcast credential, checked as a step's is: the controller's, for this job and these nodes,
    and the caller the job's user or root; 403 otherwise."""
    try:
        cred = auth.verify(agent.key, req.credential)
    except auth.AuthError as exc:
        raise HTTPException(403, f"Invalid sbcast credential: {exc}") from exc
    granted = cred.get("bcast")
    if cred.get("job") != req.job_id or not isinstance(granted, list):
        raise HTTPException(403, "Invalid sbcast credential: wrong job")
    if who.uid != cred.get("uid") and who.uid != 0:
        raise HTTPException(403, "Access/permission denied")
    strays = [n for n in req.nodes if n not in granted or n not in agent.nodes]
    if strays:
        raise HTTPException(403, f"Invalid sbcast credential: not for {','.join(strays[:8])} here")
    return cred


def _write(pipe: Any, data: bytes) -> bool:
    """Whether the writer took ``data`` (it ended otherwise: its standard error says why)."""
    try:
        pipe.write(data)
        pipe.flush()
    except OSError:
        return False
    return True


async def receive(agent: Agent, chunks: AsyncIterator[bytes], who: auth.Identity) -> dict[str, Any]:
    """Check the request, then have the job's user write the file; ``error`` is empty when it was."""
    line, rest = await first_line(chunks)
    try:
        req = BcastFile.model_validate_json(line)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from exc
    cred = check(agent, req, who)
    for node in req.nodes:
        if not await agent.runs_job(node, req.job_id):
            raise HTTPException(403, f"Invalid sbcast credential: job {req.job_id} does not run on {node}")
    uid = int(cred["uid"])
    gid = procs.gid_of(uid)
    spec = {"uid": uid, "gid": gid, "groups": procs.user_groups(auth.username(uid), gid),
            "dest": req.dest, "size": req.size, "mode": req.mode, "times": req.times, "force": req.force,
            "compress": req.compress, "shared": agent.virtual.enabled}
    loop = asyncio.get_running_loop()
    proc = procs.spawn_stepd("bcast", spec, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    reaped = procs.reap(proc, loop)
    assert proc.stdin is not None and proc.stderr is not None
    writing = True
    try:
        if rest:
            writing = await loop.run_in_executor(None, _write, proc.stdin, rest)
        async for chunk in chunks:  # as they come: a pipe's worth waits at most
            if writing:
                writing = await loop.run_in_executor(None, _write, proc.stdin, chunk)
            # else read to the end, unwritten: sbcast is still sending, and then hears why
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    result = await asyncio.shield(reaped)
    why = (await loop.run_in_executor(None, proc.stderr.read, 4096)).decode(errors="replace").strip()
    proc.stderr.close()
    if result.exit_code or result.term_signal:
        return {"nodes": req.nodes, "error": why or f"the writer ended with {result.exit_code}:{result.term_signal}"}
    return {"nodes": req.nodes, "error": ""}

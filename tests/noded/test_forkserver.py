"""The step daemons' fork server (wattsched.noded.forkserver), driven as the agent drives it: the
pid it answers with already names a process group, so that a signal the agent sends a task's group
at once (srun -K's end of a step, scancel) reaches it; before, it could come before the daemon's
setsid and be lost, and the task ran on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

from wattsched.noded import procs


async def _spawn_and_signal_at_once() -> list[procs.Exit]:
    loop = asyncio.get_running_loop()
    spec = {"uid": os.getuid(), "gid": os.getgid(), "groups": [os.getgid()], "argv": ["sleep", "60"],
            "env": dict(procs.STEPD_ENV), "work_dir": "/"}
    ends = []
    for _ in range(20):
        daemon = procs.spawn_stepd("exec", spec, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        reaped = procs.reap(daemon, loop)
        assert os.getpgid(daemon.pid) == daemon.pid == os.getsid(daemon.pid)
        assert procs.killpg(daemon.pid, signal.SIGTERM)
        ends.append(await asyncio.wait_for(reaped, 30))
    return ends


def test_a_daemon_leads_its_session_once_its_pid_is_known() -> None:
    ends = asyncio.run(_spawn_and_signal_at_once())
    assert ends == [procs.Exit(0, signal.SIGTERM)] * 20

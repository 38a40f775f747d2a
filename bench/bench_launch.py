"""The cost of one launch on a node: a step daemon forked by the agent's fork server, against the
design it replaced, an interpreter started per job (``python -I -S``, importing the same daemon code).

Each launch runs the task ``true`` as root in exec mode and waits for its end report, one at a time,
so the figure is the launch path alone (no controller, no HTTP). Wall time per launch, and CPU time
per launch of everything involved (this process, the server and the daemons it reaped, or the
interpreters this process reaped). Run as root on an otherwise idle machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import report

from wattsched.noded import procs, stepd

SPEC = {"uid": 0, "gid": 0, "groups": [0], "umask": 0o022, "work_dir": "/", "argv": ["true"],
        "env": {"PATH": "/usr/bin:/bin"}}
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    """A process's CPU seconds, its reaped children's included (fields 14-17 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def _own_cpu(children: bool) -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def forked(count: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()

    async def once() -> None:
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        daemon = procs.spawn_stepd("exec", SPEC, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, status_fd=status_w)
        os.close(status_w)
        result = await procs.reap(daemon, loop, status_r)
        assert result.exit_code == 0, result

    await once()  # the server started, not counted
    server = procs._SERVER._proc.pid  # type: ignore[union-attr]
    cpu, started = _own_cpu(False) + _cpu_of(server), time.perf_counter()
    for _ in range(count):
        await once()
    wall = time.perf_counter() - started
    return wall / count, (_own_cpu(False) + _cpu_of(server) - cpu) / count


def interpreter_per_launch(count: int) -> tuple[float, float]:
    main = (f"import sys; sys.path.insert(0, {os.path.dirname(stepd.__file__)!r}); import stepd; "
            "sys.exit(stepd.run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))")
    cpu, started = _own_cpu(False) + _own_cpu(True), time.perf_counter()
    for _ in range(count):
        fd = os.memfd_create("spec")
        os.write(fd, json.dumps(SPEC).encode())
        status_r, status_w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", main, "exec", str(fd), str(status_w)],
                                env=procs.STEPD_ENV, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, pass_fds=(fd, status_w))
        os.close(fd)
        os.close(status_w)
        assert proc.wait() == 0
        assert json.loads(os.read(status_r, 65536))["exit_code"] == 0
        os.close(status_r)
    wall = time.perf_counter() - started
    return wall / count, (_own_cpu(False) + _own_cpu(True) - cpu) / count


def main(count: int = 300) -> None:
    if os.geteuid() != 0:
        sys.exit("bench_launch: run as root (the daemons change identity)")
    before_wall, before_cpu = interpreter_per_launch(count)
    after_wall, after_cpu = asyncio.run(forked(count))
    report("one launch on a node (exec mode, task 'true', root)",
           f"{count} launches one after another, each waited for",
           {"interpreter_per_launch_wall_ms": f"{before_wall * 1000:.1f}",
            "interpreter_per_launch_cpu_ms": f"{before_cpu * 1000:.1f}",
            "fork_server_wall_ms": f"{after_wall * 1000:.1f}",
            "fork_server_cpu_ms": f"{after_cpu * 1000:.1f}",
            "speed_up_wall": f"{before_wall / after_wall:.1f}x"})


if __name__ == "__main__":
    main()

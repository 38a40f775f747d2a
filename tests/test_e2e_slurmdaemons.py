"""The daemons under Slurm's names, started as an administrator (or Slurm's own test suite) starts
Slurm's: ``slurmctld`` and ``slurmd -N NODE`` go to the background with their pid files and log
files; a restart keeps the queue, ``slurmctld -c -i`` starts without it; -V, -h, a bad option and
``slurmd -C`` answer as Slurm's do."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.testing import BIN, Cluster, free_port, wait_for

pytestmark = pytest.mark.e2e


def _daemon(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    """A Slurm-named daemon started as a shell starts it: it returns once in the background."""
    return subprocess.run([str(BIN / args[0]), *args[1:]], env=cluster.env, capture_output=True, text=True,
                          timeout=60, check=False)


def _pid(path: Path) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip(), 30, what=f"{path.name} written")
    return int(path.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not _alive(pid), 30, what=f"daemon {pid} stopped")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    run = tmp_path / "run"
    run.mkdir()
    extra = (f"SlurmdPort={free_port()}\nSlurmctldPidFile={run}/slurmctld.pid\nSlurmdPidFile={run}/slurmd.%n.pid\n"
             f"SlurmctldLogFile={run}/slurmctld.log\nSlurmdLogFile={run}/slurmd.%n.log")
    made = Cluster(tmp_path / "c", nodes=1, extra=extra, node_extra="NodeAddr=127.0.0.1")
    made.run_dir = run  # type: ignore[attr-defined]
    yield made
    for name in ("slurmd.n01.pid", "slurmctld.pid"):
        with_pid = run / name
        if with_pid.exists() and _alive(pid := int(with_pid.read_text())):
            os.kill(pid, signal.SIGKILL)
    made.stop()


def test_slurmctld_and_slurmd_start_as_slurms_do_and_c_forgets_the_queue(cluster: Cluster) -> None:
    run: Path = cluster.run_dir  # type: ignore[attr-defined]
    started = _daemon(cluster, "slurmctld")
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    controller = _pid(run / "slurmctld.pid")
    wait_for(cluster._ping, 30, what="slurmctld answering")
    assert _daemon(cluster, "slurmd", "-N", "n01").returncode == 0
    agent = _pid(run / "slurmd.n01.pid")
    cluster.wait_nodes_up()
    assert os.getsid(0) not in (os.getsid(controller), os.getsid(agent))  # sessions of their own
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
    cluster.wait_state(job, "RUNNING")
    _stop(controller)  # a restart recovers the queue
    assert _daemon(cluster, "slurmctld").returncode == 0
    wait_for(lambda: _alive(_pid(run / "slurmctld.pid")) and cluster._ping(), 30, what="restarted")
    assert cluster.job(job)["state"] == "RUNNING"
    _stop(_pid(run / "slurmctld.pid"))
    (run / "slurmctld.pid").unlink()
    assert _daemon(cluster, "slurmctld", "-c", "-i").returncode == 0
    wait_for(lambda: _alive(_pid(run / "slurmctld.pid")) and cluster._ping(), 30, what="started clean")
    assert cluster.jobs() == []
    wait_for(lambda: not any("sleep 300" in p.read_bytes().decode(errors="replace").replace("\0", " ")
                             for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()), 30,
             what="the forgotten job's processes ended by its node")
    after = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    assert after > job  # no id of the forgotten queue is given again
    cluster.wait_state(after, "COMPLETED")
    assert "started without the saved state (-c)" in (run / "slurmctld.log").read_text()
    assert (run / "slurmd.n01.log").exists()


def test_the_daemons_answer_v_h_and_bad_options_as_slurms(cluster: Cluster) -> None:
    for daemon in ("slurmctld", "slurmd"):
        version = _daemon(cluster, daemon, "-V")
        assert (version.returncode, version.stdout) == (0, "slurm 23.11.4\n")
        usage = _daemon(cluster, daemon, "-h")
        assert usage.returncode == 0 and usage.stdout == "" and usage.stderr.startswith(f"Usage: {daemon} [OPTIONS]\n")
        bad = _daemon(cluster, daemon, "-x")
        assert (bad.returncode, bad.stderr) == (1, usage.stderr)
    missing = _daemon(cluster, "slurmctld", "-f", "/nonexistent/slurm.conf")
    assert missing.returncode == 1 and missing.stderr.startswith("slurmctld: fatal: ")
    line = _daemon(cluster, "slurmd", "-C").stdout
    assert re.fullmatch(r"NodeName=\S+ CPUs=\d+ Boards=1 SocketsPerBoard=\d+ CoresPerSocket=\d+ ThreadsPerCore=\d+ "
                        r"RealMemory=\d+\nUpTime=\d+-\d\d:\d\d:\d\d\n", line), line
    assert f"CPUs={os.cpu_count()} " in line

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

from wattsched.harness.testing import BIN, Cluster, free_port, wait_for

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
    # a duration no other cluster's job on this host has: the check below looks at every process
    marker = f"sleep 300.{cluster.port}"
    job = cluster.sbatch("-o", "/dev/null", "--wrap", marker)
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
    wait_for(lambda: not any(marker in p.read_bytes().decode(errors="replace").replace("\0", " ")
                             for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()), 30,
             what="the forgotten job's processes ended by its node")
    after = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    assert after > job  # no id of the forgotten queue is given again
    cluster.wait_state(after, "COMPLETED")
    assert "started without the saved state (-c)" in (run / "slurmctld.log").read_text()
    assert (run / "slurmd.n01.log").exists()


def test_a_daemon_started_again_replaces_the_first_and_scontrol_shutdown_stops_them(cluster: Cluster) -> None:
    """As Slurm's: a slurmctld (or slurmd) started while its like runs sends it SIGTERM and waits
    for it to go (its pid file stays locked while it lives) before serving; a user may not shut the
    cluster down; ``scontrol shutdown slurmctld`` stops the controller alone, ``scontrol shutdown``
    the slurmds first."""
    run: Path = cluster.run_dir  # type: ignore[attr-defined]
    assert _daemon(cluster, "slurmctld").returncode == 0
    first = _pid(run / "slurmctld.pid")
    wait_for(cluster._ping, 30, what="slurmctld answering")
    assert _daemon(cluster, "slurmctld", "-c").returncode == 0  # returns at once, as before
    wait_for(lambda: not _alive(first), 30, what="the first slurmctld stopped by the second")
    wait_for(lambda: _pid(run / "slurmctld.pid") != first and cluster._ping(), 30, what="the second serving")
    controller = _pid(run / "slurmctld.pid")
    assert _daemon(cluster, "slurmd", "-N", "n01").returncode == 0
    agent = _pid(run / "slurmd.n01.pid")
    assert _daemon(cluster, "slurmd", "-N", "n01").returncode == 0
    wait_for(lambda: not _alive(agent), 30, what="the first slurmd stopped by the second")
    wait_for(lambda: _pid(run / "slurmd.n01.pid") != agent, 30, what="the second slurmd's pid")
    agent = _pid(run / "slurmd.n01.pid")
    cluster.wait_nodes_up()
    assert "NodeAddr=127.0.0.1 NodeHostName=n01\n" in cluster.run("scontrol", "show", "node", "n01").stdout
    refused = cluster.run("scontrol", "shutdown", check=False, env=cluster.user_env())
    assert (refused.returncode, refused.stderr) == (1, "slurm_shutdown error: Invalid user id\n")
    for bad, said in ((["nodes"], "invalid shutdown argument:nodes"),
                      (["slurmctld", "now"], "too many arguments for keyword:shutdown")):
        wrong = cluster.run("scontrol", "shutdown", *bad, check=False)
        assert (wrong.returncode, wrong.stderr) == (1, said + "\n")
    assert _alive(controller) and _alive(agent)
    assert cluster.run("scontrol", "shutdown", "slurmctld").stdout == ""
    wait_for(lambda: not _alive(controller), 30, what="slurmctld shut down")
    assert _alive(agent)  # the slurmds stay
    assert _daemon(cluster, "slurmctld").returncode == 0
    wait_for(lambda: _alive(_pid(run / "slurmctld.pid")) and cluster._ping(), 30, what="started again")
    controller = _pid(run / "slurmctld.pid")
    cluster.wait_nodes_up()
    assert cluster.run("scontrol", "shutdown").returncode == 0
    wait_for(lambda: not _alive(controller) and not _alive(agent), 30, what="slurmctld and slurmd shut down")
    gone = cluster.run("scontrol", "ping", check=False)
    assert "DOWN" in gone.stdout


def test_root_manages_the_accounts_before_any_controller_runs(cluster: Cluster) -> None:
    """Slurm's sacctmgr needs only the accounting database: root adds and lists accounts before the
    first slurmctld starts, and the controller, once started, has them (a user is not let in: the
    hostile suite's)."""
    added = cluster.run("sacctmgr", "-i", "add", "account", "physics")
    assert "physics" in added.stdout
    assert cluster.run("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").stdout.split() == [cluster.name]
    assert cluster.run("sacctmgr", "shutdown").returncode == 0  # no slurmdbd to stop
    assert _daemon(cluster, "slurmctld").returncode == 0
    wait_for(cluster._ping, 30, what="slurmctld answering")
    listed = cluster.run("sacctmgr", "-n", "-P", "show", "account", "format=account").stdout.split()
    assert listed == ["physics", "root"]


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


def test_slurmrestd_serves_slurms_rest_api_where_it_is_told(tmp_path: Path) -> None:
    """slurmrestd HOST:PORT unix:PATH -u USER: the controller's REST API on both, with the caller's
    token; as root it refuses to run, as Slurm's does; with no controller, Slurm's connect failure."""
    import httpx

    cluster = Cluster(tmp_path / "c", nodes=1).start()
    port, sock = free_port(), tmp_path / "restd.sock"
    os.chmod(tmp_path, 0o755)
    try:
        as_root = _daemon(cluster, "slurmrestd", f"localhost:{port}")
        assert (as_root.returncode, as_root.stderr) == (1, "slurmrestd: fatal: slurmrestd should not be run as "
                                                           "the root user.\n")
        daemon = subprocess.Popen([str(BIN / "slurmrestd"), "-u", "daemon", "-a", "rest_auth/jwt",
                                   f"localhost:{port}", f"unix:{sock}"], env=cluster.env,
                                  stderr=subprocess.PIPE, text=True)
        try:
            headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": cluster.token()}
            wait_for(lambda: sock.exists() and _answers(port), 30, what="slurmrestd listening")
            ping = httpx.get(f"http://127.0.0.1:{port}/slurm/v0.0.40/ping", headers=headers, timeout=10)
            assert ping.status_code == 200 and ping.json()["pings"][0]["pinged"] == "UP", ping.text
            unix = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10)
            nodes = unix.get("http://slurmrestd/slurm/v0.0.40/nodes", headers=headers)
            assert [n["name"] for n in nodes.json()["nodes"]] == ["n01"]
            refused = httpx.get(f"http://127.0.0.1:{port}/slurm/v0.0.40/nodes", timeout=10,
                                headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": "forged"})
            assert refused.status_code == 401
            assert Path(f"/proc/{daemon.pid}/status").read_text().split("Uid:")[1].split()[0] == "1"  # daemon
            cluster.kill_controller()
            gone = httpx.get(f"http://127.0.0.1:{port}/slurm/v0.0.40/ping", headers=headers, timeout=30)
            assert gone.status_code == 503
            assert gone.json()["errors"][0]["error"] == "Unable to contact slurm controller (connect failure)"
        finally:
            daemon.terminate()
            daemon.wait(30)
    finally:
        cluster.stop()


def _answers(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_slurmdbd_says_there_is_nothing_to_start(cluster: Cluster) -> None:
    version = _daemon(cluster, "slurmdbd", "-V")
    assert (version.returncode, version.stdout) == (0, "slurm 23.11.4\n")
    assert _daemon(cluster, "slurmdbd", "-h").stderr.startswith("Usage: slurmdbd [OPTIONS]\n  -D")
    started = _daemon(cluster, "slurmdbd", "-D")
    assert started.returncode == 1 and "slurmctld writes the accounting to AccountingStorageLoc" in started.stderr


def test_slurmrestd_answers_on_a_pipe_and_names_its_plugins(tmp_path: Path) -> None:
    """Without an address slurmrestd answers the requests on its standard input (inetd's way), the
    caller's own (rest_auth/local) where a request brings no token; -a/-s/-d list and check Slurm's
    plugin names; a malformed request ends it non-zero, as Slurm's does."""
    cluster = Cluster(tmp_path / "c", nodes=1).start()
    env = dict(cluster.env, SLURMRESTD_SECURITY="disable_user_check")  # root runs it here

    def restd(*args: str, given: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "slurmrestd"), *args], input=given, env=env, capture_output=True,
                              text=True, timeout=60)

    try:
        listed = restd("-a", "list")
        assert (listed.returncode, listed.stderr) == (0, "Possible REST authentication plugins:\nrest_auth/jwt\n"
                                                         "rest_auth/local\n")
        assert restd("-s", "list").stderr.splitlines()[1:] == ["openapi/slurmctld", "openapi/slurmdbd"]
        assert "data_parser/v0.0.40" in restd("-d", "list").stderr.splitlines()
        for option in ("-a", "-s", "-d"):
            bad = restd(option, "nonesuch")
            assert bad.returncode == 1 and bad.stderr.startswith("slurmrestd: fatal: Unable to find plugin: ")
        two = restd("-a", "rest_auth/local", given="GET /slurm/v0.0.40/nodes HTTP/1.1\r\n\r\n"
                    "GET /slurm/v0.0.40/ping HTTP/1.1\r\nConnection: close\r\n\r\n")
        # (read as text: \r\n comes as \n)
        assert two.returncode == 0 and two.stdout.count("HTTP/1.1 200 OK\n") == 2, two.stdout + two.stderr
        assert '"name":"n01"' in two.stdout and '"pinged":"UP"' in two.stdout
        for broken in ("INVALID", "INVALID\r\n\r\n", "GET /openapi HTTP/1.1\r\nINVALID\r\n\r\n",
                       "GET /slurm/v0.0.40/ping HTTP/1.1\r\n",
                       "GET /slurm/v0.0.40/ping HTTP/1.1\r\n\r\nGET /slurm/v0.0.40/pi",  # the second cut short
                       "GET /slurm/v0.0.40/ping HTTP/1.1\r\n" + "X-Filler: " + "x" * 70_000 + "\r\n\r\n"):
            assert restd(given=broken).returncode == 1, broken
    finally:
        cluster.stop()

"""``wattsched emulate``: a whole cluster of virtual nodes on this host.

Starts the controller, the emulated BMCs when the nodes are metered or switched through them
(IPMI or Redfish), and ``EmulatedAgents`` agent processes, each hosting a slice of the configured
nodes on its own loopback port, waits for every node to register, prints the shell line that
points the CLI at the cluster, and stops everything on Ctrl-C, SIGTERM or ``wattsched emulate
--stop``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

from wattsched.cli.common import CLIError
from wattsched.noded.procs import alive, same_process, start_time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from wattsched.cli.common import Client

PIDFILE = "emulate.json"


def slices(names: list[str], count: int) -> list[list[str]]:
    count = max(1, min(count, len(names)))
    size = -(-len(names) // count)
    return [names[i:i + size] for i in range(0, len(names), size)]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(config_path: str, agents: int | None, log_dir: str | None, quiet: bool = False) -> dict:
    from wattsched import config as config_mod
    from wattsched import hostlist

    config = config_mod.load(config_path)
    state_dir = config.state_save_location
    os.makedirs(state_dir, exist_ok=True)
    pidfile = os.path.join(state_dir, PIDFILE)
    if os.path.exists(pidfile):
        info = _read_json(pidfile)
        if info["controller"] in recorded(info):
            raise CLIError(f"an emulated cluster is already running from {config_path} "
                           f"(pid {info['controller']}); stop it with: wattsched emulate --stop {config_path}")
    logs = log_dir or os.path.join(state_dir, "log")
    os.makedirs(logs, exist_ok=True)
    exe = [sys.executable, "-m", "wattsched.cli.wattsched"]
    env = dict(os.environ, WATTSCHED_CONF=config_path)
    for url in (config.state_storage_loc, config.accounting_storage_loc):
        if url.startswith("postgresql"):
            create_database(url)
    hosts = config.slurmctld_hosts
    procs = [_daemon([*exe, "controller", config_path, "--name", hosts[0][0]], env,
                     os.path.join(logs, "controller.log"))]
    _wait_for_key(config, procs[0])
    for name, _addr in hosts[1:]:  # the backups, once the primary made the key they share here
        procs.append(_daemon([*exe, "controller", config_path, "--name", name], env,
                             os.path.join(logs, f"controller-{name}.log")))
    controllers = [p.pid for p in procs]
    bmcs = []
    if config.emulated_bmcs:
        # the virtual nodes' BMCs, read over RMCP+ by the agents as real BMCs would be
        bmcs.append(_daemon([*exe, "bmc", config_path], env, os.path.join(logs, "bmc.log")))
    names = [n.name for n in config.nodes]
    for index, part in enumerate(slices(names, agents or config.emulated_agents)):
        args = ["noded", config_path, "--nodes", hostlist.compress(part), "--port", str(_free_port())]
        procs.append(_daemon([*exe, *args], env, os.path.join(logs, f"noded{index}.log")))
    info = {"controller": procs[0].pid, "controllers": controllers,
            "agents": [p.pid for p in procs[len(controllers):]], "bmc": [p.pid for p in bmcs],
            "config": config_path,
            # each pid's start time: --stop signals a pid only while it is still the process started
            # here, never one that reused the number after a kill -9 or a reboot
            "started": {str(p.pid): start_time(p.pid) for p in procs + bmcs}}
    with open(pidfile, "w") as handle:
        json.dump(info, handle)
    _wait_registered(config, len(names), procs + bmcs, quiet)
    return info


def create_database(url: str) -> None:
    """The PostgreSQL database ``url`` names, created if it is missing (an emulated cluster's own:
    a site creates its databases itself)."""
    import psycopg
    from psycopg import sql

    server, _, name = url.replace("postgresql+psycopg://", "postgresql://", 1).rpartition("/")
    name = name.split("?")[0]
    try:
        with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=10) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise CLIError(f"cannot create the database {name} at {server}: {str(exc).strip()}") from exc


def _daemon(argv: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)


def _read_json(path: str) -> dict:
    with open(path) as handle:
        return json.load(handle)


def _wait_for_key(config, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while not os.path.exists(config.key_file):
        if proc.poll() is not None:
            raise CLIError("the controller exited at start-up; see its log in "
                           f"{os.path.join(config.state_save_location, 'log', 'controller.log')}")
        if time.time() > deadline:
            raise CLIError("the controller did not create its key in time")
        time.sleep(0.05)


def _wait_registered(config, total: int, procs: list[subprocess.Popen], quiet: bool,
                     timeout_s: float = 300) -> None:
    from wattsched.cli.common import Client

    client = Client(config)
    deadline = time.time() + timeout_s
    last = -1
    while time.time() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                stop_pids([p.pid for p in procs])
                raise CLIError(f"a daemon exited at start-up (pid {proc.pid}); see the logs in "
                               f"{os.path.join(config.state_save_location, 'log')}")
        try:
            nodes = client.request("GET", "/v1/nodes", timeout=10)["nodes"]
        except CLIError:
            time.sleep(0.2)
            continue
        up = sum(1 for n in nodes if not n["not_responding"])
        if up != last and not quiet:
            sys.stderr.write(f"\rwattsched: {up}/{total} nodes registered")
            sys.stderr.flush()
            last = up
        if up >= total and _controllers_answer(client):
            if not quiet:
                sys.stderr.write("\n")
            return
        time.sleep(0.2)
    raise CLIError(f"only {last} of {total} nodes registered in {timeout_s:.0f} s")


def _controllers_answer(client: Client) -> bool:
    """Whether every controller answers its ping (the standbys too): the cluster is up once
    ``scontrol ping`` shows them all UP, as a newcomer's first command may ask."""
    for index in range(len(client.controllers)):
        try:
            client.only(index).request("GET", "/v1/ping", timeout=5.0)
        except CLIError:
            return False
    return True


def stop_pids(pids: list[int], timeout_s: float = 15) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
        for pid in pids:  # reap our own children so they do not linger as zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def stop(config_path: str) -> bool:
    from wattsched import config as config_mod

    config = config_mod.load(config_path, globals_only=True)
    pidfile = os.path.join(config.state_save_location, PIDFILE)
    if not os.path.exists(pidfile):
        return False
    info = _read_json(pidfile)
    stop_pids(recorded(info))
    with contextlib.suppress(FileNotFoundError):  # a cluster in the foreground removes it as it stops
        os.unlink(pidfile)
    return True


def recorded(info: dict) -> list[int]:
    """The processes of an emulate.json that still run as the ones it recorded (pid and start time)."""
    started = info.get("started", {})
    pids = [*info["agents"], *info.get("bmc", []), *info.get("controllers", [info["controller"]])]
    return [pid for pid in pids if same_process(pid, int(started.get(str(pid), 0)))]


def shell_line(config_path: str) -> str:
    """The line that points a shell's Slurm commands at this cluster."""
    line = f"export WATTSCHED_CONF={config_path} SLURM_CONF={config_path}"
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        line += f" PATH={bin_dir}:$PATH"
    return line

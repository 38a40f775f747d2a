"""Starting a node agent for some of the configured nodes."""

from __future__ import annotations

import os
import socket

from wattsched import auth, hostlist, logs
from wattsched import config as config_mod
from wattsched.noded.agent import build, for_node, node_path
from wattsched.noded.app import create_app
from wattsched.noded.cgroup import CgroupError
from wattsched.noded.gpus import GpuError
from wattsched.service import httpserve
from wattsched.service.daemonstart import Start


class AgentStartError(RuntimeError):
    pass


def select_nodes(config: config_mod.Config, expression: str | None) -> list[config_mod.NodeConf]:
    """The nodes named by ``expression``, or the one named like this host."""
    by_name = {n.name: n for n in config.nodes}
    names = hostlist.expand(expression) if expression else [socket.gethostname().split(".")[0]]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise AgentStartError(f"{config.source}: node {unknown[0]} is not defined by a NodeName line")
    return [by_name[n] for n in names]


def run(config_path: str, nodes: str | None, host: str, port: int | None, advertise: str | None,
        start: Start = Start()) -> None:
    os.umask(0o077)  # spool records, outbox and profiles are root's alone; jobs apply their own umask
    config = config_mod.load(config_path)
    selected = select_nodes(config, nodes)
    config = for_node(config, selected[0].name)
    log_file = start.log_file or node_path(config.slurmd_log_file, selected[0].name)
    logs.setup(logs.louder(config.slurmd_log_level, start.verbose), log_file or None, start.syslog)
    listen_port = port or selected[0].port or config.slurmd_port
    url = f"http://{advertise or host}:{listen_port}"
    try:
        agent = build(config, selected, url, auth.read_key(config.key_file))
    except (CgroupError, GpuError) as exc:
        raise AgentStartError(f"{config.source}: {exc}") from exc
    sock = httpserve.listen(host, listen_port)
    start.ready()
    httpserve.serve_on(httpserve.server(create_app(agent), host, listen_port, config.message_timeout_s), sock)

"""A controller's state in the test's own process: the controller's transitions over a real state
store (SQLite in the test's folder) and one agent's nodes, heard from once; no daemon, no network."""

from __future__ import annotations

from pathlib import Path

from wattsched import auth, config
from wattsched.api import AgentHeartbeat, NodeReport
from wattsched.controller import nodes
from wattsched.controller.startup import load_plugins, open_state
from wattsched.controller.state import ClusterState
from wattsched.controller.store import StateStore

NOW = 1_800_000_000.0


def controller_state(tmp_path: Path, settings: str = "", cpus: int = 2, now: float = NOW) -> ClusterState:
    """A state over ``tmp_path``'s state store (opened again, it restores what the last one saved),
    node a1 with ``cpus`` CPUs in partition p, and ``settings`` (slurm.conf lines) added."""
    path = tmp_path / "c.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n{settings}"
                    f"NodeName=a1 CPUs={cpus} RealMemory=1000\nPartitionName=p Nodes=a1 Default=YES MaxTime=INFINITE\n")
    conf = config.load(path)
    state = open_state(conf, StateStore(str(tmp_path / "ctld")), load_plugins(conf),
                       auth.ensure_key(str(tmp_path / "key")), now)
    nodes.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=now, nodes=[
        NodeReport(name="a1", cpus=cpus, real_memory_mb=1000)]), now)
    return state

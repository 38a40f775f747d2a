"""Virtual nodes' host identity: what lets the jobs of several nodes on one host see what they would
see on nodes of their own.

Where one agent runs several nodes (emulation), a job's processes on a node get, before they become
the user (wattsched.noded.stepd.enter_node): the node's name as their hostname (a UTS namespace of
their own); a hosts file naming every node of the agent, bind-mounted over /etc/hosts in a mount
namespace of their own, so names such as MPI launchers pass between nodes resolve; and TMPDIR, a
directory per job and node, so that what MPI keeps per machine (Open MPI's session directory and its
shared-memory files) is apart per virtual node, as it is per real one. Real nodes keep their own.

The directories are root's choice, never a user's: ``<SlurmdSpoolDir>/tmp/<node>/<job id>``, under
folders only root may write, made by root and then given to the job's user; removed when the job
ends on the node (shutil.rmtree, which does not follow links the user may have left).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import tempfile

from wattsched.config import NodeConf


class VirtualHosts:
    """The agent's virtual nodes' identities (``enabled`` false: none, real nodes)."""

    def __init__(self, spool: str, nodes: list[NodeConf], enabled: bool) -> None:
        self.enabled = enabled
        self.hosts_file = os.path.join(spool, "hosts")
        self.tmp_root = os.path.join(spool, "tmp")
        if enabled:
            self._write_hosts(nodes)
            os.makedirs(self.tmp_root, mode=0o711, exist_ok=True)
            os.chmod(self.tmp_root, 0o711)

    def _write_hosts(self, nodes: list[NodeConf]) -> None:
        """The host's own /etc/hosts, then each node at its NodeAddr (an address) or at loopback."""
        try:
            with open("/etc/hosts", encoding="utf-8", errors="replace") as handle:
                base = handle.read(1 << 20)
        except OSError:
            base = "127.0.0.1\tlocalhost\n"
        lines = [base.rstrip("\n"), "# wattsched: this agent's virtual nodes"]
        for node in nodes:
            lines.append(f"{_address(node.node_addr)}\t{node.name}")
        # a name of this writer's own: the agents of one emulated cluster share the spool and start
        # together, and one's rename must not take another's half-written file away
        fd, tmp = tempfile.mkstemp(prefix=".hosts.", dir=os.path.dirname(self.hosts_file))
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write("\n".join(lines) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.hosts_file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def identity(self, node: str, job_id: int, uid: int, gid: int) -> dict[str, str]:
        """What the step daemon applies for a job's process on ``node``; empty on real nodes."""
        if not self.enabled:
            return {}
        node_dir = os.path.join(self.tmp_root, node)
        try:
            os.mkdir(node_dir)
            os.chmod(node_dir, 0o711)  # not mkdir's mode: the agent's umask would take the users' way in
        except FileExistsError:
            pass
        job_dir = os.path.join(node_dir, str(int(job_id)))
        try:
            os.mkdir(job_dir, 0o700)
            os.chown(job_dir, uid, gid)
        except FileExistsError:
            pass
        return {"hostname": node, "hosts_file": self.hosts_file, "tmp_dir": job_dir}

    def release(self, node: str, job_id: int) -> None:
        """The job is over on ``node``: its temporary tree goes."""
        if self.enabled:
            shutil.rmtree(os.path.join(self.tmp_root, node, str(int(job_id))), ignore_errors=True)


def _address(node_addr: str | None) -> str:
    if node_addr:
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(node_addr))
    return "127.0.0.1"

"""Virtual nodes' host identity (wattsched.noded.virtualhost): the hosts file every agent of an
emulated cluster writes into the spool they share, and the per-job temporary trees."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from wattsched.config import NodeConf
from wattsched.noded.virtualhost import VirtualHosts

NODES = [NodeConf(name="n1", node_addr="10.0.0.7"), NodeConf(name="n2", node_addr="n2.example"),
         NodeConf(name="n3")]


def test_the_hosts_file_names_every_node_at_its_address(tmp_path: Path) -> None:
    hosts = VirtualHosts(str(tmp_path), NODES, enabled=True)
    lines = Path(hosts.hosts_file).read_text().splitlines()
    assert lines[-3:] == ["10.0.0.7\tn1", "127.0.0.1\tn2", "127.0.0.1\tn3"]  # a name is no address
    assert stat.S_IMODE(os.stat(hosts.hosts_file).st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts", "tmp"]


def test_agents_sharing_a_spool_start_together(tmp_path: Path) -> None:
    # `wattsched emulate` starts several agents over one SlurmdSpoolDir at once: none may fail because
    # another renamed its half-written file, and none leaves one behind
    failures: list[BaseException] = []

    def start() -> None:
        try:
            for _ in range(50):
                VirtualHosts(str(tmp_path), NODES, enabled=True)
        except BaseException as exc:  # any failure of a writer is the finding
            failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts", "tmp"]
    assert Path(tmp_path, "hosts").read_text().endswith("127.0.0.1\tn3\n")


def test_a_job_gets_a_private_tree_per_node_that_goes_with_it(tmp_path: Path) -> None:
    hosts = VirtualHosts(str(tmp_path), NODES, enabled=True)
    uid, gid = 4321, 4322
    old = os.umask(0o077)  # an agent's own: the users must still find their way in
    try:
        identity = hosts.identity("n2", 17, uid, gid)
    finally:
        os.umask(old)
    for folder in (tmp_path / "tmp", tmp_path / "tmp" / "n2"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o711
    assert identity == {"hostname": "n2", "hosts_file": hosts.hosts_file, "tmp_dir": str(tmp_path / "tmp/n2/17")}
    info = os.stat(identity["tmp_dir"])
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (uid, gid, 0o700)
    assert hosts.identity("n2", 17, uid, gid) == identity  # a second step of the job: the same tree
    Path(identity["tmp_dir"], "left-by-the-job").write_text("x")
    hosts.release("n2", 17)
    assert not os.path.exists(identity["tmp_dir"])


def test_real_nodes_keep_their_own(tmp_path: Path) -> None:
    hosts = VirtualHosts(str(tmp_path), NODES, enabled=False)
    assert hosts.identity("n1", 1, 0, 0) == {}
    assert list(tmp_path.iterdir()) == []

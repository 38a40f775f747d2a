"""Where a job's control groups are: named by the cluster, the node and the job, never by a user."""

from __future__ import annotations

import os

import pytest

from wattsched.noded import cgroup


def test_two_clusters_with_the_same_node_names_have_groups_of_their_own(tmp_path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset memory pids\n")
    first = cgroup.V2(str(tmp_path), False, True, cluster="alpha")
    second = cgroup.V2(str(tmp_path), False, True, cluster="beta")
    assert first.job_paths("n01", 7) == [os.path.join(str(tmp_path), "wattsched", "alpha", "node_n01", "job_7")]
    assert set(first.job_paths("n01", 7)).isdisjoint(second.job_paths("n01", 7))


@pytest.mark.parametrize("name", ["..", ".", "", "a/../b"])
def test_no_name_leaves_the_groups_folder(tmp_path, name) -> None:
    (tmp_path / "cgroup.controllers").write_text("pids\n")
    hierarchy = cgroup.V2(str(tmp_path), False, False, cluster=name)
    path = hierarchy.job_paths(name, 1)[0]
    assert os.path.normpath(path).startswith(os.path.join(str(tmp_path), "wattsched") + os.sep)
    assert os.path.normpath(path).count(os.sep) == path.count(os.sep)


def test_an_emulated_cluster_without_cgroups_falls_back_to_process_groups(tmp_path, caplog) -> None:
    """The shipped emulated configs ask for proctrack/cgroup; on a host that gives the agent none, an
    emulated cluster tracks jobs by process group and says so, a real node refuses to start."""
    from wattsched import config as config_mod
    from wattsched.noded.agent import confinement

    (tmp_path / "cgroup.conf").write_text(f"CgroupMountpoint={tmp_path / 'absent'}\n")
    conf = tmp_path / "slurm.conf"
    for emulated in (True, False):
        conf.write_text(f"ProctrackType=proctrack/cgroup\nEmulatedNodes={'YES' if emulated else 'NO'}\n"
                        "NodeName=n1\nPartitionName=p Nodes=ALL\n")
        loaded = config_mod.load(conf)
        nodes = {n.name: n for n in loaded.nodes}
        if emulated:
            assert confinement(loaded, nodes) is None
            assert "tracked by process group" in caplog.text
        else:
            with pytest.raises(cgroup.CgroupError, match="does not exist"):
                confinement(loaded, nodes)

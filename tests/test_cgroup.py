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

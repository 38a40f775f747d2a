"""Shared fixtures: a running test cluster, per module or per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.testcluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A 4-node cluster shared by one test module (tests must not depend on each other's jobs)."""
    running = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield running
    running.stop()


@pytest.fixture
def fresh_cluster(tmp_path) -> Iterator[Cluster]:
    """A cluster of its own, for tests that kill daemons or change nodes."""
    running = Cluster(tmp_path)
    yield running
    running.stop()

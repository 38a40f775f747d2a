"""Shared fixtures: a running test cluster, per module or per test; the ``e2e`` mark on every test
that starts the daemons (``make test-fast`` leaves them out)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster

pytest_plugins = ["tests.hostile"]  # the hostile modules' accounts and shared cluster

DAEMON_FIXTURES = {"cluster", "fresh_cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "e2e" or DAEMON_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


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

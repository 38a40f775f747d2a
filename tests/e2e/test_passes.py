"""What wakes the scheduler: a submission it could act on does, a held one does not (its reason is
set at submission and a pass would only rank the whole queue again for nothing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster, wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    # no periodic pass, and no agent left to report (a heartbeat wakes the scheduler too): every pass
    # counted here was woken by a submission
    running = Cluster(tmp_path_factory.mktemp("passes"), nodes=1, extra="SchedulerInterval=3600").start()
    running.kill_agent(0)
    yield running
    running.stop()


def _cycles(cluster: Cluster) -> int:
    return int(cluster.api("GET", "/v1/diag").json()["cycles"])


def _submit_waiting(cluster: Cluster, before: int) -> int:
    """Submit a job that waits for its begin time; returns the pass count once its pass is done."""
    cluster.sbatch("--begin=now+1hour", "-o", "/dev/null", "--wrap", "true")
    return wait_for(lambda: (c := _cycles(cluster)) > before and c, what="the pass a submission wakes")


def test_held_submissions_wake_no_pass_and_show_their_reason(cluster: Cluster) -> None:
    settled = _submit_waiting(cluster, _cycles(cluster))
    held = [cluster.sbatch("-H", "-o", "/dev/null", "--wrap", "true") for _ in range(12)]
    # each sbatch is a process of its own: a pass woken by any of them would have run by now (passes
    # wait MIN_PASS_INTERVAL_S for a burst to end, far less than twelve command starts)
    after = _submit_waiting(cluster, settled)
    assert after == settled + 1
    queue = cluster.run("squeue", "-h", "-t", "PD", "-o", "%i %r").stdout.split("\n")
    reasons = dict(line.split() for line in queue if line)
    assert all(reasons[str(job_id)] == "JobHeldUser" for job_id in held)
    cluster.run("scontrol", "release", ",".join(map(str, held)))
    wait_for(lambda: _cycles(cluster) > after, what="the pass a release wakes")

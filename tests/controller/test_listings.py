"""What the controller's job listing answers (GET /v1/jobs, in process): squeue's rows of values and
the records other commands read agree, for pending, running and folded array jobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.inprocess import NOW, controller_state
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.controller import jobroutes, jobs, launching
from wattsched.controller.state import ClusterState

ROOT = Identity(0, "root")


def _listing(state: ClusterState, **options) -> dict:
    options = {"detail": False, "columns": False, "keys": None, "fold": False} | options
    answer = asyncio.run(jobroutes._listing(state, ROOT, None, None, None, None, **options))
    return json.loads(answer.body)


def test_rows_of_values_are_the_records_values_folded_or_not_running_or_pending(tmp_path: Path) -> None:
    state = controller_state(tmp_path, cpus=2)
    request = {"work_dir": "/tmp", "script": "#!/bin/sh\n", "ntasks": 2}
    running = jobs.submit(state, JobSubmit(**request), ROOT, NOW)[0]
    launching.schedule(state, NOW + 1)
    tasks = jobs.submit(state, JobSubmit(**request, array="0-2"), ROOT, NOW + 2)
    assert running.node_list == ["a1"] and all(task.reason for task in tasks)
    keys = ["display_id", "state", "run_time_s", "node_list", "num_cpus", "reason", "tres_per_node"]
    for fold in (False, True):
        listed = _listing(state, fold=fold)
        records = listed["jobs"]
        table = _listing(state, fold=fold, columns=True, keys=[*keys, "no such key"])
        assert table["columns"] == [key for key in records[0] if key in keys]
        at = table["columns"].index("run_time_s")  # (each answer's at its own time)
        assert [row[at] for row in table["rows"]] == [table["time"] - (NOW + 1), 0, 0, 0][:len(records)]
        assert [record["run_time_s"] for record in records] == [listed["time"] - (NOW + 1), 0, 0, 0][:len(records)]
        assert [row[:at] + row[at + 1:] for row in table["rows"]] == [
            [record[key] for key in table["columns"] if key != "run_time_s"] for record in records]
        shown = {record["display_id"]: record["state"] for record in records}
        pending = [f"{tasks[0].job_id}_[0-2]"] if fold else [task.display_id for task in tasks]
        assert shown == {str(running.job_id): "RUNNING", **dict.fromkeys(pending, "PENDING")}
    detailed = _listing(state, detail=True, columns=True, keys=keys)
    assert detailed["columns"] == [key for key in _listing(state, detail=True)["jobs"][0] if key in keys]

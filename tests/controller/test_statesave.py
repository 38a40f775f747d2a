"""What the controller saves of a job beyond its record: its batch script and environment, kept in
the state store from submission to purge and read at launch, never in the controller's memory
(in process, on a real state store)."""

from __future__ import annotations

import json
import sqlite3
from operator import attrgetter
from pathlib import Path

from tests.inprocess import NOW, controller_state
from wattsched import states
from wattsched.api import JobSubmit, JobUpdate
from wattsched.auth import Identity
from wattsched.controller import jobend, jobs, statesave
from wattsched.controller.dispatch import batch_environment, energy_settings
from wattsched.model import Job, JobScript

ALICE = Identity(1000, "alice")
SCRIPT = "#!/bin/sh\necho hello\n"


def _rows(tmp_path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "ctld" / "state.db") as conn:
        return conn.execute(sql).fetchall()


def _submit(state, **options) -> list:
    env = {"HOME": "/home/alice", "MY_SETTING": "42", "WATTSCHED_APP_MEMORY_BOUND": "0.8@30,0.2", "SLURM_JWT": "secret"}
    return jobs.submit(state, JobSubmit(work_dir="/tmp", script=SCRIPT, environment=env, **options), ALICE, NOW)


def test_a_jobs_script_and_environment_live_in_the_store_and_reach_its_launch(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    job = _submit(state)[0]
    assert not hasattr(job, "environment") and not hasattr(job, "script")
    # read before the journal is flushed (a launch never is: its action waits for the save) and after
    for _ in range(2):
        saved = statesave.scripts(state, {job.script_id})[job.job_id]
        assert saved.script == SCRIPT and saved.environment["MY_SETTING"] == "42"
        assert "SLURM_JWT" not in saved.environment  # the command's token is never kept
        statesave.flush(state)
    record = json.loads(_rows(tmp_path, f"SELECT data FROM jobs WHERE job_id = {job.job_id}")[0][0])
    assert "environment" not in record and "script" not in record
    env = batch_environment(state, job, saved.environment)
    assert env["MY_SETTING"] == "42" and env["SLURM_JOB_ID"] == str(job.job_id)
    assert energy_settings(state.config, job)["app_model"] == [[0.8, 30.0], [0.2, 0.0]]  # kept on the record
    # a restarted controller finds it in the store
    restarted = controller_state(tmp_path)
    assert statesave.scripts(restarted, {job.job_id}) == {job.job_id: saved}


def test_an_arrays_tasks_share_one_script_dropped_with_the_last_of_them(tmp_path: Path) -> None:
    state = controller_state(tmp_path, "MinJobAge=1\n")
    plain = _submit(state)[0]
    tasks = _submit(state, array="0-2")
    statesave.flush(state)
    assert {t.script_id for t in tasks} == {tasks[0].job_id}
    assert sorted(r[0] for r in _rows(tmp_path, "SELECT job_id FROM job_scripts")) == [plain.job_id, tasks[0].job_id]
    for job in [plain, tasks[0], tasks[1]]:
        job.state, job.end_time = states.CANCELLED, NOW
        jobend.purge(state, job)
    statesave.flush(state)
    assert [r[0] for r in _rows(tmp_path, "SELECT job_id FROM job_scripts")] == [tasks[0].job_id]
    restarted = controller_state(tmp_path)  # counts the array's tasks left again
    assert restarted.array_tasks == {tasks[0].job_id: 1}
    jobend.purge(restarted, restarted.jobs[tasks[2].job_id])
    statesave.flush(restarted)
    assert _rows(tmp_path, "SELECT job_id FROM job_scripts") == []


def test_a_state_saved_with_scripts_in_job_records_is_moved_on_restore(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    job = _submit(state)[0]
    statesave.flush(state)
    old = job.to_dict() | {"script": SCRIPT, "environment": {"MY_SETTING": "7", "WATTSCHED_APP_MEMORY_BOUND": "0.5"}}
    del old["app_model"]
    with sqlite3.connect(tmp_path / "ctld" / "state.db") as conn:  # as an earlier release saved it
        conn.execute("UPDATE jobs SET data = ? WHERE job_id = ?", (json.dumps(old), job.job_id))
        conn.execute("DELETE FROM job_scripts")
    restarted = controller_state(tmp_path)
    statesave.flush(restarted)
    assert _rows(tmp_path, "SELECT script FROM job_scripts") == [(SCRIPT,)]
    assert statesave.scripts(restarted, {job.job_id})[job.job_id] == JobScript(
        SCRIPT, {"MY_SETTING": "7", "WATTSCHED_APP_MEMORY_BOUND": "0.5"})
    assert restarted.jobs[job.job_id].energy.app_model == [[0.5, 0.0]]
    record = json.loads(_rows(tmp_path, f"SELECT data FROM jobs WHERE job_id = {job.job_id}")[0][0])
    assert "environment" not in record and "script" not in record


def test_the_strings_jobs_repeat_are_kept_once_when_submitted_and_when_restored(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    body = JobSubmit(work_dir="/home/alice/run", script=SCRIPT, name="sweep", submit_line="sbatch sweep.sh",
                     output="out-%j.txt").model_dump_json()
    # each request parsed on its own, and its user's name from its own token, as the routes have them
    first, second = (jobs.submit(state, JobSubmit.model_validate_json(body), Identity(1000, "".join(["al", "ice"])),
                                 NOW)[0] for _ in range(2))
    shared = ("user", "name", "submit_line", "request.work_dir", "request.std_out", "energy.history_key")

    def same(a: Job, b: Job) -> bool:
        return all(attrgetter(path)(a) is attrgetter(path)(b) for path in shared)

    assert first.user == "alice" and first.request.work_dir == "/home/alice/run" and same(first, second)
    statesave.flush(state)
    restarted = controller_state(tmp_path)  # read back from the store's JSON: fresh strings, shared again
    assert same(restarted.jobs[first.job_id], restarted.jobs[second.job_id])


def test_an_arrays_pending_tasks_share_one_request_until_one_of_them_is_changed(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    tasks = _submit(state, array="0-3")
    assert len(tasks) == 4 and all(task.request is tasks[0].request for task in tasks)
    jobs.update(state, [tasks[1]], JobUpdate(mail_type="END"), ALICE, NOW)  # scontrol update of 4_1 alone
    assert tasks[1].request.mail_type == ("END",) and tasks[0].request.mail_type == ()
    assert tasks[0].request is tasks[2].request is tasks[3].request
    statesave.flush(state)
    restarted = controller_state(tmp_path)
    again = [restarted.jobs[task.job_id] for task in tasks]
    assert again[0].request is again[2].request is again[3].request and again[1].request.mail_type == ["END"]

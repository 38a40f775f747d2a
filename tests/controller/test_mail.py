"""--mail-type and --mail-user: Slurm's event names and their parsing, and which mails the
controller's transitions produce, with Slurm's subjects and variables (in process, on a real
state: the controller's own transitions over a real state store, a virtual node)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.inprocess import NOW, controller_state
from wattsched import mailtypes, states
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.controller import jobend, jobs, launching, timers
from wattsched.controller.actions import Mail, Refused
from wattsched.controller.state import ClusterState


@pytest.mark.parametrize(("text", "parsed"), [
    ("BEGIN", ("BEGIN",)), ("end,begin", ("BEGIN", "END")),
    ("ALL", ("INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT")),
    ("ALL,ARRAY_TASKS,TIME_LIMIT_80", ("ARRAY_TASKS", "INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE",
                                       "STAGE_OUT", "TIME_LIMIT_80")),
    ("BEGIN,NONE", ()), ("BEGIN,bogus", ("BEGIN",)),  # Slurm's: unknown names beside known ones dropped
])
def test_mail_types_parse_as_slurms(text: str, parsed: tuple[str, ...]) -> None:
    assert mailtypes.parse(text) == parsed
    assert mailtypes.show(parsed) == (",".join(parsed) or "NONE")


def test_a_list_with_no_known_type_is_refused() -> None:
    with pytest.raises(ValueError, match="Invalid --mail-type specification"):
        mailtypes.parse("bogus,other")


def _state(tmp_path: Path) -> ClusterState:
    return controller_state(tmp_path, "MailDomain=example.org\nSlurmdTimeout=100000\n", now=NOW)


def _mails(actions: list) -> list[Mail]:
    return [a for a in actions if isinstance(a, Mail)]


def test_a_job_mails_its_start_time_limits_and_failure(tmp_path: Path) -> None:
    state = _state(tmp_path)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", name="sim", time_limit="10",
                                       mail_type="BEGIN,FAIL,TIME_LIMIT_50,TIME_LIMIT_80"),
                      Identity(1000, "alice"), NOW)[0]
    assert job.request.mail_user == "alice@example.org"  # kept as Slurm keeps it (scontrol show job's MailUser)
    began = _mails(launching.schedule(state, NOW + 3))
    assert [(m.subject, m.recipient) for m in began] == \
        [(f"Slurm Job_id={job.job_id} Name=sim Began, Queued time 00:00:03", "alice@example.org")]
    assert began[0].env["SLURM_JOB_MAIL_TYPE"] == "Began" and began[0].env["SLURM_JOB_QUEUED_TIME"] == "00:00:03"
    jobs.launched(state, job.job_id)
    assert _mails(timers.check_timers(state, NOW + 3 + 299)) == []
    halfway = _mails(timers.check_timers(state, NOW + 3 + 300))
    assert [m.subject for m in halfway] == [f"Slurm Job_id={job.job_id} Name=sim Reached 50% of time limit, "
                                            "Run time 00:05:00"]
    assert _mails(timers.check_timers(state, NOW + 3 + 301)) == []  # once a run
    assert len(_mails(timers.check_timers(state, NOW + 3 + 480))) == 1  # 80 %
    ended = _mails(jobend.end(state, job, states.FAILED, 3, 0, NOW + 500, []))
    assert [m.subject for m in ended] == [f"Slurm Job_id={job.job_id} Name=sim Failed, Run time 00:08:17, FAILED, "
                                          "ExitCode 3"]
    assert ended[0].env["SLURM_JOB_EXIT_CODE_MAX"] == "3" and ended[0].env["SLURM_JOB_STATE"] == "FAILED"


def test_an_arrays_tasks_mail_as_one_job(tmp_path: Path) -> None:
    state = _state(tmp_path)
    tasks = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", name="arr", array="0-1",
                                         mail_type="BEGIN,END", mail_user="lab"), Identity(1000, "alice"), NOW)
    began = _mails(launching.schedule(state, NOW))
    assert [m.subject for m in began] == [f"Slurm Array Task Job_id={tasks[0].job_id}_0 ({tasks[0].job_id}) "
                                          "Name=arr Began, Queued time 00:00:00"]
    assert began[0].recipient == "lab@example.org"
    for task in tasks:
        jobs.launched(state, task.job_id)
    assert _mails(jobend.end(state, tasks[0], states.COMPLETED, 0, 0, NOW + 5, [])) == []  # another still runs
    summary = _mails(jobend.end(state, tasks[1], states.COMPLETED, 2, 0, NOW + 6, []))
    assert [m.subject for m in summary] == [f"Slurm Array Summary Job_id={tasks[0].job_id}_* ({tasks[0].job_id}) "
                                            "Name=arr Ended, Mixed, ExitCode [0-2]"]


def test_a_requeue_mails_once_and_a_bad_recipient_is_refused(tmp_path: Path) -> None:
    state = _state(tmp_path)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", name="r", mail_type="REQUEUE"),
                      Identity(1000, "alice"), NOW)[0]
    launching.schedule(state, NOW)
    jobs.launched(state, job.job_id)
    requeued = _mails(jobend.requeue_running(state, job, NOW + 9, states.NODE_FAIL))
    assert [m.subject for m in requeued] == [f"Slurm Job_id={job.job_id} Name=r Requeued"]
    for user in ("-s", "a b", "x\ny"):  # one argument of MailProg: never an option, never two
        with pytest.raises(Refused, match=r"Invalid --mail-user specification"):
            jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", mail_type="END", mail_user=user),
                        Identity(1000, "alice"), NOW)
    with pytest.raises(ValidationError):  # bounded before any work
        JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", mail_type="END", mail_user="x" * 300)
    assert [j.job_id for j in state.jobs.values()] == [job.job_id]

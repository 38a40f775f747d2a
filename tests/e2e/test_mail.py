"""--mail-type on a real cluster: the controller runs the site's MailProg as Slurm's does, with
``-s SUBJECT USER`` and the job's variables, when a job begins and ends; bad requests are refused
before anything is queued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for


@pytest.fixture(scope="module")
def mail_cluster(tmp_path_factory) -> Iterator[tuple[Cluster, Path]]:
    root = tmp_path_factory.mktemp("mail")
    log = root / "mails.log"
    program = root / "mail.sh"
    program.write_text(f'#!/bin/sh\necho "$1|$2|$3|$SLURM_JOB_ID|$SLURM_JOB_MAIL_TYPE|$SLURM_JOB_STATE" >> {log}\n')
    program.chmod(0o755)
    running = Cluster(root, extra=f"MailProg={program}").start()
    yield running, log
    running.stop()


def _mails(log: Path, job_id: int) -> list[list[str]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split("|") for line in lines if line.split("|")[3] == str(job_id)]


def test_a_job_mails_when_it_begins_and_ends(mail_cluster: tuple[Cluster, Path]) -> None:
    c, log = mail_cluster
    job = c.sbatch("--mail-type=ALL", "--mail-user=lab", "-J", "hello", "--wrap", "exit 3")
    c.wait_state(job, "FAILED")
    mails = wait_for(lambda: len(m := _mails(log, job)) == 2 and m, 30, what="two mails")
    assert mails[0][:3] == ["-s", f"Slurm Job_id={job} Name=hello Began, Queued time " + mails[0][1].split()[-1],
                            "lab"]
    assert mails[0][4:] == ["Began", "RUNNING"]
    assert mails[1][1].startswith(f"Slurm Job_id={job} Name=hello Failed, Run time ")
    assert mails[1][1].endswith(", FAILED, ExitCode 3") and mails[1][4:] == ["Failed", "FAILED"]
    shown = c.run("scontrol", "show", "job", str(job)).stdout
    assert "MailUser=lab MailType=INVALID_DEPEND,BEGIN,END,FAIL,REQUEUE,STAGE_OUT" in shown
    held = c.sbatch("-H", "--wrap", "true")
    c.run("scontrol", "update", f"JobId={held}", "MailType=END,FAIL", "MailUser=ops")
    assert "MailUser=ops MailType=END,FAIL" in c.run("scontrol", "show", "job", str(held)).stdout
    bad = c.run("scontrol", "update", f"JobId={held}", "MailType=never", check=False)
    assert bad.returncode == 1 and "Invalid --mail-type specification" in bad.stderr
    c.run("scancel", str(held))
    quiet = c.sbatch("--wrap", "true")
    c.wait_state(quiet, "COMPLETED")
    assert _mails(log, quiet) == []  # no --mail-type: no mail


@pytest.mark.parametrize(("args", "message"), [
    (["--mail-type=sometimes"], "Invalid --mail-type specification"),
    (["--mail-type=END", "--mail-user=-s"], "Invalid --mail-user specification"),
    (["--mail-type=END", "--mail-user=a b"], "Invalid --mail-user specification"),
])
def test_bad_mail_requests_are_refused(mail_cluster: tuple[Cluster, Path], args: list[str], message: str) -> None:
    c, _log = mail_cluster
    before = len(c.jobs())
    refused = c.run("sbatch", *args, "--wrap", "true", check=False, env=c.user_env())
    assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    assert len(c.jobs()) == before

"""job_submit/python's job_rec (what a site's job_modify reads of a job as it stands): each of
Slurm's names reads the job's field, those kept in the job's parts (its request) included."""

from __future__ import annotations

import pytest

from wattsched.model import Job, Request
from wattsched.plugins.job_submit.python import RECORD, JobRec


def test_job_rec_reads_the_job_and_its_request_by_slurms_names() -> None:
    job = Job(job_id=7, name="sweep", uid=1000, user="alice", gid=100, account="phys", partition="debug",
              time_limit_min=30, nice=5,
              request=Request(ntasks=8, nodes_min=2, cpus_per_task=4, work_dir="/home/alice"))
    rec = JobRec(job)
    assert (rec.job_id, rec.user_name, rec.account, rec.time_limit, rec.nice) == (7, "alice", "phys", 30, 5)
    assert (rec.num_tasks, rec.min_nodes, rec.cpus_per_task, rec.work_dir) == (8, 2, 4, "/home/alice")
    assert {name: getattr(rec, name) is not None for name in RECORD} == dict.fromkeys(RECORD, True)
    with pytest.raises(AttributeError, match="no field 'script'"):
        _ = rec.script
    with pytest.raises(AttributeError, match="read only"):
        rec.nice = 0

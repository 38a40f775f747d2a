"""E-mail on a job's events (--mail-type, --mail-user), as Slurm's slurmctld sends it: MailProg run
with ``-s SUBJECT USER`` and the job's variables, the subject in Slurm's words ("Slurm Job_id=12
Name=wrap Ended, Run time 00:00:05, COMPLETED, ExitCode 0").

The events: BEGIN when the job starts; at its end FAIL (a failed, timed-out, node-failed, out of
memory or deadline end) or else END; REQUEUE when it goes back to the queue; TIME_LIMIT_50/80/90
and TIME_LIMIT once a run has used that share of its time limit; INVALID_DEPEND once its
dependency can no longer be satisfied. The tasks of an array mail as one job, as Slurm's: BEGIN
for the first task that starts, one summary when the last ends ("Slurm Array Summary Job_id=10_*
(10) Name=x Ended, COMPLETED, ExitCode [0-2]"); with ARRAY_TASKS, each task mails for itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wattsched import mailtypes, prologs, states, timefmt
from wattsched.controller.actions import Mail
from wattsched.model import Job

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

_WORDS = {"BEGIN": "Began", "END": "Ended", "FAIL": "Failed", "REQUEUE": "Requeued",
          "INVALID_DEPEND": "Invalid dependency", "TIME_LIMIT": "Reached time limit",
          "TIME_LIMIT_90": "Reached 90% of time limit", "TIME_LIMIT_80": "Reached 80% of time limit",
          "TIME_LIMIT_50": "Reached 50% of time limit"}
# the ends FAIL is sent for (Slurm's states from FAILED on), a preempted one only when not requeued
_FAILED = frozenset({states.FAILED, states.TIMEOUT, states.NODE_FAIL, states.PREEMPTED, states.DEADLINE,
                     states.OUT_OF_MEMORY})


def began(state: ClusterState, job: Job) -> list[Mail]:
    """The job started: BEGIN, for an array's first task to start only (unless ARRAY_TASKS)."""
    if "BEGIN" not in job.request.mail_type:
        return []
    if _as_array(job) and any(other.start_time or other.restart_count or other.state != states.PENDING
                              for other in _tasks(state, job) if other is not job):
        return []
    return [_mail(state, job, "BEGIN")]


def ended(state: ClusterState, job: Job) -> list[Mail]:
    """The job ended (its final state set): FAIL or END; an array's summary once its last task ended."""
    if not job.request.mail_type:
        return []
    if _as_array(job):
        tasks = _tasks(state, job)
        if any(_final(t) not in states.FINISHED for t in tasks):
            return []
        failed = any(t.exit_code or t.term_signal or _final(t) in _FAILED for t in tasks)
        wanted = job.request.mail_type
        event = "FAIL" if failed and "FAIL" in wanted else "END" if "END" in wanted else ""
        return [_summary(state, job, tasks, event)] if event else []
    if _final(job) in _FAILED and "FAIL" in job.request.mail_type:
        return [_mail(state, job, "FAIL")]
    if "END" in job.request.mail_type:
        return [_mail(state, job, "END")]
    return []


def requeued(state: ClusterState, job: Job) -> list[Mail]:
    """The job went back to the queue (before its run's fields are reset: the mail tells of that run)."""
    return [_mail(state, job, "REQUEUE")] if "REQUEUE" in job.request.mail_type and not _as_array(job) else []


def invalid_dependency(state: ClusterState, job: Job) -> list[Mail]:
    """Its dependency can never be satisfied: INVALID_DEPEND, once."""
    if "INVALID_DEPEND" not in job.request.mail_type or "INVALID_DEPEND" in job.mail_sent:
        return []
    job.mail_sent = (*job.mail_sent, "INVALID_DEPEND")
    state.touch(job, request_changed=False)
    return [_mail(state, job, "INVALID_DEPEND")]


def time_limit(state: ClusterState, job: Job, now: float) -> list[Mail]:
    """A running job's TIME_LIMIT_50/80/90 and TIME_LIMIT, each once a run, when the run has used that
    share of its time limit (the timers ask each second)."""
    wanted = [t for t in job.request.mail_type if t in mailtypes.TIME_SHARES and t not in job.mail_sent]
    if not wanted or job.time_limit_min is None or not job.start_time:
        return []
    used = now - job.start_time - job.suspended_until(now)
    due = [t for t in wanted if used >= mailtypes.TIME_SHARES[t] * job.time_limit_min * 60]
    if due:
        job.mail_sent = (*job.mail_sent, *due)
        state.touch(job, request_changed=False)
    return [_mail(state, job, t, now) for t in due]


def _final(job: Job) -> str:
    """The state a job ends in, set before its nodes are clean (it is COMPLETING meanwhile)."""
    return job.final_state or job.state


def _as_array(job: Job) -> bool:
    return job.array_task_id is not None and "ARRAY_TASKS" not in job.request.mail_type


def _tasks(state: ClusterState, job: Job) -> list[Job]:
    return [t for t in state.jobs.values() if t.array_job_id == job.array_job_id]


def _environment(state: ClusterState, job: Job, event: str) -> dict[str, str]:
    env = prologs.job_environment(job_id=job.job_id, uid=job.uid, gid=job.gid, user=job.user, account=job.account,
                                  partition=job.partition, node_list=job.alloc.nodes_expr, job_name=job.name,
                                  cluster=state.config.cluster_name)
    env.update(SLURM_JOB_STATE=_final(job), SLURM_JOB_MAIL_TYPE=_WORDS[event], SLURM_JOB_WORK_DIR=job.request.work_dir)
    return env


def _mail(state: ClusterState, job: Job, event: str, now: float = 0.0) -> Mail:
    """One job's (or array task's) mail, with Slurm's subject and variables."""
    env = _environment(state, job, event)
    times = ""
    if event == "BEGIN" and job.start_time:
        queued = timefmt.elapsed_str(max(0, round(job.start_time - job.submit_time)))
        times, env["SLURM_JOB_QUEUED_TIME"] = f", Queued time {queued}", queued
    elif event in ("END", "FAIL", "REQUEUE") and job.start_time and job.end_time:
        run = timefmt.elapsed_str(max(0, round(job.end_time - job.start_time - job.suspended_s)))
        times, env["SLURM_JOB_RUN_TIME"] = f", Run time {run}", run
    elif event in mailtypes.TIME_SHARES and job.start_time:
        run = timefmt.elapsed_str(max(0, round(now - job.start_time - job.suspended_until(now))))
        times, env["SLURM_JOB_RUN_TIME"] = f", Run time {run}", run
    term = ""
    if event in ("END", "FAIL"):
        env["SLURM_JOB_EXIT_CODE_MAX"] = str(0 if job.term_signal else job.exit_code)
        term = f", {_final(job)}" if job.term_signal else f", {_final(job)}, ExitCode {job.exit_code}"
    if job.array_task_id is not None:
        what = f"Slurm Array Task Job_id={job.array_job_id}_{job.array_task_id} ({job.job_id})"
    else:
        what = f"Slurm Job_id={job.job_id}"
    return Mail(job.job_id, f"{what} Name={job.name} {_WORDS[event]}{times}{term}", _recipient(state, job), env)


def _summary(state: ClusterState, job: Job, tasks: list[Job], event: str) -> Mail:
    """An array's one mail at its end: its tasks' exit codes as a range."""
    env = _environment(state, job, event)
    codes = [t.exit_code for t in tasks if not t.term_signal]
    low, high = (min(codes), max(codes)) if codes else (0, 0)
    env.update(SLURM_JOB_EXIT_CODE_MIN=str(low), SLURM_JOB_EXIT_CODE_MAX=str(high))
    shown = "Mixed" if low == 0 and high > 0 else _final(job)
    subject = f"Slurm Array Summary Job_id={job.array_job_id}_* ({job.array_job_id}) Name={job.name} " \
              f"{_WORDS[event]}, {shown}, ExitCode [{low}-{high}]"
    return Mail(job.job_id, subject, _recipient(state, job), env)


def _recipient(state: ClusterState, job: Job) -> str:
    """The address the job was given at submission (one saved before it had none: its user's)."""
    return job.request.mail_user or mailtypes.recipient(job.user, state.config.mail_domain)

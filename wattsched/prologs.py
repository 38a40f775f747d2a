"""Prolog, Epilog, PrologSlurmctld and EpilogSlurmctld: the admin's programs Slurm runs around a
job, with Slurm's environment. The node agent runs Prolog and Epilog (as root) on each node of a
job, the controller runs PrologSlurmctld and EpilogSlurmctld; all of them through
:func:`run_program`, in a thread, bounded by PrologEpilogTimeout.

The programs are the admin's (paths from the configuration); nothing in their environment comes
from the job's user but names and numbers the controller checked (ids, user, account, partition,
node list, job name).

Failure rules, as in Slurm: a Prolog that fails drains its node ("Prolog error") and requeues the
job held (JobHeldAdmin: ``scontrol release`` lets it run again); an Epilog that fails drains its
node ("Epilog error"); a PrologSlurmctld that fails requeues a batch job held and fails an
interactive one; an EpilogSlurmctld's failure is logged.
"""

from __future__ import annotations

import logging
import os
import subprocess

log = logging.getLogger("wattsched.prologs")

PROLOG_ERROR, EPILOG_ERROR = "Prolog error", "Epilog error"
# the signal-style code a program killed at PrologEpilogTimeout returns (as timeout(1) does)
TIMED_OUT = 124


def job_environment(*, job_id: int, uid: int, gid: int, user: str, account: str, partition: str, node_list: str,
                    job_name: str, cluster: str) -> dict[str, str]:
    """Slurm's variables of a job for the programs the daemons run about it (prologs, epilogs, MailProg)."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "SLURM_CLUSTER_NAME": cluster, "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id),
            "SLURM_JOB_UID": str(uid), "SLURM_UID": str(uid), "SLURM_JOB_GID": str(gid),
            "SLURM_JOB_USER": user, "SLURM_JOB_ACCOUNT": account, "SLURM_JOB_PARTITION": partition,
            "SLURM_JOB_NODELIST": node_list, "SLURM_NODELIST": node_list, "SLURM_JOB_NAME": job_name}


def environment(context: str, *, job_id: int, uid: int, gid: int, user: str, account: str, partition: str,
                node_list: str, job_name: str, cluster: str, node: str = "", exit_code: int | None = None,
                term_signal: int = 0) -> dict[str, str]:
    """Slurm's variables for a prolog or epilog; ``context`` is SLURM_SCRIPT_CONTEXT (prolog_slurmd,
    epilog_slurmd, prolog_slurmctld, epilog_slurmctld)."""
    env = {**job_environment(job_id=job_id, uid=uid, gid=gid, user=user, account=account, partition=partition,
                             node_list=node_list, job_name=job_name, cluster=cluster),
           "SLURM_SCRIPT_CONTEXT": context}
    if node:
        env["SLURMD_NODENAME"] = node
    if exit_code is not None:  # epilogs: how the job ended, as wait(2) status and as Slurm shows it
        env["SLURM_JOB_EXIT_CODE"] = str((exit_code << 8) | term_signal)
        env["SLURM_JOB_EXIT_CODE2"] = f"{exit_code}:{term_signal}"
    return env


def run_program(path: str, env: dict[str, str], timeout_s: int, args: list[str] | None = None) -> tuple[int, str]:
    """Run one admin program (with ``args``); (0, "") when it succeeded, else its code and a line for the log."""
    try:
        done = subprocess.run([path, *(args or [])], env=env, cwd="/", stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s or None, check=False, start_new_session=True)
    except subprocess.TimeoutExpired:
        return TIMED_OUT, f"{path} timed out after {timeout_s} s (PrologEpilogTimeout)"
    except OSError as exc:
        return 127, f"{path}: {exc.strerror}"
    if done.returncode == 0:
        return 0, ""
    tail = done.stderr.decode(errors="replace").strip()[-300:]
    code = done.returncode if done.returncode > 0 else 128 - done.returncode
    return code, f"{os.path.basename(path)} exited {done.returncode}" + (f": {tail}" if tail else "")

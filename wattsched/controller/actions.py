"""What a transition of the controller's state hands back: the actions the dispatcher carries out
against the node agents (launch, signal, freeze, power programs, PrologSlurmctld, a fired trigger's
program), or Refused,
which the API layer answers with its HTTP status."""

from __future__ import annotations

import signal as signal_mod
from dataclasses import dataclass

from wattsched import prologs
from wattsched.config import Config
from wattsched.controller.powersaving import PowerProgram
from wattsched.model import Job
from wattsched.triggers import Trigger


class Refused(Exception):
    """A request the controller refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Launch:
    job: Job


@dataclass(slots=True)
class Signal:
    job_id: int
    nodes: list[str]
    signal: int = signal_mod.SIGTERM
    batch_only: bool = False  # the batch shell alone (scancel -b, --signal=B:)
    terminate: bool = False
    step_id: int | None = None  # one step's tasks only (scancel JOB.STEP)
    full: bool = False  # the batch shell too: by default, as Slurm's, a job's steps alone (scancel -f)


@dataclass(slots=True)
class AdminProgram:
    """PrologSlurmctld or EpilogSlurmctld for a job, with Slurm's environment (run in a thread)."""

    kind: str  # "prolog" or "epilog"
    job_id: int
    path: str
    env: dict[str, str]


@dataclass(slots=True)
class Freeze:
    """Suspend (freeze) or resume (thaw) a job's processes on its nodes."""

    job_id: int
    nodes: list[str]
    frozen: bool


@dataclass(slots=True)
class SetFreq:
    """A running job's CPUs to another frequency (None: back to what they had)."""

    job_id: int
    nodes: list[str]
    khz: int | None


def admin_program(config: Config, kind: str, job: Job) -> AdminProgram:
    """PrologSlurmctld (``kind`` "prolog") or EpilogSlurmctld for a job, its environment as Slurm sets it."""
    ended = kind == "epilog"
    env = prologs.environment(
        f"{kind}_slurmctld", job_id=job.job_id, uid=job.uid, gid=job.gid, user=job.user, account=job.account,
        partition=job.partition, node_list=job.alloc.nodes_expr, job_name=job.name, cluster=config.cluster_name,
        exit_code=job.exit_code if ended else None, term_signal=job.term_signal if ended else 0)
    return AdminProgram(kind, job.job_id, config.prolog_slurmctld if kind == "prolog"
                        else config.epilog_slurmctld, env)


@dataclass(slots=True)
class Mail:
    """MailProg ``-s subject recipient`` about a job (wattsched.controller.mail), run in a thread."""

    job_id: int
    subject: str
    recipient: str
    env: dict[str, str]


@dataclass(slots=True)
class RunTrigger:
    """A fired trigger's program, run as its setter on the controller's host."""

    trigger: Trigger


Action = Launch | Signal | PowerProgram | AdminProgram | Freeze | SetFreq | RunTrigger | Mail

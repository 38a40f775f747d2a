"""JobSubmitPlugins in the controller: every submission, and every update of a job, passes the
site's rules (wattsched.plugins.job_submit) before anything else looks at it, as in Slurm; what
they change is checked again as any request is, and what they refuse is refused with their words.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from wattsched.api import JobSubmit, JobUpdate
from wattsched.auth import Identity
from wattsched.controller.actions import Refused
from wattsched.model import Job
from wattsched.plugins.job_submit.python import JobDesc, JobRec, Refusal, partition_list

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")


def on_submit(state: ClusterState, req: JobSubmit, who: Identity, gid: int) -> JobSubmit:
    """The submission as the site's job_submit rules leave it (Refused if they refuse it)."""
    if not state.plugins.job_submit:
        return req
    owner = {"user_id": who.uid, "user_name": who.user, "group_id": gid}
    return _run(state, req, owner, "job_submit", lambda desc, parts: (desc, parts, who.uid))


def on_modify(state: ClusterState, job: Job, upd: JobUpdate, who: Identity) -> JobUpdate:
    """An update of ``job`` as the site's job_modify rules leave it (Refused if they refuse it)."""
    if not state.plugins.job_submit:
        return upd
    owner = {"user_id": job.uid, "user_name": job.user, "group_id": job.gid}
    return _run(state, upd, owner, "job_modify", lambda desc, parts: (desc, JobRec(job), parts, who.uid))


def _run(state: ClusterState, req: Any, owner: dict[str, Any], function: str, arguments: Any) -> Any:
    values = req.model_dump()
    desc = JobDesc(values, owner)
    parts = partition_list(list(state.config.partitions))
    for plugin in state.plugins.job_submit:
        try:
            plugin.call(function, arguments(desc, parts))
        except Refusal as exc:
            raise Refused(str(exc)) from None
    if values == req.model_dump():
        return req
    model: type[BaseModel] = type(req)
    try:
        return model.model_validate(values)
    except ValidationError as exc:  # the rules' values are checked as a user's are
        log.error("job_submit: the site's rules set a value a request may not hold: %s", exc)
        raise Refused("Unspecified error (the site's job_submit rules set an invalid value)") from None

"""The controller's side of meeting a lowered cap (wattsched.capshed): once a second, the cap's
schedule is carried forward (a step whose time came) and, when the running jobs may draw more
than the cap in force, the steps of PowerCapShed are carried out (a job's CPUs
slowed, a job suspended, requeued or cancelled), and what was taken is given back once it fits.
A preempted job's GraceTime is cut to PowerCapShedTime, so the cluster is under its cap within
that time however long the graces. Each action is logged and kept for the dashboard and
``/v1/powercap``.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wattsched import capadmission, capshed, preemption, snapbuild, states
from wattsched.controller import capsetting, jobs, preempting, snapshots
from wattsched.controller.actions import Action, Freeze, SetFreq
from wattsched.model import Job

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")
RESEND_S = 30.0  # agents are told again what the cap holds jobs to (a lost message must not last)
_STEP_MODE = {"requeue": preemption.REQUEUE, "cancel": preemption.CANCEL}


@dataclass(frozen=True, slots=True)
class CapAction:
    """One thing the cap's shedding did, as the dashboard lists it."""

    time: float
    job_id: int
    action: str  # cpufreq, suspend, requeue, cancel, resume, restore
    khz: int | None
    watts: float
    cap: float


class CapControl:
    def __init__(self) -> None:
        self.actions: collections.deque[CapAction] = collections.deque(maxlen=500)
        self.last_resend = 0.0
        self.snap: capadmission.PowerSnap | None = None  # this second's, which the moving budget reads too

    def tick(self, state: ClusterState, now: float) -> list[Action]:
        capsetting.roll_schedule(state, now)
        snap = self.snap = snapshots.power_snap(state, now)
        if snap is None:
            return self._release_all(state, now)
        running = [snapshots.running_job(state, j) for j in state.jobs.values() if j.holds_nodes]
        if not running:
            return []
        settings = snapbuild.preempt_settings(state.config)
        sheds = capshed.shed(snap, running, state.shares.qos, settings, state.config.power_cap_shed,
                             snapshots.partition_snaps(state))
        if not sheds:
            slowed = {j.job_id: j.capping.cap_freq_before for j in state.jobs.values()
                      if j.capping.cap_slowed and j.holds_nodes}
            suspended = [j.job_id for j in state.jobs.values() if j.capping.cap_suspended and j.holds_nodes]
            sheds = capshed.restore(snap, running, state.shares.qos, slowed, suspended) if slowed or suspended \
                else []
        actions: list[Action] = []
        for item in sheds:
            job = state.jobs[item.job_id]
            actions.extend(self._apply(state, job, item, now))
            self.actions.append(CapAction(now, job.job_id, item.step, item.khz, round(item.watts, 1),
                                          snap.limit()))
            log.info("power cap", extra={"job": job.job_id, "action": item.step, "khz": item.khz,
                                         "watts": round(item.watts, 1), "cap": snap.limit()})
        if now - self.last_resend >= RESEND_S:
            self.last_resend = now
            actions.extend(_resend(state))
        return actions

    def _apply(self, state: ClusterState, job: Job, item: capshed.Shed, now: float) -> list[Action]:
        state.touch(job)
        if item.step in ("cpufreq", "restore"):
            if item.step == "cpufreq" and not job.capping.cap_slowed:
                job.capping.cap_slowed, job.capping.cap_freq_before = True, job.capping.cpu_freq_khz
            job.capping.cpu_freq_khz = item.khz
            if item.step == "restore":
                job.capping.cap_slowed, job.capping.cap_freq_before = False, None
            return [SetFreq(job.job_id, job.node_list, item.khz)]
        if item.step == "suspend":
            job.capping.cap_suspended = True
            job.suspended_at = now
            return [Freeze(job.job_id, job.node_list, True)]
        if item.step == "resume":
            job.capping.cap_suspended = False
            return jobs.thaw(state, job, now)
        # requeue or cancel: preempted, with at most PowerCapShedTime of grace
        job.preempted = _STEP_MODE[item.step]
        if job.preempted == preemption.REQUEUE and (job.request.interactive or not job.request.requeue):
            job.preempted = preemption.CANCEL
        qos = state.shares.qos.get(job.qos)
        grace = min(qos.grace_time if qos is not None else 0, state.config.power_cap_shed_time_s)
        actions: list[Action] = jobs.thaw(state, job, now) if job.suspended_at else []
        if grace > 0 and job.launched and not job.request.interactive:
            job.preempt_deadline = now + grace
            return [*actions, preempting.grace_signal(job)]
        return [*actions, *preempting.expire(state, job, now)]

    def _release_all(self, state: ClusterState, now: float) -> list[Action]:
        """Capping is off: everything the cap took is given back."""
        actions: list[Action] = []
        for job in [j for j in state.jobs.values() if j.capping.cap_suspended or j.capping.cap_slowed]:
            if job.capping.cap_suspended and job.holds_nodes:
                job.capping.cap_suspended = False
                actions.extend(jobs.thaw(state, job, now))
            if job.capping.cap_slowed and job.holds_nodes:
                capping = job.capping
                capping.cpu_freq_khz, capping.cap_slowed, capping.cap_freq_before = capping.cap_freq_before, False, None
                state.touch(job)
                actions.append(SetFreq(job.job_id, job.node_list, job.capping.cpu_freq_khz))
        return actions

    def recent(self, since: float = 0.0) -> list[dict]:
        return [{"time": a.time, "job_id": a.job_id, "action": a.action, "khz": a.khz, "watts": a.watts,
                 "cap": a.cap} for a in self.actions if a.time >= since]


def _resend(state: ClusterState) -> list[Action]:
    """What the cap holds running jobs to, told again (an agent that missed it, or restarted)."""
    actions: list[Action] = []
    for job in state.jobs.values():
        if job.state == states.RUNNING and job.cancelled_by is None:
            if job.capping.cap_slowed:
                actions.append(SetFreq(job.job_id, job.node_list, job.capping.cpu_freq_khz))
            if job.capping.cap_suspended:
                actions.append(Freeze(job.job_id, job.node_list, True))
    return actions

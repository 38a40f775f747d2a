"""What the controller saves and when: the journal of changes since the last flush (jobs,
purged jobs, node events, reservations, metadata), its commit to the state store, and the
restore of a saved state at start-up.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wattsched import energypolicy, nodestates, states
from wattsched.capschedule import CapStep
from wattsched.controller import partitions, resources, triggerctl
from wattsched.controller.reservations import ReservationBook
from wattsched.model import Job, JobScript, Node, Request, Reservation, share_strings
from wattsched.nodestates import NodeBase, PowerFlag

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState


@dataclass
class Journal:
    """What changed since the last flush: the one place the controller's writes are gathered, so
    that a request is answered only after its changes are in the store."""

    dirty: set[int] = field(default_factory=set)  # jobs to save
    purged: list[int] = field(default_factory=list)  # jobs past MinJobAge, to delete
    node_events: list[dict] = field(default_factory=list)
    resv_dirty: list[Reservation] = field(default_factory=list)
    ended_runs: list[dict] = field(default_factory=list)  # runs a requeue ended (jobend.record_run)
    gone: list[dict] = field(default_factory=list)  # jobs purged before their last change was saved
    meta_dirty: bool = False  # next ids, the power cap, token revocations, triggers, nodes' drain/down/power
    scripts: dict[int, JobScript] = field(default_factory=dict)  # new submissions' (by Job.script_id)
    scripts_dropped: list[int] = field(default_factory=list)  # scripts no job in the controller uses

    def pending(self) -> bool:
        return bool(self.dirty or self.purged or self.meta_dirty or self.node_events or self.resv_dirty
                    or self.ended_runs or self.gone or self.scripts or self.scripts_dropped)


def restore(state: ClusterState) -> None:
    """Take the saved state into a state built from the configuration: nodes' drain, down and
    power metadata, the next ids, the power cap, reservations and every job (holding its nodes'
    resources again if it holds them)."""
    store, config = state.store, state.config
    partitions.restore(state, store.get_meta("partitions", "") or "")
    saved_nodes = json.loads(store.get_meta("nodes", "{}") or "{}")
    for name, saved in saved_nodes.items():
        node = state.nodes.get(name)
        if node is not None:
            node.drain, node.reason = saved["drain"], saved["reason"]
            node.reason_time, node.reason_uid = saved.get("reason_time", 0), saved.get("reason_uid", 0)
            if saved.get("down"):
                node.base_state = NodeBase.DOWN
            node.power, node.power_since = PowerFlag(saved.get("power", "")), saved.get("power_since", 0.0)
            node.power_job = saved.get("power_job", 0)
            node.instance_id, node.instance_type = saved.get("instance_id", ""), saved.get("instance_type", "")
            node.cap_watts = saved.get("cap_watts")
            node.balance_watts = saved.get("balance_watts")
    state.next_job_id = int(store.get_meta("next_job_id", str(config.first_job_id)) or 1)
    saved_cap = store.get_meta("power_cap")
    state.power_cap = config.power_cap if saved_cap is None else json.loads(saved_cap)
    state.cap_steps = [CapStep.from_dict(s) for s in json.loads(store.get_meta("cap_schedule", "[]") or "[]")]
    state.next_cap_step = int(store.get_meta("next_cap_step", "1") or 1)
    state.token_revocations = json.loads(store.get_meta("token_revocations", "{}") or "{}")
    state.triggers = triggerctl.restore(store.get_meta("triggers", "") or "")
    state.resv = ReservationBook([Reservation.from_dict(r) for r in store.load_reservations()],
                                 int(store.get_meta("next_resv_id", "1") or 1))
    asked: dict[int, Request] = {}  # an array's request, which its pending tasks share again
    for data in store.load_jobs():
        job = Job.from_dict(data)
        share_strings(job)
        state.jobs[job.job_id] = job
        if job.array_task_id is not None:
            state.array_tasks[job.script_id] = state.array_tasks.get(job.script_id, 0) + 1
            if asked.setdefault(job.script_id, job.request) == job.request:
                job.request = asked[job.script_id]
        if "environment" in data:  # saved before scripts had a table of their own: moved there
            _move_script(state, job, data)
        if job.energy_pending:
            state.energy_due.add(job.job_id)
        if job.request.deadline and job.state == states.PENDING:
            state.with_deadline.add(job.job_id)
        if job.holds_nodes:
            resources.hold(state, job, +1)
            if resources.lent(job):  # suspended: its CPUs are not its own until it resumes
                resources.hold(state, job, -1, only_cpus=True)
        if job.submit_key:
            state.submissions.setdefault((job.uid, job.submit_key), []).append(job.job_id)


def _move_script(state: ClusterState, job: Job, data: dict) -> None:
    environment = data["environment"]
    state.journal.scripts.setdefault(job.script_id, JobScript(data.get("script"), environment))
    with contextlib.suppress(energypolicy.PolicyError):  # (checked at its submission)
        job.energy.app_model = energypolicy.declared_model(environment)
    state.touch(job)  # its row saved again without them


def save_script(state: ClusterState, jobs: list[Job], script: JobScript) -> None:
    """A submission's script and environment, saved with its jobs: one row for an array's tasks."""
    state.journal.scripts[jobs[0].script_id] = script
    if jobs[0].array_task_id is not None:
        state.array_tasks[jobs[0].script_id] = len(jobs)


def release_script(state: ClusterState, job: Job) -> None:
    """A job leaves the controller: its script and environment go too, an array's with its last task."""
    key = job.script_id
    if job.array_task_id is not None:
        left = state.array_tasks.get(key, 1) - 1
        if left > 0:
            state.array_tasks[key] = left
            return
        state.array_tasks.pop(key, None)
    state.journal.scripts.pop(key, None)
    state.journal.scripts_dropped.append(key)


def scripts(state: ClusterState, ids: set[int]) -> dict[int, JobScript]:
    """The scripts and environments of these script ids (Job.script_id): those of submissions not
    yet saved from the journal, the others from the state store."""
    found = {key: state.journal.scripts[key] for key in ids if key in state.journal.scripts}
    return found | (state.store.scripts(ids - found.keys()) if len(found) < len(ids) else {})


def node_event(state: ClusterState, node: Node, now: float, label: str, reason: str | None = None) -> None:
    """Journal a node's state change for sacctmgr show event (and save the nodes' metadata)."""
    triggerctl.note_node(state, node, label)
    state.journal.node_events.append({"node": node.name, "state": label, "time": now,
                              "reason": node.reason if reason is None else reason,
                              "uid": node.reason_uid, "cluster": state.config.cluster_name})
    state.journal.meta_dirty = True


def flush(state: ClusterState) -> None:
    """Commit the journal to the state store in one transaction, then empty it."""
    journal = state.journal
    if not journal.pending():
        return
    meta = {"next_job_id": str(state.next_job_id), "next_resv_id": str(state.resv.next_id),
            "power_cap": json.dumps(state.power_cap), "next_cap_step": str(state.next_cap_step),
            "cap_schedule": json.dumps([s.to_dict() for s in state.cap_steps]),
            "token_revocations": json.dumps(state.token_revocations)}
    if journal.meta_dirty:
        meta["nodes"] = json.dumps({
            n.name: {"drain": n.drain, "reason": n.reason, "reason_time": n.reason_time,
                     "reason_uid": n.reason_uid,
                     "down": n.base_state == NodeBase.DOWN and n.reason != nodestates.NODE_NOT_RESPONDING,
                     "power": n.power, "power_since": n.power_since, "power_job": n.power_job,
                     "instance_id": n.instance_id, "instance_type": n.instance_type, "cap_watts": n.cap_watts,
                     "balance_watts": n.balance_watts}
            for n in state.nodes.values()
            if n.drain or n.reason or n.power or n.instance_id or n.instance_type or n.cap_watts is not None
            or n.balance_watts is not None})
        meta["partitions"] = partitions.saved(state)
        meta["triggers"] = json.dumps(state.triggers.to_json())
    # made one at a time as the store writes them: an array of 100,000 tasks is never 100,000 dicts
    saved = itertools.chain((state.jobs[j].to_dict() for j in journal.dirty if j in state.jobs), journal.gone)
    state.store.commit(saved, journal.purged, meta, journal.node_events, [r.to_dict() for r in journal.resv_dirty],
                       journal.ended_runs, journal.scripts, journal.scripts_dropped)
    state.journal = Journal()


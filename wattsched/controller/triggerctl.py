"""Event triggers in the controller (strigger): setting, listing and clearing them, gathering the
events that the pure pass (wattsched.triggers) matches them against, and running the programs of
those that fire, each as the user who set it.

As Slurm's: anyone may set a trigger when the controller runs as root (the program runs as its
setter, with the setter's groups), only the controller's own user otherwise; a trigger on a job
needs the job to exist and not to have ended; a user clears only his own (root any); the program
must be an absolute path to a regular file the setter may execute, checked as the setter (root
never looks at a path a user named); a program still running after five minutes is killed with
its process group. Triggers are kept with the controller's state, so they outlive a restart and
move to a backup controller that takes over.

Events come from the node state changes the controller journals (DOWN, RESUME) and from comparing
each node's down, drained and draining conditions from one pass to the next; ``reconfig`` from
scontrol reconfigure; the database's from the accounting thread losing and regaining it (which
also stands for slurmdbd's: wattsched has none, the controller writes the accounting itself); the
controllers' from which controller held control before this one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wattsched import hostlist, states, triggers
from wattsched.api import TriggerSpec
from wattsched.auth import Identity
from wattsched.controller import permissions
from wattsched.controller.actions import Refused
from wattsched.model import Node
from wattsched.nodestates import NodeBase
from wattsched.triggers import Events, JobView, Trigger

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")

PROGRAM_S = 300  # Slurm's MAX_PROG_TIME: a trigger's program is killed after five minutes
USER_MAX = 128  # triggers one user other than root keeps (Slurm bounds only the total, by MaxJobCount)
CHECK_S = 10  # the program check run as the setter
PROGRAM_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}  # nothing of the controller's


@dataclass
class TriggerBook:
    """The triggers and what happened since the last pass (in memory: as in Slurm, events that
    happen while no controller runs are not seen)."""

    triggers: list[Trigger] = field(default_factory=list)
    next_id: int = 1
    node_events: dict[str, set[str]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    seen: dict[str, tuple[bool, bool, bool]] = field(default_factory=dict)  # each node's last conditions
    database_up: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"next_id": self.next_id, "triggers": [t.to_dict() for t in self.triggers]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TriggerBook:
        return cls([Trigger.from_dict(t) for t in data.get("triggers", [])], int(data.get("next_id", 1)))


def conditions(node: Node) -> tuple[bool, bool, bool]:
    """A node's (down, drained, draining), as trigger events compare them."""
    busy = node.base_state in (NodeBase.ALLOCATED, NodeBase.MIXED)
    return node.base_state == NodeBase.DOWN, node.drain and not busy, node.drain and busy


def note_node(state: ClusterState, node: Node, label: str) -> None:
    """A node state change the controller journals: DOWN and RESUME are events of their own (a node
    set down and back within one pass still pulls its triggers)."""
    event = {"DOWN": "down", "RESUME": "resume"}.get(label)
    if event is not None:
        state.triggers.node_events.setdefault(event, set()).add(node.name)


def note(state: ClusterState, name: str) -> None:
    """An event without nodes: reconfig, a controller's or the database's."""
    state.triggers.named.add(name)


def took_control(state: ClusterState, index: int, before: str, me: str) -> None:
    """This controller (``index`` in SlurmctldHost) took control from ``before``: a backup that takes
    over reports the primary's failure and its own control, as Slurm's backup does; the primary that
    takes control back reports so."""
    if not before or before == me:
        return
    if index > 0:
        note(state, "primary_slurmctld_failure")
        note(state, "backup_slurmctld_assumed_control")
    else:
        note(state, "primary_slurmctld_resumed_control")


def database(state: ClusterState, up: bool) -> None:
    """The accounting database as the accounting thread last found it: a change is an event."""
    if up != state.triggers.database_up:
        state.triggers.database_up = up
        for name in (("primary_database_resumed_operation", "primary_slurmdbd_resumed_operation") if up
                     else ("primary_database_failure", "primary_slurmdbd_failure")):
            note(state, name)


def _job_views(state: ClusterState, wanted: set[int], now: float) -> dict[int, JobView]:
    views = {}
    for job_id in wanted:
        job = state.jobs.get(job_id)
        if job is None:
            continue
        running = job.state == states.RUNNING
        limit = None
        if running and job.time_limit_min is not None:
            limit = job.start_time + job.suspended_s + (now - job.suspended_at if job.suspended_at else 0) \
                + job.time_limit_min * 60
        views[job_id] = JobView(ended=job.state in states.FINISHED, running=running,
                                nodes=tuple(job.alloc.alloc_cpus), limit_end=limit)
    return views


def tick(state: ClusterState, now: float) -> list[Trigger]:
    """The pass: the events since the last one (the nodes' conditions compared with the last pass's),
    the pending triggers matched against them, and the triggers due to fire, which are returned
    (their programs are the caller's to run)."""
    book = state.triggers
    if not book.triggers:  # nothing waits: no view of the nodes is kept (the first trigger takes one)
        book.node_events, book.named, book.seen = {}, set(), {}
        return []
    current = {name: conditions(node) for name, node in state.nodes.items()}
    for event, names in triggers.node_events(book.seen or current, current).items():
        book.node_events.setdefault(event, set()).update(names)
    book.seen = current
    events = Events({k: frozenset(v) for k, v in book.node_events.items()}, frozenset(book.named))
    book.node_events, book.named = {}, set()
    jobs = _job_views(state, {t.job_id for t in book.triggers if t.job_id and not t.pulled}, now)
    idle = {name: node.idle_since for name, node in state.nodes.items()
            if node.idle_since and node.base_state == NodeBase.IDLE} \
        if any("idle" in t.types and not t.pulled for t in book.triggers) else {}
    kept, dropped = triggers.pull(book.triggers, events, jobs, idle, now)
    kept, fired = triggers.due(kept, now)
    if kept != book.triggers:
        book.triggers = kept
        state.journal.meta_dirty = True
    for trig in dropped:
        log.info("trigger dropped: its job is gone", extra={"trigger": trig.trig_id, "job": trig.job_id})
    return fired


# --- requests -------------------------------------------------------------------------------------

def may_set(who: Identity) -> None:
    """Slurm's rule: a controller that is not root cannot run a program as another user, so only its
    own user may set triggers."""
    me = os.geteuid()
    if me != 0 and who.uid != me:
        raise Refused("Access/permission denied", 403)


def room(state: ClusterState, who: Identity) -> None:
    """Whether the user may keep one more trigger: root always; others while they hold fewer than
    USER_MAX and all together fewer than MaxJobCount (Slurm's bound)."""
    book = state.triggers.triggers
    if who.uid != 0 and (sum(1 for t in book if t.uid == who.uid) >= USER_MAX
                         or len(book) >= state.config.max_job_count):
        raise Refused("Resource temporarily unavailable", 503)


def check_program(program: str, uid: int, gid: int, user: str) -> bool:
    """Whether the setter may run the program: a regular file it can execute, tested by test(1) as the
    setter (blocking: called off the event loop)."""
    path = program.split()[0]
    try:
        done = subprocess.run(["test", "-f", path, "-a", "-x", path], env=PROGRAM_ENV, cwd="/",
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=CHECK_S,
                              **_as_user(uid, gid, user))
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _as_user(uid: int, gid: int, user: str) -> dict[str, Any]:
    """Popen's arguments that run a process as the user with its groups (none when this process is
    that user already)."""
    if os.geteuid() != 0 or uid == 0:
        return {}
    try:
        groups = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        groups = [gid]
    return {"user": uid, "group": gid, "extra_groups": groups}


def add(state: ClusterState, spec: TriggerSpec, who: Identity, gid: int) -> Trigger:
    """strigger --set, once the program was checked: Slurm's refusals, in its words."""
    may_set(who)
    if not triggers.valid_types(spec.res_type, spec.types):
        raise Refused(f"Invalid trigger type for {spec.res_type}: {','.join(spec.types)}")
    job_id = 0
    nodes: tuple[str, ...] = ()
    if spec.res_type == "job":
        if not spec.res_id.isdigit():
            raise Refused("Invalid job id specified")
        job_id = int(spec.res_id)
        job = state.jobs.get(job_id)
        if job is None:
            raise Refused("Invalid job id specified", 404)
        if job.state in states.FINISHED:
            raise Refused("Job/step already completing or completed", 409)
    elif spec.res_type == "node" and spec.res_id != "*":
        try:
            nodes = tuple(hostlist.expand(spec.res_id))
        except ValueError as exc:
            raise Refused("Invalid node name specified") from exc
        if not nodes or any(n not in state.nodes for n in nodes):
            raise Refused("Invalid node name specified", 404)
    room(state, who)
    book = state.triggers
    if not book.triggers:  # the first one: the nodes as they are now are what later events change
        book.seen = {name: conditions(node) for name, node in state.nodes.items()}
    trig = Trigger(trig_id=book.next_id, res_type=spec.res_type, types=tuple(dict.fromkeys(spec.types)),
                   offset=spec.offset, uid=who.uid, gid=gid, user=who.user, program=spec.program, perm=spec.perm,
                   job_id=job_id, nodes=nodes, res_id=str(job_id) if job_id else spec.res_id)
    if any(trig.same_as(t) for t in book.triggers if not t.pulled):
        raise Refused("Duplicate event trigger", 409)
    book.triggers = [*book.triggers, trig]
    book.next_id += 1
    state.journal.meta_dirty = True
    return trig


def clear(state: ClusterState, who: Identity, trig_id: int, job_id: int, uid: int | None) -> int:
    """strigger --clear: the triggers chosen by id, job or user; another user's are refused unless
    root's (or an administrator's). Returns how many went."""
    if not (trig_id or job_id or uid is not None):
        raise Refused("You must specify a --id, --jobid, or --user to clear")
    chosen = triggers.matching(state.triggers.triggers, trig_id, job_id, uid)
    admin = permissions.is_admin(state, who)
    mine = [t for t in chosen if t.uid == who.uid or admin]
    if not mine:
        raise Refused("Access/permission denied", 403) if chosen else Refused("No such process", 404)
    gone = {id(t) for t in mine}
    state.triggers.triggers = [t for t in state.triggers.triggers if id(t) not in gone]
    state.journal.meta_dirty = True
    return len(mine)


def listing(state: ClusterState) -> list[dict[str, Any]]:
    """strigger --get: the pending triggers (a pulled one is no longer shown, as in Slurm)."""
    return [{"trig_id": t.trig_id, "res_type": t.res_type, "res_id": t.res_id, "type": t.type_name,
             "types": list(t.types), "offset": t.offset, "user": t.user, "uid": t.uid,
             "flags": "PERM" if t.perm else "", "program": t.program}
            for t in state.triggers.triggers if not t.pulled]


# --- programs ---------------------------------------------------------------------------------------

@dataclass
class Runner:
    """The programs of fired triggers: started as their setters, in a session of their own, reaped as
    they end, killed with their process group after PROGRAM_S."""

    running: dict[int, tuple[subprocess.Popen, float, Trigger]] = field(default_factory=dict)

    def start(self, trig: Trigger, now: float) -> None:
        args = triggers.argv(trig)
        path = trig.program.split()[0]
        try:
            proc = subprocess.Popen(args, executable=path, env=PROGRAM_ENV, cwd="/", stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                    **_as_user(trig.uid, trig.gid, trig.user))
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("trigger program failed to start",
                        extra={"trigger": trig.trig_id, "uid": trig.uid, "error": str(exc)[:300]})
            return
        log.info("trigger program started", extra={"trigger": trig.trig_id, "uid": trig.uid, "arg": trig.arg[:200]})
        self.running[proc.pid] = (proc, now, trig)

    def reap(self, now: float) -> None:
        for pid, (proc, started, trig) in list(self.running.items()):
            code = proc.poll()
            if code is None and now - started > PROGRAM_S:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                code = proc.wait()
            if code is None:
                continue
            del self.running[pid]
            if code:
                log.info("trigger program ended", extra={"trigger": trig.trig_id, "uid": trig.uid, "status": code})


def restore(data: str) -> TriggerBook:
    """The triggers as the state store kept them (none when it kept none)."""
    return TriggerBook.from_json(json.loads(data)) if data else TriggerBook()

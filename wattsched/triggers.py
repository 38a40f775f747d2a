"""Event triggers (Slurm's strigger): what each trigger waits for, and the pass that matches the
pending ones against what happened since the last pass.

As in Slurm's trigger manager, a trigger is *pending* until its event happens, then *pulled*:
its program is due ``offset`` seconds after the event (at once for a negative offset), and is
given what the event concerned as its last argument: the nodes (a hostlist), the job id, or the
event's name. A trigger fires once and is gone, unless it is permanent (``--flags=PERM``): then a
pending copy of it, under the same id, waits for the next event. Two triggers are level tests
rather than events: ``idle`` (nodes idle for at least ``offset`` seconds) and a job's ``time``
(its time limit less than ``-offset`` seconds away); a job's ``fini`` is met by the job having
ended or being gone.

Pure: the triggers, the events and a view of the cluster in, new trigger records out; the
controller (wattsched.controller.triggerctl) gathers the events and runs the programs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wattsched import hostlist

# Slurm's trigger types by the kind of thing they concern (its strigger's --get names them so)
NODE_TYPES = ("up", "down", "drained", "draining", "idle", "resume", "reconfig")
JOB_TYPES = ("fini", "time", "up", "down")
SLURMCTLD_TYPES = ("primary_slurmctld_failure", "primary_slurmctld_resumed_control",
                   "backup_slurmctld_assumed_control")
SLURMDBD_TYPES = ("primary_slurmdbd_failure", "primary_slurmdbd_resumed_operation")
DATABASE_TYPES = ("primary_database_failure", "primary_database_resumed_operation")
RES_TYPES: dict[str, tuple[str, ...]] = {"node": NODE_TYPES, "job": JOB_TYPES, "slurmctld": SLURMCTLD_TYPES,
                                          "slurmdbd": SLURMDBD_TYPES, "database": DATABASE_TYPES}
# the node events a job's trigger may wait for on the job's own nodes
_JOB_NODE_EVENTS = ("up", "down")
OFFSET_MAX = 32000  # seconds either way, as Slurm's strigger


@dataclass(frozen=True, slots=True)
class Trigger:
    trig_id: int
    res_type: str  # node, job, slurmctld, slurmdbd or database
    types: tuple[str, ...]  # what it waits for (one or more of its res_type's)
    offset: int  # seconds after the event the program runs; idle: seconds idle; time: -seconds before the limit
    uid: int
    gid: int
    user: str
    program: str  # absolute path, then its arguments split at spaces
    perm: bool = False
    job_id: int = 0
    nodes: tuple[str, ...] = ()  # a node trigger's nodes (none: every node)
    res_id: str = ""  # as set: "*", the nodes or the job id
    pulled: bool = False
    due: float = 0.0  # when a pulled trigger's program runs
    arg: str = ""  # a pulled trigger's last argument

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trigger:
        data = dict(data)
        data["types"], data["nodes"] = tuple(data["types"]), tuple(data["nodes"])
        return cls(**data)

    @property
    def type_name(self) -> str:
        """As Slurm's trigger_type(): the one type's name ("unknown" for several together)."""
        return self.types[0] if len(self.types) == 1 else "unknown"

    def same_as(self, other: Trigger) -> bool:
        """Slurm's duplicate test: the same user, program, flags, kind, types, offset and resource."""
        return (self.uid, self.program, self.perm, self.res_type, self.types, self.offset, self.res_id) == \
            (other.uid, other.program, other.perm, other.res_type, other.types, other.offset, other.res_id)


@dataclass(frozen=True, slots=True)
class Events:
    """What happened since the last pass: the nodes of each node event, and the other events by name
    (``reconfig``, a controller's or the database's)."""

    nodes: Mapping[str, frozenset[str]] = field(default_factory=dict)  # up, down, drained, draining, resume
    named: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class JobView:
    """What a job trigger needs of its job: whether it has ended, and while it runs its nodes and
    when its time limit ends (None: no limit)."""

    ended: bool
    running: bool = False
    nodes: tuple[str, ...] = ()
    limit_end: float | None = None


def pull(triggers: Iterable[Trigger], events: Events, jobs: Mapping[int, JobView],
         idle_since: Mapping[str, float], now: float) -> tuple[list[Trigger], list[Trigger]]:
    """The pass over the pending triggers: those whose event happened are pulled; a job trigger
    whose job is gone, and that was not waiting for its end, is dropped. ``idle_since``: each idle
    node's first idle moment. Returns (the triggers kept, those dropped)."""
    kept, dropped = [], []
    for trig in triggers:
        if trig.pulled:
            kept.append(trig)
            continue
        if trig.res_type == "job":
            job = jobs.get(trig.job_id)
            if job is None and "fini" not in trig.types:
                dropped.append(trig)
                continue
            kept.append(_job_event(trig, job, events, now) or trig)
        elif trig.res_type == "node":
            kept.append(_node_event(trig, events, idle_since, now) or trig)
        else:
            happened = [name for name in trig.types if name in events.named]
            kept.append(_pulled(trig, now + trig.offset, happened[0]) if happened else trig)
    return kept, dropped


def _pulled(trig: Trigger, due: float, arg: str) -> Trigger:
    return dataclasses.replace(trig, pulled=True, due=max(due, 0.0), arg=arg)


def _job_event(trig: Trigger, job: JobView | None, events: Events, now: float) -> Trigger | None:
    if "fini" in trig.types and (job is None or job.ended):
        return _pulled(trig, now + trig.offset, str(trig.job_id))
    if job is None or job.ended or not job.running:
        return None
    if "time" in trig.types and job.limit_end is not None and job.limit_end - now <= -trig.offset:
        return _pulled(trig, now, str(trig.job_id))
    for name in _JOB_NODE_EVENTS:
        if name in trig.types and events.nodes.get(name, frozenset()) & set(job.nodes):
            return _pulled(trig, now + trig.offset, str(trig.job_id))
    return None


def _node_event(trig: Trigger, events: Events, idle_since: Mapping[str, float], now: float) -> Trigger | None:
    for name in trig.types:
        if name == "idle":
            hit = {node for node, since in idle_since.items() if now - since >= trig.offset}
            due = now
        elif name == "reconfig":
            if "reconfig" in events.named:
                return _pulled(trig, now + trig.offset, "reconfig")
            continue
        else:
            hit, due = set(events.nodes.get(name, frozenset())), now + trig.offset
        if trig.nodes:
            hit &= set(trig.nodes)
        if hit:
            return _pulled(trig, due, hostlist.compress(sorted(hit)))
    return None


def due(triggers: Iterable[Trigger], now: float) -> tuple[list[Trigger], list[Trigger]]:
    """The pulled triggers whose time has come fire; a permanent one leaves a pending copy of itself
    (its nodes and offset as set). Returns (the triggers kept, those that fire)."""
    kept, fired = [], []
    for trig in triggers:
        if trig.pulled and trig.due <= now:
            fired.append(trig)
            if trig.perm:
                kept.append(dataclasses.replace(trig, pulled=False, due=0.0, arg=""))
        else:
            kept.append(trig)
    return kept, fired


def argv(trig: Trigger) -> list[str]:
    """The program's command line, as Slurm's trigger manager builds it: the program's words split at
    spaces (its name alone as argv[0]), then what the event concerned: 63 words at most, the
    program's own first."""
    words = trig.program.split()
    line = [words[0].rsplit("/", 1)[-1], *words[1:63]]
    return [*line, trig.arg] if len(line) < 63 else line


def matching(triggers: Iterable[Trigger], trig_id: int = 0, job_id: int = 0, uid: int | None = None) -> list[Trigger]:
    """strigger --clear's selection: by id, by job, by user, or several of them together."""
    return [t for t in triggers if (not trig_id or t.trig_id == trig_id) and (not job_id or t.job_id == job_id)
            and (uid is None or t.uid == uid)]


def node_events(before: Mapping[str, tuple[bool, bool, bool]],
                after: Mapping[str, tuple[bool, bool, bool]]) -> dict[str, set[str]]:
    """Node events read from two views of the nodes, each node's (down, drained, draining): a node
    that left DOWN is ``up``; one that became DOWN, DRAINED or DRAINING is so. A node absent from
    ``before`` (added since) has no event."""
    found: dict[str, set[str]] = {"up": set(), "down": set(), "drained": set(), "draining": set()}
    for name, (down, drained, draining) in after.items():
        old = before.get(name)
        if old is None:
            continue
        if old[0] and not down:
            found["up"].add(name)
        for event, was, now_ in (("down", old[0], down), ("drained", old[1], drained),
                                 ("draining", old[2], draining)):
            if now_ and not was:
                found[event].add(name)
    return found


def valid_types(res_type: str, types: Collection[str]) -> bool:
    return bool(types) and res_type in RES_TYPES and set(types) <= set(RES_TYPES[res_type])

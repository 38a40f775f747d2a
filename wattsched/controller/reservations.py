"""Advanced reservations: ``scontrol create|update|delete reservation`` with Slurm's keys and
messages, the choice of nodes for ``NodeCnt=``, the rolling of DAILY and WEEKLY reservations,
and the snapshots the scheduling core sees.

Pure functions of the request, the cluster's records and ``now``; the controller stores the
results. Rules, as in Slurm: only administrators manage reservations; a reservation needs
Users or Accounts (MAINT ones default to the creator); its nodes may not be in another
reservation at the same time unless one of them has MAINT or OVERLAP; without IGNORE_JOBS,
nodes still busy with jobs at the start time are refused ("Requested nodes are busy"), or
avoided when the nodes are chosen by count; a reservation in use by running jobs cannot be
deleted.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping

from wattsched import capadmission, hostlist, states, timefmt
from wattsched.api import ReservationSpec
from wattsched.model import Job, Node, Reservation
from wattsched.nodestates import NodeBase
from wattsched.scheduling.records import PartitionSnap, ResvSnap

FLAGS = ("MAINT", "IGNORE_JOBS", "HOURLY", "DAILY", "WEEKDAY", "WEEKEND", "WEEKLY", "FLEX", "OVERLAP", "SPEC_NODES",
         "LICENSE_ONLY", "REPLACE", "REPLACE_DOWN", "PURGE_COMP")
PURGE_COMP_S = 300  # PURGE_COMP without a time: Slurm's five minutes
# Slurm's recurring reservations: the step from one occurrence to the next; WEEKDAY and WEEKEND
# ones are daily occurrences that fall on Monday-Friday, or Saturday-Sunday (local time)
_ROLL_S = {"HOURLY": 3600, "DAILY": 86400, "WEEKDAY": 86400, "WEEKEND": 86400, "WEEKLY": 7 * 86400}
_WEEK_S = 7 * 86400
_FOREVER_S = 365 * 86400  # Duration=UNLIMITED: Slurm's one year


class ReservationError(ValueError):
    """A reservation request Slurm would refuse; the message is Slurm's wording."""


def _flags(text: str, current: Iterable[str] = ()) -> tuple[list[str], int | None]:
    """``MAINT,IGNORE_JOBS``; on update ``+DAILY`` adds and ``-DAILY`` removes a flag. Returns the
    flags and PURGE_COMP's time in seconds where given (``PURGE_COMP=5``: minutes, or any Slurm
    duration; alone, five minutes)."""
    result, purge = list(current), None
    for raw in filter(None, (f.strip().upper() for f in text.split(","))):
        sign, name = (raw[0], raw[1:]) if raw[0] in "+-" else ("", raw)
        name, equals, value = name.partition("=")
        if name not in FLAGS or (equals and name != "PURGE_COMP"):
            raise ReservationError(f"Invalid reservation flag: {raw}")
        if name == "PURGE_COMP" and sign != "-":
            try:
                minutes = timefmt.parse_duration_min(value) if equals else None
            except timefmt.TimeFormatError as exc:
                raise ReservationError(f"Invalid reservation flag: {raw}") from exc
            purge = PURGE_COMP_S if minutes is None else minutes * 60
        if sign == "-":
            result = [f for f in result if f != name]
        elif name not in result:
            result.append(name)
    recurring = [f for f in result if f in _ROLL_S]
    if len(recurring) > 1:
        raise ReservationError(f"Invalid reservation flag: {' and '.join(recurring)} together")
    return result, purge


def _step(resv: Reservation) -> int:
    """Seconds from one occurrence to the next (0: it does not recur)."""
    return next((s for flag, s in _ROLL_S.items() if flag in resv.flags), 0)


def _falls(resv: Reservation, start: float) -> bool:
    """Whether an occurrence starting at ``start`` is one of a WEEKDAY or WEEKEND reservation's."""
    weekday = time.localtime(start).tm_wday  # Monday 0
    return not (("WEEKDAY" in resv.flags and weekday >= 5) or ("WEEKEND" in resv.flags and weekday < 5))


def _first_start(resv: Reservation, since: float) -> float:
    """The start of the reservation's first step that ends after ``since`` (its own start where it
    does not recur, or has not yet ended), found without walking the steps before it."""
    step = _step(resv)
    if not step or resv.end_time > since:
        return resv.start_time
    return resv.start_time + (int((since - resv.end_time) // step) + 1) * step


def occurrences(resv: Reservation, since: float, until: float) -> list[tuple[float, float]]:
    """The reservation's windows that end after ``since`` and start before ``until``: its one, or
    those of a recurring one."""
    step, length = _step(resv), resv.end_time - resv.start_time
    start, found = _first_start(resv, since), []
    while start < until:
        if start + length > since and _falls(resv, start):
            found.append((start, start + length))
        if not step:
            break
        start += step
    return found


def overlap(one: Reservation, other: Reservation) -> bool:
    """Whether any window of one meets any window of the other. Only windows from the later start
    on can meet; recurring ones go on forever, but all their steps divide a week, so two weeks past
    the later start hold every combination; a one-off is met, if at all, before its end."""
    since = max(one.start_time, other.start_time)
    until = since + 2 * _WEEK_S + max(one.end_time - one.start_time, other.end_time - other.start_time)
    for resv in (one, other):
        if not _step(resv):
            until = min(until, resv.end_time)
    mine, theirs = occurrences(one, since, until), occurrences(other, since, until)
    return any(s1 < e2 and s2 < e1 for s1, e1 in mine for s2, e2 in theirs)


def _features(text: str) -> list[frozenset[str]]:
    """Slurm's reservation Features as alternatives (``|``) of features all required (``&``); empty,
    none. Counts and brackets (``[a*2&b]``) are refused."""
    if any(c in text for c in "[]*()"):
        raise ReservationError(f"Invalid feature specification: {text} (counts and brackets are not supported)")
    alternatives = [frozenset(f for f in part.split("&") if f) for part in text.split("|")] if text else []
    if any(not alt for alt in alternatives):
        raise ReservationError(f"Invalid feature specification: {text}")
    return alternatives


def _has_features(node: Node, alternatives: list[frozenset[str]]) -> bool:
    return not alternatives or any(alt <= set(node.features) for alt in alternatives)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _window(spec: ReservationSpec, now: float, start: float | None, end: float | None) -> tuple[float, float]:
    """Start and end from StartTime, EndTime and Duration (given ones win over ``start``/``end``)."""
    try:
        if spec.start_time:
            start = timefmt.parse_time(spec.start_time, now)
        if start is None:
            raise ReservationError("StartTime must be specified")
        if spec.duration:
            minutes = timefmt.parse_duration_min(spec.duration)
            end = start + (minutes * 60 if minutes is not None else _FOREVER_S)
        elif spec.end_time:
            end = timefmt.parse_time(spec.end_time, now)
        elif end is not None and spec.start_time:
            pass  # a new start keeps the old end, as in Slurm
        if end is None:
            raise ReservationError("Duration or EndTime must be specified")
    except timefmt.TimeFormatError as exc:
        raise ReservationError("Invalid time specified") from exc
    if end <= start:
        raise ReservationError("Invalid time specified")
    return start, end


def _refuse_in_use(name: str, jobs: Iterable[Job]) -> None:
    if any(j.reservation == name and j.holds_nodes for j in jobs):
        raise ReservationError("Requested reservation is in use")


def _busy_until(nodes: Iterable[str], jobs: Iterable[Job], now: float) -> dict[str, float]:
    """Per node, when its running jobs will have ended at the latest (inf: no time limit)."""
    wanted = set(nodes)
    until: dict[str, float] = {}
    for job in jobs:
        if not job.holds_nodes:
            continue
        end = job.start_time + job.time_limit_min * 60 if job.time_limit_min is not None else float("inf")
        if job.state == states.COMPLETING:
            end = now
        for name in job.alloc.alloc_cpus:
            if name in wanted:
                until[name] = max(until.get(name, 0.0), end)
    return until


class ReservationBook:
    """The cluster's reservations and the rules for changing them."""

    def __init__(self, reservations: Iterable[Reservation] = (), next_id: int = 1):
        self.by_name: dict[str, Reservation] = {r.name: r for r in reservations}
        self.next_id = next_id

    # --- views -------------------------------------------------------------------------------

    def snapshots(self) -> dict[str, ResvSnap]:
        return {r.name: ResvSnap(r.name, r.start_time, r.end_time, frozenset(r.nodes),
                                 frozenset(r.users), frozenset(r.accounts), frozenset(r.flags))
                for r in self.by_name.values() if r.nodes}

    def power_snapshots(self) -> tuple[capadmission.PowerResv, ...]:
        return tuple(capadmission.PowerResv(r.name, r.start_time, r.end_time, r.watts)
                     for r in self.by_name.values() if r.watts)

    def active_on(self, now: float) -> dict[str, Reservation]:
        """Node name -> the active reservation holding it (MAINT ones win, for node states)."""
        result: dict[str, Reservation] = {}
        for resv in self.by_name.values():
            if resv.active(now):
                for name in resv.nodes:
                    if name not in result or "MAINT" in resv.flags:
                        result[name] = resv
        return result

    # --- changes -----------------------------------------------------------------------------

    def create(self, spec: ReservationSpec, creator: str, now: float, nodes: Mapping[str, Node],
               partitions: Mapping[str, PartitionSnap], default_partition: str,
               jobs: Iterable[Job]) -> Reservation:
        name = spec.name or f"{creator}_{self.next_id}"
        if name in self.by_name:
            raise ReservationError(f"Reservation {name} already exists")
        flags, purge = _flags(spec.flags)
        start, end = _window(spec, now, None, None)
        users, accounts = _names(spec.users), _names(spec.accounts)
        if not users and not accounts:
            if "MAINT" not in flags:
                raise ReservationError("Either Users and/or Accounts must be specified.  No reservation created.")
            users = [creator]
        partition = spec.partition or default_partition
        if partition and partition not in partitions:
            raise ReservationError("Invalid partition name specified")
        _features(spec.features or "")
        resv = Reservation(resv_id=self.next_id, name=name, start_time=start, end_time=end, users=users,
                           accounts=accounts, partition=partition, flags=flags, created=now, watts=spec.watts,
                           features=spec.features or "", purge_comp_s=purge or 0)
        if spec.nodes or spec.node_cnt:
            resv.nodes = self._pick_nodes(resv, spec, nodes, partitions, partition, jobs, now)
        elif spec.watts is None:
            raise ReservationError("Nodes, NodeCnt or Watts must be specified.  No reservation created.")
        self.next_id += 1
        self.by_name[name] = resv
        return resv

    def update(self, name: str, spec: ReservationSpec, now: float, nodes: Mapping[str, Node],
               partitions: Mapping[str, PartitionSnap], default_partition: str,
               jobs: Iterable[Job]) -> Reservation:
        resv = self._get(name)
        if spec.name and spec.name != name:
            raise ReservationError("Reservation name can not be changed")
        flags, purge = _flags(spec.flags, resv.flags)
        start, end = _window(spec, now, resv.start_time, resv.end_time)
        changed = Reservation.from_dict(resv.to_dict())
        changed.start_time, changed.end_time, changed.flags = start, end, flags
        changed.purge_comp_s = 0 if "PURGE_COMP" not in flags else purge or changed.purge_comp_s or PURGE_COMP_S
        if spec.users:
            changed.users = _names(spec.users)
        if spec.accounts:
            changed.accounts = _names(spec.accounts)
        if spec.partition:
            if spec.partition not in partitions:
                raise ReservationError("Invalid partition name specified")
            changed.partition = spec.partition
        if spec.watts is not None:
            changed.watts = spec.watts
        if spec.skip:
            self._skip(changed, jobs)
        if spec.features is not None:
            _features(spec.features)
            changed.features = spec.features
        if spec.nodes or spec.node_cnt:
            changed.nodes = self._pick_nodes(changed, spec, nodes, partitions,
                                             changed.partition or default_partition, jobs, now)
        else:
            self._check_overlap(changed, changed.nodes)
        self.by_name[name] = changed
        return changed

    @staticmethod
    def _skip(resv: Reservation, jobs: Iterable[Job]) -> None:
        """``skip``: a recurring reservation moves from its coming (or current) occurrence to the
        one after, as Slurm's; one in use by running jobs stays, as it cannot be deleted either."""
        step = _step(resv)
        if not step:
            raise ReservationError("Reservation given is not skipable, try deleting instead")
        _refuse_in_use(resv.name, jobs)
        start = resv.start_time + step
        while not _falls(resv, start):
            start += step
        resv.start_time, resv.end_time = start, start + resv.end_time - resv.start_time

    def delete(self, name: str, jobs: Iterable[Job]) -> Reservation:
        resv = self._get(name)
        _refuse_in_use(name, jobs)
        del self.by_name[name]
        resv.deleted = True
        return resv

    def roll(self, now: float) -> tuple[list[Reservation], list[Reservation]]:
        """Past reservations: recurring ones move on to their next occurrence, the others end.
        Returns (moved, ended)."""
        moved, ended = [], []
        for name, resv in list(self.by_name.items()):
            if resv.end_time > now:
                continue
            step = _step(resv)
            if step:
                start = _first_start(resv, now)
                while not _falls(resv, start):  # WEEKDAY, WEEKEND: on to a day of theirs
                    start += step
                resv.start_time, resv.end_time = start, start + resv.end_time - resv.start_time
                moved.append(resv)
            else:
                del self.by_name[name]
                resv.deleted = True
                ended.append(resv)
        return moved, ended

    # --- helpers -----------------------------------------------------------------------------

    def maintain(self, nodes: Mapping[str, Node], partitions: Mapping[str, PartitionSnap],
                 jobs: Collection[Job], now: float) -> tuple[list[Reservation], list[Reservation]]:
        """As Slurm's: a reservation of NodeCnt nodes (not MAINT, not given its nodes by name) has
        those that are down, drained or not responding replaced by usable ones of its partition
        where there are (with REPLACE, also those its jobs run on: its pool of idle nodes stays
        whole); and PURGE_COMP: one without a job waiting or running in it for its time is deleted.
        Returns (changed, deleted)."""
        changed: list[Reservation] = []
        deleted: list[Reservation] = []
        tending = [r for r in self.by_name.values() if "PURGE_COMP" in r.flags
                   or (r.nodes and not {"SPEC_NODES", "MAINT"} & set(r.flags))]
        for resv in tending:
            if "PURGE_COMP" in resv.flags and resv.active(now):
                if any(j.reservation == resv.name and j.state not in states.FINISHED for j in jobs):
                    resv.idle_since = now  # (kept in memory only: not worth a write every second)
                elif now - max(resv.idle_since, resv.start_time) >= resv.purge_comp_s:
                    del self.by_name[resv.name]
                    resv.deleted = True
                    deleted.append(resv)
                    continue
            if resv.nodes and not {"SPEC_NODES", "MAINT"} & set(resv.flags) and \
                    self._replace_nodes(resv, nodes, partitions, jobs, now):
                changed.append(resv)
        return changed, deleted

    def _replace_nodes(self, resv: Reservation, nodes: Mapping[str, Node],
                       partitions: Mapping[str, PartitionSnap], jobs: Collection[Job],
                       now: float) -> bool:
        """Swap the reservation's unusable nodes for usable ones; whether any was swapped. Runs every
        second: the jobs are read only once a node is to be replaced."""
        replace_busy = "REPLACE" in resv.flags and resv.active(now)
        allocated = {n for n in resv.nodes if replace_busy and n in nodes and nodes[n].alloc_cpus}

        def usable(name: str) -> bool:
            node = nodes.get(name)
            return node is not None and not (node.drain or node.base_state == NodeBase.DOWN or node.not_responding)

        gone = [n for n in resv.nodes if not usable(n) or n in allocated]
        part = partitions.get(resv.partition)
        if not gone or part is None:
            return False
        taken = {n for other in self._overlapping(resv) for n in other.nodes} | set(resv.nodes)
        busy = {} if "IGNORE_JOBS" in resv.flags else _busy_until(part.nodes, jobs, now)
        wanted = _features(resv.features)
        spare = sorted((nodes[n] for n in part.nodes if n in nodes and n not in taken and usable(n)
                        and busy.get(n, 0.0) <= resv.start_time and _has_features(nodes[n], wanted)),
                       key=lambda n: n.weight)
        swaps = list(zip(gone, spare, strict=False))
        for old, new in swaps:
            resv.nodes[resv.nodes.index(old)] = new.name
        return bool(swaps)

    def _get(self, name: str) -> Reservation:
        resv = self.by_name.get(name)
        if resv is None:
            raise ReservationError("Requested reservation is invalid")
        return resv

    def _check_overlap(self, resv: Reservation, names: Iterable[str]) -> None:
        wanted = set(names)
        for other in self._overlapping(resv):
            if not wanted.isdisjoint(other.nodes):
                raise ReservationError("Requested reservation overlaps with another reservation")

    def _overlapping(self, resv: Reservation) -> list[Reservation]:
        """Other reservations in the same time whose nodes this one may not share."""
        if {"MAINT", "OVERLAP"} & set(resv.flags):
            return []
        return [o for o in self.by_name.values() if o.name != resv.name and not {"MAINT", "OVERLAP"} & set(o.flags)
                and overlap(resv, o)]

    def _pick_nodes(self, resv: Reservation, spec: ReservationSpec, nodes: Mapping[str, Node],
                    partitions: Mapping[str, PartitionSnap], partition: str, jobs: Iterable[Job],
                    now: float) -> list[str]:
        jobs = [j for j in jobs if j.reservation != resv.name]
        if spec.nodes:
            if spec.nodes.upper() == "ALL":
                names = list(partitions[partition].nodes if spec.partition else nodes)
            else:
                try:
                    names = hostlist.expand(spec.nodes, len(nodes))
                except hostlist.HostlistError as exc:
                    raise ReservationError("Invalid node name specified") from exc
            unknown = [n for n in names if n not in nodes]
            if unknown:
                raise ReservationError(f"Invalid node name specified: {unknown[0]}")
            wanted = _features(resv.features)
            if any(not _has_features(nodes[n], wanted) for n in names):
                raise ReservationError("Requested node configuration is not available")
            if "SPEC_NODES" not in resv.flags:
                resv.flags.append("SPEC_NODES")
            self._check_overlap(resv, names)
            if "IGNORE_JOBS" not in resv.flags and "MAINT" not in resv.flags:
                busy = _busy_until(names, jobs, now)
                if any(until > resv.start_time for until in busy.values()):
                    raise ReservationError("Requested nodes are busy")
            return names
        part = partitions.get(partition)
        if part is None:
            raise ReservationError("No partition specified or system default partition")
        wanted = _features(resv.features)
        if (spec.node_cnt or 0) > sum(1 for n in part.nodes if n in nodes and _has_features(nodes[n], wanted)):
            raise ReservationError("Requested node configuration is not available")
        taken = {n for other in self._overlapping(resv) for n in other.nodes}
        busy = {} if "IGNORE_JOBS" in resv.flags else _busy_until(part.nodes, jobs, now)
        usable = [nodes[n] for n in part.nodes if n in nodes and n not in taken and busy.get(n, 0.0) <= resv.start_time
                  and not nodes[n].drain and nodes[n].base_state != NodeBase.DOWN and _has_features(nodes[n], wanted)]
        usable.sort(key=lambda n: n.weight)  # stable: name order within a weight, for compact hostlists
        if len(usable) < (spec.node_cnt or 0):
            raise ReservationError("Requested nodes are busy")
        return [n.name for n in usable[:spec.node_cnt]]


def show(resv: Reservation, nodes: Mapping[str, Node], now: float) -> dict:
    """The reservation as the API returns it (scontrol and sinfo format it)."""
    cores = sum(nodes[n].cpus for n in resv.nodes if n in nodes)
    return {
        "name": resv.name, "id": resv.resv_id, "start_time": resv.start_time, "end_time": resv.end_time,
        "duration_s": resv.end_time - resv.start_time, "nodes": hostlist.compress(resv.nodes) if resv.nodes else "",
        "node_cnt": len(resv.nodes), "core_cnt": cores, "partition": resv.partition,
        "users": resv.users, "accounts": resv.accounts, "watts": resv.watts, "features": resv.features,
        "flags": [f"PURGE_COMP={timefmt.elapsed_str(resv.purge_comp_s)}" if f == "PURGE_COMP" else f
                  for f in resv.flags], "purge_comp_s": resv.purge_comp_s,
        "state": "ACTIVE" if resv.active(now) else "INACTIVE",
        "tres": f"cpu={cores}" if cores else "",
    }

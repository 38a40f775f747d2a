"""The controller's side of the moving budget (PowerPlugin=power/balance, wattsched.powerbalance):
every PowerParameters balance_interval seconds while a cap is in force, the busy nodes' hardware
limits are moved by their measured draw within what the cap leaves them, and each node's agent is
told its limit with its next heartbeat reply (noded.powerlimits). A node no longer busy is given
its site's own settings back; with the plugin off, or capping off, every limit it set is lifted.
The limits are kept with the controller's state: one that restarts orders them again at once, and
a node not yet heard from keeps its own until it is.

Each running job is shown the most its nodes may draw under their limits, the budget's or an
administrator's (:meth:`BudgetControl.follow_jobs`: scontrol show job, sacct MinCapWatts).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from wattsched import capadmission, powerbalance

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger("wattsched.controller")
FRESH_READINGS = 3  # a reading older than this many AcctGatherNodeFreq is no measure of the node's draw


class BudgetControl:
    def __init__(self) -> None:
        self.balanced_at = 0.0
        self.cap = 0.0  # the cap the last balance met
        self.since: dict[str, float] = {}  # when each node's limit last changed
        # whether any node may have a limit of the budget's (at the start: those kept with the state)
        self.limited = True
        self.jobs_limited: set[int] = set()  # the jobs shown a limit

    def tick(self, state: ClusterState, snap: capadmission.PowerSnap | None, now: float) -> None:
        """``snap``: the cap's snapshot of this second (CapControl's; None: capping off)."""
        config = state.config
        params = config.power_parameters
        if config.power_plugin != "power/balance" or snap is None:
            if self.limited:  # once, not every second: a site without the plugin pays nothing
                for node in state.nodes.values():
                    node.balance_watts = None
                self.limited = False
                state.journal.meta_dirty = True
            return
        if now - self.balanced_at < params.balance_interval and snap.limit() == self.cap:
            return  # (a cap that changed is met at once, not at the next interval)
        self.balanced_at, self.cap = now, snap.limit()
        started: dict[str, float] = {}
        for job in state.jobs.values():
            if job.holds_nodes:
                for name in job.alloc.alloc_cpus:
                    started[name] = max(started.get(name, 0.0), job.start_time)
        busy = {name for name in started if snap.states.get(name) == "busy"}
        # a node holding a job but not counted busy now (not yet heard from since the controller
        # started, say) keeps the limit it has: lifting it would let it draw what the cap did not count
        kept = {name: state.nodes[name].balance_watts for name in started
                if state.nodes[name].balance_watts is not None
                and (name not in busy or state.nodes[name].counted_limit is None)}
        busy -= set(kept)  # (nor is one whose limit is on its way: the cap counts it at the limit sent)
        others = sum(snap.nodes[n].watts(snap.states[n]) for n in snap.nodes if n not in busy and n not in kept)
        reserved = sum(r.watts for r in snap.reservations if r.start <= now <= r.end)
        budget = snap.limit() - others - reserved - sum(w for w in kept.values() if w is not None)
        interval = float(max(1, config.acct_gather_node_freq_s))
        stale_s = FRESH_READINGS * interval
        nodes = {}
        for name in busy:
            node = state.nodes[name]
            fresh = bool(node.energy_samples) and not node.energy_error \
                and now - node.energy_samples[-1][0] <= stale_s
            top = float(node.max_watts or node.idle_watts or 0)
            if node.cap_watts is not None:
                top = min(top, node.cap_watts)
            # the order reaches the agent with a heartbeat reply, and a reading covers the interval
            # before it: one taken two intervals after the change measures the new limit alone
            settled = fresh and node.energy_samples[-1][0] >= self.since.get(name, 0.0) + 2 * interval
            nodes[name] = powerbalance.BusyNode(name, float(node.idle_watts or 0), top, node.balance_watts,
                                                node.current_watts if fresh else None, started[name], settled)
        limits = powerbalance.balance(budget, nodes, params, now)
        limits.update({name: float(watts) for name, watts in kept.items() if watts is not None})
        for node in state.nodes.values():
            limit = math.floor(limits[node.name]) if node.name in limits else None  # whole watts, within the budget
            if limit != node.balance_watts:
                self.since[node.name] = now
                # kept with the state: a controller that restarts orders them again, rather than
                # lifting for a heartbeat limits the cap's admission counted on
                state.journal.meta_dirty = True
            node.balance_watts = limit
        self.limited = bool(limits)
        if limits:
            log.debug("power budget balanced", extra={"budget": round(budget), "nodes": len(limits),
                                                      "limits": round(sum(limits.values()))})

    def follow_jobs(self, state: ClusterState) -> None:
        """Each running job's limit: its CPUs' share of each of its nodes' limits (the most a node
        without one may draw, MaxWatts, for the others), while one of them at least is limited;
        the lowest it has been, kept for accounting."""
        limited = {n.name: n.ordered_limit for n in state.nodes.values()
                   if n.cap_watts is not None or n.balance_watts is not None}
        if not limited and not self.jobs_limited:
            return  # (a site without limits pays one look at its nodes a second)
        shown: set[int] = set()
        for job in state.jobs.values():
            watts = None
            if job.holds_nodes and any(name in limited for name in job.alloc.alloc_cpus):
                watts = 0.0
                for name, cpus in job.alloc.alloc_cpus.items():
                    node = state.nodes[name]
                    most = limited.get(name)
                    watts += (float(node.max_watts or node.idle_watts or 0) if most is None else most) * \
                        cpus / max(1, node.cpus)
                watts = float(round(watts))
                shown.add(job.job_id)
            if watts != job.capping.cap_watts:
                job.capping.cap_watts = watts
                if watts is not None and (job.capping.min_cap_watts is None or watts < job.capping.min_cap_watts):
                    job.capping.min_cap_watts = watts
                state.touch(job, request_changed=False)
        self.jobs_limited = shown

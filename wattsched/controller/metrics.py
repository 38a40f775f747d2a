"""The controller's Prometheus metrics (``/metrics``), built from the live state at each scrape.

Names are Slurm 25.11's metrics/openmetrics names where Slurm has the figure (``slurm_jobs_pending``,
``slurm_partition_jobs_running{partition}``, ``slurm_nodes_idle``, ``slurm_bf_cycle_cnt``,
``slurm_slurmdbd_queue_size`` ...), grouped as Slurm groups them under ``/metrics/jobs``,
``/metrics/nodes``, ``/metrics/partitions``, ``/metrics/scheduler`` and ``/metrics/jobs-users-accts``.
``/metrics`` serves all of them at once (what a Prometheus scrape config points at; Slurm's
``/metrics`` lists the endpoints instead). Energy and power are ours, named by Prometheus'
conventions (``wattsched_*``, units in the name, ``_total`` counters in joules).

``/metrics/limits`` (ours) has every QOS and association limit that is set, and what is held
or used against it now (``wattsched_limit`` and ``wattsched_limit_used``, labelled by owner,
limit and TRES): an energy budget is ``wattsched_limit{limit="GrpTRESMins",tres="energy"}``, and
what remains of it the difference. The cap's shedding counts its actions by kind.

Counters count from the controller's start (Prometheus' ``increase()`` and ``rate()`` handle the
reset of a restart): energy per user, account and partition adds each job's energy when it is
final; power-saving switches count switch commands; the energy power saving saved adds
(IdleWatts - PowerSaveWatts) for each node while it is powered down, accrued at each timer tick
(the full account with switching costs is ``wattsched power report``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wattsched import capadmission, limits, states
from wattsched.controller import acctpolicy, capsetting, snapshots
from wattsched.model import Job
from wattsched.nodestates import NodeBase

CATEGORIES = ("jobs", "nodes", "partitions", "scheduler", "jobs-users-accts", "energy", "limits")
# the limits exported with what is held or used against them (wattsched_limit, wattsched_limit_used)
_LIMIT_USE = {"grp_tres": "tres", "grp_tres_mins": "tres_mins", "grp_tres_run_mins": "tres_run_mins"}
# the job states Slurm's metrics count, and the metric word for each
_JOB_WORDS = {states.PENDING: "pending", states.RUNNING: "running", states.COMPLETING: "completing",
              states.COMPLETED: "completed", states.CANCELLED: "cancelled", states.FAILED: "failed",
              states.TIMEOUT: "timeout", states.NODE_FAIL: "node_failed", states.OUT_OF_MEMORY: "outofmemory",
              states.CONFIGURING: "configuring", states.SUSPENDED: "suspended", states.DEADLINE: "deadline"}
_NODE_WORDS = ("alloc", "idle", "mixed", "down", "drain", "drained", "draining", "completing", "unknown",
               "noresp", "powered_down", "powering_up", "powering_down", "power_down")


def node_words(node) -> list[str]:
    """The Slurm node counts a node is in (a node may be in several: drain and idle, say)."""
    words = {NodeBase.IDLE: ["idle"], NodeBase.ALLOCATED: ["alloc"], NodeBase.MIXED: ["mixed"],
             NodeBase.DOWN: ["down"], NodeBase.UNKNOWN: ["unknown"]}.get(node.base_state, [])
    if node.drain:
        words += ["drain", "draining" if node.alloc_cpus else "drained"]
    if node.not_responding:
        words.append("noresp")
    if node.power:
        words.append(node.power.lower())
    return words


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


class ControllerCollector(Collector):
    """Yields the families of some categories from a controller (see :data:`CATEGORIES`)."""

    def __init__(self, state, categories: Iterable[str] = CATEGORIES):
        self.state = state
        self.categories = tuple(categories)

    def collect(self) -> Iterator[Metric]:
        state = self.state
        jobs = list(state.jobs.values())
        for category in self.categories:
            yield from getattr(self, "_" + category.replace("-", "_"))(state, jobs)

    # --- /metrics/jobs -----------------------------------------------------------------------------

    def _jobs(self, state, jobs: list[Job]) -> Iterator[Metric]:
        counts = Counter(j.shown_state for j in jobs)
        yield _gauge("slurm_jobs", "Total number of jobs", len(jobs))
        for st, word in _JOB_WORDS.items():
            yield _gauge(f"slurm_jobs_{word}", f"Number of jobs in {st.title()} state", counts.get(st, 0))
        yield _gauge("slurm_jobs_hold", "Number of jobs in Hold state", sum(bool(j.hold) for j in jobs))
        holding = [j for j in jobs if j.holds_nodes]
        yield _gauge("slurm_jobs_cpus_alloc", "Total number of CPUs allocated by jobs",
                     sum(sum(j.alloc.alloc_cpus.values()) for j in holding))
        yield _gauge("slurm_jobs_nodes_alloc", "Total number of nodes allocated by jobs",
                     sum(len(j.alloc.alloc_cpus) for j in holding))
        yield _gauge("slurm_jobs_memory_alloc", "Total memory bytes allocated by jobs",
                     sum(j.alloc.alloc_mem_mb * len(j.alloc.alloc_cpus) for j in holding) * 1024 * 1024)
        reasons = GaugeMetricFamily("wattsched_jobs_pending_by_reason", "Pending jobs by the reason they wait",
                                    labels=["reason"])
        for reason, count in sorted(Counter(j.reason for j in jobs if j.state == states.PENDING).items()):
            reasons.add_metric([reason], count)
        yield reasons

    # --- /metrics/jobs-users-accts -----------------------------------------------------------------

    def _jobs_users_accts(self, state, jobs: list[Job]) -> Iterator[Metric]:
        for who, attr in (("user", "user"), ("account", "account")):
            label = "username" if who == "user" else "account"
            families = {word: GaugeMetricFamily(f"slurm_{who}_jobs_{word}", f"Jobs in {word} state by {who}",
                                                labels=[label]) for word in ("pending", "running")}
            cpus = GaugeMetricFamily(f"slurm_{who}_jobs_cpus_alloc", f"CPUs allocated to jobs by {who}",
                                     labels=[label])
            counts = Counter((getattr(j, attr), j.state) for j in jobs)
            alloc: Counter[str] = Counter()
            for j in jobs:
                if j.holds_nodes:
                    alloc[getattr(j, attr)] += sum(j.alloc.alloc_cpus.values())
            for name in sorted({getattr(j, attr) for j in jobs if j.state in (states.PENDING, states.RUNNING)}):
                families["pending"].add_metric([name], counts.get((name, states.PENDING), 0))
                families["running"].add_metric([name], counts.get((name, states.RUNNING), 0))
                cpus.add_metric([name], alloc.get(name, 0))
            yield from families.values()
            yield cpus

    # --- /metrics/nodes ----------------------------------------------------------------------------

    def _nodes(self, state, jobs: list[Job]) -> Iterator[Metric]:
        nodes = list(state.nodes.values())
        counts = Counter(word for n in nodes for word in node_words(n))
        yield _gauge("slurm_nodes", "Total number of nodes", len(nodes))
        for word in _NODE_WORDS:
            yield _gauge(f"slurm_nodes_{word}", f"Number of nodes in {word} state", counts.get(word, 0))
        per_node = {name: GaugeMetricFamily(name, doc, labels=["node"]) for name, doc in (
            ("slurm_node_cpus", "Total number of CPUs in the node"),
            ("slurm_node_cpus_alloc", "Allocated CPUs in the node"),
            ("slurm_node_cpus_idle", "Idle CPUs in the node"),
            ("slurm_node_memory_bytes", "Total memory in bytes of the node"),
            ("slurm_node_memory_alloc_bytes", "Bytes allocated to jobs in the node"))}
        for n in nodes:
            for name, value in (("slurm_node_cpus", n.cpus), ("slurm_node_cpus_alloc", n.alloc_cpus),
                                ("slurm_node_cpus_idle", n.cpus - n.alloc_cpus),
                                ("slurm_node_memory_bytes", n.real_memory_mb * 1048576),
                                ("slurm_node_memory_alloc_bytes", n.alloc_mem_mb * 1048576)):
                per_node[name].add_metric([n.name], value)
        yield from per_node.values()

    # --- /metrics/partitions -----------------------------------------------------------------------

    def _partitions(self, state, jobs: list[Job]) -> Iterator[Metric]:
        parts = state.config.partitions
        yield _gauge("slurm_partitions", "Total number of partitions", len(parts))
        by_part = Counter((j.partition, j.shown_state) for j in jobs)
        totals = Counter(j.partition for j in jobs)
        cpus_alloc: Counter[str] = Counter()
        for j in jobs:
            if j.holds_nodes:
                cpus_alloc[j.partition] += sum(j.alloc.alloc_cpus.values())
        families: dict[str, GaugeMetricFamily] = {}

        def add(name: str, doc: str, part: str, value: float) -> None:
            families.setdefault(name, GaugeMetricFamily(name, doc, labels=["partition"])).add_metric([part], value)

        for part in parts:
            add("slurm_partition_jobs", "Number of jobs in this partition", part.name, totals.get(part.name, 0))
            for st, word in _JOB_WORDS.items():
                add(f"slurm_partition_jobs_{word}", f"Number of jobs in {st.title()} state", part.name,
                    by_part.get((part.name, st), 0))
            add("slurm_partition_jobs_cpus_alloc", "Total number of CPUs allocated by jobs", part.name,
                cpus_alloc.get(part.name, 0))
            members = [state.nodes[n] for n in part.nodes if n in state.nodes]
            add("slurm_partition_nodes", "Partition total nodes", part.name, len(members))
            add("slurm_partition_cpus", "Partition total CPUs", part.name, sum(n.cpus for n in members))
            add("slurm_partition_nodes_cpus_alloc", "Number of allocated CPUs", part.name,
                sum(n.alloc_cpus for n in members))
            add("slurm_partition_nodes_cpus_idle", "Number of idle CPUs on all nodes", part.name,
                sum(n.cpus - n.alloc_cpus for n in members if not n.drain and n.base_state in
                    (NodeBase.IDLE, NodeBase.MIXED)))
            words = Counter(word for n in members for word in node_words(n))
            for word in ("alloc", "idle", "mixed", "down", "drain", "powered_down", "powering_up"):
                add(f"slurm_partition_nodes_{word}", f"Nodes in {word} state", part.name, words.get(word, 0))
        yield from families.values()

    # --- /metrics/scheduler ------------------------------------------------------------------------

    def _scheduler(self, state, jobs: list[Job]) -> Iterator[Metric]:
        s = state.stats
        for name, doc, value in (
                ("slurm_schedule_cycle_cnt", "Scheduling cycle count", s.cycles),
                ("slurm_schedule_cycle_last", "Last scheduling cycle time (microseconds)", s.last_ms * 1000),
                ("slurm_schedule_cycle_max", "Max scheduling cycle time (microseconds)", s.max_ms * 1000),
                ("slurm_schedule_cycle_tot", "Sum of scheduling cycle times (microseconds)", s.total_ms * 1000),
                ("slurm_sched_mean_cycle", "Mean scheduling cycle time (microseconds)",
                 s.total_ms * 1000 / max(1, s.cycles)),
                ("slurm_sched_mean_depth_cycle", "Mean depth of scheduling cycles", s.depth_total / max(1, s.cycles)),
                ("slurm_schedule_queue_len", "Jobs pending queue length", s.depth),
                ("slurm_sdiag_jobs_started", "Jobs started since reset", s.started),
                ("slurm_bf_cycle_cnt", "Backfill cycle count", s.bf_cycles),
                ("slurm_bf_cycle_last", "Last backfill cycle time (microseconds)", s.bf_last_ms * 1000),
                ("slurm_bf_cycle_max", "Max backfill cycle time (microseconds)", s.bf_max_ms * 1000),
                ("slurm_bf_cycle_tot", "Sum of backfill cycle times (microseconds)", s.bf_total_ms * 1000),
                ("slurm_bf_mean_cycle", "Mean backfill cycle time (microseconds)",
                 s.bf_total_ms * 1000 / max(1, s.bf_cycles)),
                ("slurm_backfilled_jobs", "Total backfilled jobs since reset", s.bf_backfilled),
                ("slurm_last_backfilled_jobs", "Backfilled jobs since last cycle", s.bf_last_backfilled),
                ("slurm_bf_last_depth", "Last backfill depth", s.bf_last_depth),
                ("slurm_bf_depth_mean", "Mean backfill cycle depth", s.bf_depth_total / max(1, s.bf_cycles)),
                ("slurm_bf_queue_len", "Backfill queue length", s.bf_queue_len),
                ("slurm_bf_when_last_cycle", "Timestamp of last backfill cycle", s.bf_last_time),
                ("slurm_slurmdbd_queue_size", "Accounting records not yet in the database", state.store.backlog())):
            yield _gauge(name, doc, value)
        yield CounterMetricFamily("wattsched_accounting_rejected_records", "Accounting records the database refused",
                                  value=state.store.rejected_count())

    # --- energy and power (ours) -------------------------------------------------------------------

    def _energy(self, state, jobs: list[Job]) -> Iterator[Metric]:
        figures = capadmission.summary(snapshots.node_power(state), snapshots.power_states(state))
        metered = [n for n in state.nodes.values() if n.energy_samples]
        yield _gauge("wattsched_cluster_power_watts", "Power the metered nodes draw now (sum of their last readings)",
                     sum(n.current_watts for n in metered))
        yield _gauge("wattsched_cluster_modelled_power_watts",
                     "Power of the nodes by the power model (IdleWatts/MaxWatts by state), as PowerCap counts it",
                     figures["current_watts"])
        yield _gauge("wattsched_adjusted_max_watts", "AdjustedMaxWatts: the most the cluster may draw in its state",
                     figures["adjusted_max_watts"])
        cap = capsetting.cap_in_force(state, time.time())
        if cap is not None:
            yield _gauge("wattsched_power_cap_watts", "The power cap in force (+Inf: INFINITE)", cap)
        watts = GaugeMetricFamily("wattsched_node_power_watts", "The node's last power reading", labels=["node"])
        joules = CounterMetricFamily("wattsched_node_energy_joules", "The node's energy counter", labels=["node"])
        age = GaugeMetricFamily("wattsched_node_energy_reading_age_seconds", "Seconds since the node's last reading",
                                labels=["node"])
        now = time.time()
        for n in metered:
            watts.add_metric([n.name], n.current_watts)
            joules.add_metric([n.name], n.consumed_joules)
            age.add_metric([n.name], max(0.0, now - n.energy_samples[-1][0]))
        yield from (watts, joules, age)
        limits = GaugeMetricFamily("wattsched_node_power_limit_watts",
                                   "The limit the node's hardware is to hold it to (CapWatts), and whether it does",
                                   labels=["node", "held"])
        for n in state.nodes.values():
            if n.ordered_limit is not None:
                limits.add_metric([n.name, "yes" if n.held_limit is not None else "no"], n.ordered_limit)
        yield limits
        held = GaugeMetricFamily("wattsched_job_power_limit_watts",
                                 "The most a running job's nodes may draw under their power limits (its share of each)",
                                 labels=["job_id", "user", "account", "partition"])
        for j in jobs:
            if j.capping.cap_watts is not None and j.holds_nodes:
                held.add_metric([str(j.job_id), j.user, j.account, j.partition], j.capping.cap_watts)
        yield held
        ended = GaugeMetricFamily("wattsched_job_energy_joules",
                                  "Energy of each ended job the controller still holds (for MinJobAge)",
                                  labels=["job_id", "user", "account", "partition"])
        for j in jobs:
            if j.energy.consumed_energy_j is not None and j.state in states.FINISHED:
                ended.add_metric([str(j.job_id), j.user, j.account, j.partition], j.energy.consumed_energy_j)
        yield ended
        totals = state.energy_totals
        for who, counts in (("user", totals.by_user), ("account", totals.by_account),
                            ("partition", totals.by_partition)):
            family = CounterMetricFamily(f"wattsched_{who}_energy_joules",
                                         f"Energy of the jobs that ended since the controller started, by {who}",
                                         labels=[who])
            for name, value in sorted(counts.items()):
                family.add_metric([name], value)
            yield family
        saver = state.power_saving
        switches = CounterMetricFamily("wattsched_power_save_switches", "Nodes switched by power saving",
                                       labels=["direction"])
        switches.add_metric(["off"], saver.switched_off)
        switches.add_metric(["on"], saver.switched_on)
        yield switches
        shed = CounterMetricFamily("wattsched_power_cap_shed_actions", "What meeting a lowered cap did, by kind",
                                   labels=["action"])
        for action, count in sorted(Counter(a.action for a in state.cap.actions).items()):
            shed.add_metric([action], count)
        yield shed
        yield CounterMetricFamily("wattsched_power_save_saved_joules",
                                  "Energy saved while nodes were powered down: IdleWatts - PowerSaveWatts",
                                  value=saver.saved_joules(now))


    # --- /metrics/limits -----------------------------------------------------------------------------

    def _limits(self, state, jobs: list[Job]) -> Iterator[Metric]:
        labels = ["owner", "account", "user", "qos", "limit", "tres"]
        limit = GaugeMetricFamily("wattsched_limit", "A QOS or association limit that is set (TRES-minutes limits "
                                  "of energy in joules, power in watts)", labels=labels)
        used = GaugeMetricFamily("wattsched_limit_used", "What is held (GrpTRES, GrpJobs) or used in the period "
                                 "(GrpTRESMins) against the limit", labels=labels)
        if state.shares.qos:
            view = acctpolicy.manager_view(state, time.time())
            for row in view["associations"]:
                self._limit_rows(limit, used, ["assoc", row["account"], row["user"], ""], row)
            for row in view["qos"]:
                self._limit_rows(limit, used, ["qos", "", "", row["name"]], row)
        yield from (limit, used)

    @staticmethod
    def _limit_rows(limit: GaugeMetricFamily, used: GaugeMetricFamily, owner: list[str], row: dict) -> None:
        usage = row["usage"]
        for field_name, kind in _LIMIT_USE.items():
            for tres, value in row["limits"].get(field_name, {}).items():
                name = next(k.header for k in limits.QOS_KEYS if k.field == field_name)
                limit.add_metric([*owner, name, tres], value)
                used.add_metric([*owner, name, tres], usage[kind].get(tres, 0.0))
        for field_name, name, kind in (("grp_jobs", "GrpJobs", "jobs"), ("grp_submit", "GrpSubmit", "submitted")):
            if field_name in row["limits"]:
                limit.add_metric([*owner, name, ""], row["limits"][field_name])
                used.add_metric([*owner, name, ""], usage[kind])

"""The cluster's power and energy in virtual time: what each node draws in what it is doing
(computing: IdleWatts plus each job's dynamic watts at its clock and its user's energy factor; idle;
off at PowerSaveWatts; switching at SwitchOnWatts / SwitchOffWatts), the joules it has drawn, each
job's watts and energy, and how fast a job runs at the clock its frequency or its node's limit
holds it to (cpufreq.runtime_factor, its energy factor taken as its busy share). Every change of a
node's draw is passed on to the cap's meter (simulator.capmeter).

A job's pace changing under a node's limit moves its end: ``reschedule`` is the engine's, which
keeps the clock and the events."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wattsched import cpufreq, powermodel
from wattsched.capadmission import NodePower
from wattsched.config import Config
from wattsched.simulator.capmeter import CapMeter
from wattsched.simulator.records import CATEGORIES, COMPUTING, IDLE, OFF, SWITCHING_ON, JobRecord, SimNode

# what a job's accounted energy (the one EnergyFairShare charges) follows: its nodes' power model,
# or its CPU-seconds (Georgiou et al. 2015's simulations)
ENERGY_MODELS = ("node", "cpu")


class ClusterPower:
    """The nodes' draws and energy, the jobs' watts, energy and pace (see the module docstring)."""

    def __init__(self, config: Config, nodes: Mapping[str, SimNode], records: Mapping[int, JobRecord],
                 node_power: dict[str, NodePower], energy_model: str, meter: CapMeter,
                 reschedule: Callable[[JobRecord, float], None]):
        if energy_model not in ENERGY_MODELS:
            raise ValueError(f"unknown energy model {energy_model!r}: one of {', '.join(ENERGY_MODELS)}")
        self.nodes = nodes
        self.records = records
        self.energy_model = energy_model
        self.meter = meter
        self.reschedule = reschedule
        self.node_power = node_power  # each node's power model at its own clock (snapbuild.node_power)
        self.f_max = {n.name: max(cpufreq.ladder(n.cpu_freq_watts)) for n in config.nodes}
        self.energy = dict.fromkeys(CATEGORIES, 0.0)  # joules by what the nodes were doing

    def start(self, now: float) -> float:
        """Every node idle from ``now``; the cluster's draw then."""
        for node in self.nodes.values():
            node.since = node.idle_since = now
            node.watts = self.watts(node)
        return sum(n.watts for n in self.nodes.values())

    # --- nodes --------------------------------------------------------------------------------------

    def set_category(self, node: SimNode, category: str, now: float) -> None:
        """The node does ``category`` from ``now`` (or draws anew in it): its energy counted so far."""
        self.account(node, now)
        node.category = category
        before, node.watts = node.watts, self.watts(node)
        self.meter.add(now, node.watts - before)

    def account(self, node: SimNode, now: float) -> None:
        joules = node.watts * (now - node.since)
        self.energy[node.category] += joules
        node.joules += joules
        node.since = now

    def watts(self, node: SimNode) -> float:
        conf = node.conf
        idle = float(conf.idle_watts or 0)
        if node.category == COMPUTING:
            return idle + sum(node.draws.values())
        if node.category == IDLE:
            return idle
        if node.category == OFF:
            return float(self.node_power[conf.name].save)
        return conf.switching.on_watts if node.category == SWITCHING_ON else conf.switching.off_watts

    def refresh(self, node: SimNode, now: float) -> None:
        """The node's clock under its limit for the load it carries now, and its jobs' watts and
        pace at that clock."""
        conf = node.conf
        f_max = self.f_max[conf.name]
        load = sum(self.records[j].job.energy_factor * node.jobs[j] / conf.cpus for j in node.draws)
        khz = powermodel.limited_khz(conf, f_max, f_max, node.limit, load) if node.limit is not None else f_max
        node.khz = khz if khz < f_max else None
        idle = float(conf.idle_watts or 0)
        for job_id in node.draws:
            record = self.records[job_id]
            cpus = node.jobs[job_id]
            node.draws[job_id] = self.job_watts(node, record, cpus) - idle * cpus / conf.cpus
            self.charge(record, now)
            record.watts = self.node_watts_of(record)
            pace = self.pace_of(record)
            if pace != record.pace:
                self.progress(record, now)
                record.pace = pace
                self.reschedule(record, now)
        self.set_category(node, COMPUTING if node.draws else IDLE, now)

    # --- jobs ---------------------------------------------------------------------------------------

    def draw(self, record: JobRecord, now: float) -> None:
        """The job's nodes draw its watts from now (it starts, or resumes)."""
        job_id = record.job.job_id
        record.watts_since = now
        for name in record.alloc:
            node = self.nodes[name]
            if node.limit is not None:  # its clock, and so everyone's watts and pace there, follow the load
                node.draws[job_id] = 0.0
                self.refresh(node, now)
                continue
            cpus = node.jobs[job_id]
            node.draws[job_id] = self.job_watts(node, record, cpus) - \
                float(node.conf.idle_watts or 0) * cpus / node.conf.cpus
            self.set_category(node, COMPUTING, now)  # the watts of one more job
        record.watts = self.node_watts_of(record)

    def progress(self, record: JobRecord, now: float) -> None:
        """Its run done up to ``now``, at its pace (none while suspended)."""
        if record.suspended_at < 0:
            record.done_s += (now - record.pace_since) * record.pace
        record.pace_since = now

    def charge(self, record: JobRecord, now: float) -> None:
        """Its energy counted up to ``now`` at its watts since the last change."""
        record.energy_j += record.watts * (now - record.watts_since)
        record.watts_since = now

    def node_watts_of(self, record: JobRecord) -> float:
        return sum(self.job_watts(self.nodes[n], record, cpus) for n, cpus in record.alloc_cpus.items())

    def job_power(self, record: JobRecord) -> float:
        """A running job's watts: with the "cpu" energy model (Georgiou et al. 2015) its CPUs at
        MaxWatts per CPU times its user's energy factor, else its parts of its nodes' watts."""
        if self.energy_model == "cpu":
            return sum(cpus * (self.nodes[n].conf.max_watts or 0) / self.nodes[n].conf.cpus
                       for n, cpus in record.alloc_cpus.items()) * record.job.energy_factor
        return sum(self.job_watts(self.nodes[n], record, cpus) for n, cpus in record.alloc_cpus.items())

    def job_watts(self, node: SimNode, record: JobRecord, cpus: int) -> float:
        """A job's part of its node's watts: its share of idle, and of the dynamic watts at its
        frequency (or the slower clock the node's limit holds it to), scaled by its user's energy
        factor."""
        conf = node.conf
        idle = float(conf.idle_watts or 0)
        if node.khz is None:
            busy = float(self.node_power[conf.name].busy_at(record.freq_khz))
        else:
            khz = min(node.khz, record.freq_khz or node.khz)
            busy = cpufreq.busy_watts(khz, self.f_max[conf.name], idle, float(conf.max_watts or idle),
                                      conf.cpu_freq_watts)
        return (idle + (busy - idle) * record.job.energy_factor) * cpus / conf.cpus

    def pace_of(self, record: JobRecord) -> float:
        """How fast the job runs: at the pace of its slowest node."""
        return min(self._speed(self.nodes[n], record) for n in record.alloc)

    def _speed(self, node: SimNode, record: JobRecord) -> float:
        """How fast the job runs on this node: at its clock (its own, --power-fit, or the node's
        limit's), the share of its time it computes (its energy factor) slowed, the rest not."""
        f_max = self.f_max[node.conf.name]
        khz = min(node.khz or f_max, record.freq_khz or f_max)
        if khz >= f_max:
            return 1.0
        return 1.0 / cpufreq.runtime_factor(khz, f_max, min(1.0, record.job.energy_factor))

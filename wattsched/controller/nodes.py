"""The nodes' side: agents' heartbeats (registration, events, energy readings, lost jobs),
DOWN and DRAIN and their reasons, scontrol update nodename, and scontrol reconfigure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wattsched import nodestates, states
from wattsched.api import AgentHeartbeat, JobUsage, NodeReport
from wattsched.auth import Identity
from wattsched.config import RESTART_ONLY, Config, ConfigError, NodeConf
from wattsched.controller import (
    capsetting,
    jobend,
    jobenergy,
    launching,
    permissions,
    powersavecontrol,
    snapshots,
    statesave,
    steps,
)
from wattsched.controller.actions import Action, Refused
from wattsched.controller.carbonfeed import CarbonFeed
from wattsched.model import Job, Node
from wattsched.nodestates import NodeBase, PowerFlag

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState, Plugins

log = logging.getLogger("wattsched.controller")


def reconfigure(state: ClusterState, config: Config, plugins: Plugins, now: float) -> list[str]:
    """``scontrol reconfigure``: take a re-read configuration without losing a job. New nodes and
    partitions, changed node sizes and parameters apply at once; a setting that needs a restart,
    a node removed while a job holds it or shrunk below what its jobs hold is refused (Refused,
    nothing changed). Returns what changed."""
    for key, attr in RESTART_ONLY.items():
        if getattr(config, attr) != getattr(state.config, attr):
            raise Refused(f"{key} cannot change without restarting the controller "
                          f"({getattr(state.config, attr)!r} -> {getattr(config, attr)!r})", 409)
    try:
        file_steps = capsetting.read_schedule_file(config, now)
    except ConfigError as exc:
        raise Refused(str(exc), 409) from exc
    wanted = {conf.name: conf for conf in config.nodes}
    for name, have in state.nodes.items():
        conf = wanted.get(name)
        if conf is None and (have.alloc_cpus or any(name in j.alloc.completing_nodes for j in state.jobs.values())):
            raise Refused(f"Node {name} cannot be removed while it runs jobs", 409)
        if conf is not None and (conf.cpus < have.alloc_cpus or conf.real_memory_mb < have.alloc_mem_mb
                                 or any(i >= len(conf.gpus) for i in have.alloc_gpus)):
            raise Refused(f"Node {name} cannot shrink below what its jobs hold", 409)
    changes = []
    for name in [n for n in state.nodes if n not in wanted]:
        del state.nodes[name]
        changes.append(f"node {name} removed")
    member = config.node_partitions()
    for name, conf in wanted.items():
        node = state.nodes.get(name)
        if node is None:
            state.nodes[name] = new_node(conf, member.get(name, ()), now)
            changes.append(f"node {name} added")
            continue
        fields = configured_fields(conf, member.get(name, ()))
        if any(getattr(node, k) != v for k, v in fields.items()):
            for key, value in fields.items():
                setattr(node, key, value)
            node.refresh_base_state()
            changes.append(f"node {name} changed")
    old_parts = {p.name: p for p in state.config.partitions}
    changes += [f"partition {p.name} {'added' if p.name not in old_parts else 'changed'}"
                for p in config.partitions if old_parts.get(p.name) != p]
    new_parts = {p.name for p in config.partitions}
    changes += [f"partition {name} removed" for name in old_parts if name not in new_parts]
    before = dict(state.config.as_pairs())
    changes += [f"{key} changed" for key, value in config.as_pairs() if value != before.get(key)]
    if config.power_cap != state.config.power_cap:
        state.power_cap = config.power_cap
        state.journal.meta_dirty = True
    state.cap_file_steps = file_steps
    if config.carbon_intensity != state.config.carbon_intensity:
        state.carbon = CarbonFeed(config) if config.carbon_intensity else None
    state.config, state.plugins = config, plugins
    state.configured_partitions = config.partitions  # what scontrol changed in them is gone
    assert state.power_saving is not None
    state.power_saving.reconfigure(config)
    # every memo of the old configuration goes
    state.memo = snapshots.Memos()
    state.journal.meta_dirty = True
    return changes


def power_limits(state: ClusterState, hb: AgentHeartbeat) -> dict[str, float | None]:
    """The limits an agent's nodes are to be held at: each limited node's, again at every
    heartbeat (a real node's packages follow what the rest of it draws), and None for a node
    still held to one no longer ordered."""
    ordered: dict[str, float | None] = {}
    for report in hb.nodes:
        node = state.nodes.get(report.name)
        if node is not None and (node.ordered_limit is not None or report.power_limit_w is not None
                                 or report.power_limit_error):
            ordered[node.name] = node.ordered_limit
    return ordered


def heartbeat(state: ClusterState, hb: AgentHeartbeat,
              now: float) -> tuple[list[int], dict[str, list[int]], list[Action]]:
    """Register or refresh an agent's nodes; returns (acked events, jobs to kill on each node, actions)."""
    actions: list[Action] = []
    acked = []
    for event in hb.events:
        if event.step_id == "batch":
            ending = state.jobs.get(event.job_id)
            if event.policy is not None and ending is not None and ending.state == states.RUNNING:
                policy_report(ending, event.policy)
            actions.extend(jobend.batch_ended(state, event, now))
        elif event.step_id in ("prolog", "epilog"):
            actions.extend(launching.agent_script_ended(state, event, now))
        else:
            steps.step_ended(state, event, now)
        acked.append(event.job_id)
    ended = {e.job_id for e in hb.events if e.step_id == "batch"}
    to_kill: dict[str, list[int]] = {}
    by_host: dict[str, list[Job]] = {}
    woken = False
    if hb.nodes:
        for job in state.jobs.values():
            if job.state == states.RUNNING and job.launched:
                by_host.setdefault(job.alloc.batch_host, []).append(job)
    for report in hb.nodes:
        node = state.nodes.get(report.name)
        if node is None:
            continue
        if not node.registered and not node.alloc_cpus and not node.power:
            node.idle_since = first_idle(state, node, now)
        node.agent_url, node.last_seen, node.boot_time = hb.agent_url, now, hb.boot_time
        node.registered = True
        node.energy_error = report.energy_error
        node.limit_watts, node.limit_error = report.power_limit_w, report.power_limit_error
        if report.energy is not None:
            node.add_energy_sample(report.energy.time, report.energy.joules, report.energy.watts,
                                   {u.job_id: u.cpu_s for u in report.jobs},
                                   {u.job_id: u.gpu_j for u in report.jobs if u.gpu_j})
        job_usage_report(state, report)
        woken |= node_up(state, node, report, now)
        if node.not_responding:
            node.not_responding = False
            if node.base_state == NodeBase.DOWN and node.reason == nodestates.NODE_NOT_RESPONDING and \
                    state.config.return_to_service >= 1:
                node.base_state, node.reason = NodeBase.IDLE, ""
                statesave.node_event(state, node, now, "IDLE")
            if node.base_state == NodeBase.UNKNOWN:
                node.base_state = NodeBase.IDLE
            node.refresh_base_state()
        running = set(report.running_jobs)
        for job_id in running:
            held = state.jobs.get(job_id)
            if held is None or held.state not in (states.RUNNING, states.COMPLETING) or \
                    report.name not in held.alloc.alloc_cpus:
                to_kill.setdefault(report.name, []).append(job_id)
        for job in by_host.get(report.name, []):
            if job.state == states.RUNNING and job.job_id not in running and job.job_id not in ended \
                    and hb.boot_time > job.start_time:
                log.warning("job lost by its node agent", extra={"job": job.job_id, "node": report.name})
                actions.extend(jobend.node_failed_job(state, job, now))
    if woken:
        actions.extend(launching.configured(state, now))
    if hb.nodes and state.energy_due:
        jobend.end_settled(state, jobenergy.account_energy(state, now))
    return acked, to_kill, actions


def job_usage_report(state: ClusterState, report: NodeReport) -> None:
    """Running jobs' CPU frequency as their nodes report it (sacct/sstat AveCPUFreq), and their
    energy policies' signatures and choices."""
    for usage in report.jobs:
        job = state.jobs.get(usage.job_id)
        if job is None or job.state != states.RUNNING:
            continue
        energy = job.energy
        if usage.cpu_freq_khz:
            energy.freq_reports += 1
            energy.ave_cpu_freq_khz += round((usage.cpu_freq_khz - energy.ave_cpu_freq_khz) / energy.freq_reports)
        if usage.cpi:  # a signature: its means, and the policy's latest choice
            energy.sig_reports += 1
            n = energy.sig_reports
            energy.sig_cpi += (usage.cpi - energy.sig_cpi) / n
            energy.sig_gbs += (usage.gbs - energy.sig_gbs) / n
            energy.sig_memory_bound += (usage.memory_bound - energy.sig_memory_bound) / n
        policy_report(job, usage)


def policy_report(job: Job, usage: JobUsage) -> None:
    """The energy policy's latest choice for the job, as a node reports it."""
    if usage.policy_khz:
        job.energy.policy_freq_khz = usage.policy_khz
        job.energy.pred_time_factor, job.energy.pred_energy_factor = usage.time_factor, usage.energy_factor


def first_idle(state: ClusterState, node: Node, now: float) -> float:
    """When a node's idle time starts at its first registration. Nodes that register in the start-up
    wave (within SlurmdTimeout of the controller making them; ``last_seen`` holds that moment until
    then) are idle since then, all alike, so power saving takes them in the configured order and
    not in the order their agents happened to come up; a node that comes later is idle from now."""
    made = node.last_seen
    return made if now - made <= state.config.slurmd_timeout_s else now


def node_up(state: ClusterState, node: Node, report: NodeReport, now: float) -> bool:
    """Whether a node powering up has come up: its agent reports it on since the resume began."""
    if node.power != PowerFlag.POWERING_UP or report.power != "on" or report.up_since < node.power_since:
        return False
    statesave.node_event(state, node, now, "POWERED_UP", f"job {node.power_job}" if node.power_job else "")
    node.power, node.power_job = PowerFlag.NONE, 0
    return True


def update_nodes(state: ClusterState, names: list[str], new_state: str, reason: str, who: Identity,
                 now: float, instance: tuple[str | None, str | None] = (None, None),
                 cap_watts: str | None = None) -> list[Action]:
    """scontrol update NodeName=: a new state (with its reason), and or the instance id and type,
    and or the watts its hardware holds it to (``CapWatts``, ours: a number, or NONE to lift it)."""
    if not permissions.is_admin(state, who):
        raise Refused("Access/permission denied", 403)
    unknown = [n for n in names if n not in state.nodes]
    if unknown:
        raise Refused(f"Invalid node name specified: {unknown[0]}", 404)
    if new_state in ("drain", "down") and not reason:
        raise Refused("You must specify a reason when DOWNING or DRAINING a node. Request denied")
    if cap_watts is not None:
        limit = _cap_watts(cap_watts)
        for name in names:
            floor = state.nodes[name].idle_watts or 0
            if limit is not None and limit < floor:
                raise Refused(f"CapWatts={limit:g} is under {name}'s IdleWatts ({floor}): no hardware holds "
                              "a node under what it draws idle")
        for name in names:
            state.nodes[name].cap_watts = limit
        state.journal.meta_dirty = True
    instance_id, instance_type = instance
    if instance != (None, None):  # kept with the saved node records
        for name in names:
            node = state.nodes[name]
            node.instance_id = node.instance_id if instance_id is None else instance_id
            node.instance_type = node.instance_type if instance_type is None else instance_type
        state.journal.meta_dirty = True
    if new_state.startswith("power_"):
        return powersavecontrol.power_command(state, names, new_state, now)
    actions: list[Action] = []
    for name in names:
        node = state.nodes[name]
        if not new_state:
            continue
        if new_state == "drain":
            node.drain, node.reason, node.reason_time, node.reason_uid = True, reason, now, who.uid
            statesave.node_event(state, node, now, "DRAIN")
        elif new_state == "down":
            actions.extend(jobend.node_down(state, node, reason, now, uid=who.uid))
        else:  # resume / idle / undrain
            node.drain = False
            if node.base_state == NodeBase.DOWN and not node.not_responding:
                node.base_state = NodeBase.IDLE
            node.reason, node.reason_time = "", now
            node.refresh_base_state()
            statesave.node_event(state, node, now, "RESUME")
    state.journal.meta_dirty = True
    return actions


def configured_fields(conf: NodeConf, partitions: tuple[str, ...]) -> dict:
    """A node's fields that come from the configuration (the rest is its live state)."""
    return dict(cpus=conf.cpus, real_memory_mb=conf.real_memory_mb, sockets=conf.sockets,
                cores_per_socket=conf.cores_per_socket, threads_per_core=conf.threads_per_core, weight=conf.weight,
                tmp_disk_mb=conf.tmp_disk_mb, hostname=conf.node_hostname or conf.name,
                address=conf.node_addr or conf.node_hostname or conf.name, port=conf.port or 0,
                features=conf.features, partitions=partitions, idle_watts=conf.idle_watts, max_watts=conf.max_watts,
                power_save_watts=conf.power_save_watts, down_watts=conf.down_watts,
                power_cap_priority=conf.power_cap_priority, cpu_freq_watts=conf.cpu_freq_watts, gres=conf.gres,
                gpus=conf.gpus)


def new_node(conf: NodeConf, partitions: tuple[str, ...], now: float) -> Node:
    node = Node(name=conf.name, last_seen=now, **configured_fields(conf, partitions))
    if conf.state in ("DOWN", "DRAIN", "FUTURE"):
        node.base_state = NodeBase.FUTURE if conf.state == "FUTURE" else NodeBase.UNKNOWN
        node.drain = conf.state == "DRAIN"
        if conf.state == "DOWN":
            node.base_state, node.reason = NodeBase.DOWN, "Configured DOWN"
    return node


def _cap_watts(text: str) -> float | None:
    """CapWatts= as given: watts, or NONE (n/a, INFINITE, 0) for the site's own settings."""
    if text.strip().lower() in ("none", "n/a", "infinite", "unlimited", "0", ""):
        return None
    try:
        watts = float(text)
    except ValueError:
        watts = -1.0
    if not 0 < watts < 1e7 or watts != watts:
        raise Refused(f"Invalid CapWatts value: {text}")
    return watts

"""What the controller must have before it starts or takes a re-read configuration: its plugins,
loaded by their Slurm-style names and checked (a wrong one is a StartupError naming the file),
and its state, built from the configuration and what the state store kept."""

from __future__ import annotations

import os

from wattsched import config as config_mod
from wattsched.controller import capsetting, nodes, statesave
from wattsched.controller.carbonfeed import CarbonFeed
from wattsched.controller.powersaving import PowerSaving
from wattsched.controller.state import ClusterState, Plugins
from wattsched.controller.store import StateStore
from wattsched.plugins import PluginError, load, scheduling


class StartupError(RuntimeError):
    """The controller cannot start with this configuration."""


def load_plugins(config: config_mod.Config) -> Plugins:
    try:
        priority, scheduler, select = scheduling(config)
        PowerSaving(config)  # a wrong PowerSaveType or PowerSaveParameters stops the start here
        site = os.path.dirname(os.path.abspath(config.source))
        job_submit = tuple(load(name, config_dir=site) for name in config.job_submit_plugins)
        return Plugins(priority=priority, scheduler=scheduler, select=select, job_submit=job_submit)
    except (PluginError, ValueError) as exc:
        raise StartupError(f"{config.source}: {exc}") from exc


def open_state(config: config_mod.Config, store: StateStore, plugins: Plugins, key: bytes, now: float) -> ClusterState:
    """The controller's state: the configured nodes, then everything the store kept (jobs, node
    states, reservations, the cap), the cap's schedule file and the carbon-intensity feed."""
    state = ClusterState(config=config, store=store, plugins=plugins, key=key, power_saving=PowerSaving(config),
                         configured_partitions=config.partitions)
    member = config.node_partitions()
    for conf in config.nodes:
        state.nodes[conf.name] = nodes.new_node(conf, member.get(conf.name, ()), now)
    statesave.restore(state)
    state.cap_file_steps = capsetting.read_schedule_file(config, now)
    state.carbon = CarbonFeed(config) if config.carbon_intensity else None
    return state

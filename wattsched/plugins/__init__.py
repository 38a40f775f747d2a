"""Plugins, found by their Slurm-style names (``sched/builtin``, ``select/cons_tres``, ...).

Each plugin is registered as an entry point in the ``wattsched.plugins`` group, named
exactly as a site writes it in the configuration, so a site can ship its own plugin in
its own package.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (not at run time: the power command and the BMC import this package)
    from wattsched.scheduling.plugins import PriorityPlugin, SchedulerPlugin, SelectPlugin


class PluginError(LookupError):
    """A configured plugin name that no installed package provides."""


def available(kind: str | None = None) -> list[str]:
    names = sorted(ep.name for ep in entry_points(group="wattsched.plugins"))
    return [n for n in names if kind is None or n.startswith(kind + "/")]


def load(name: str, **options: Any) -> Any:
    """Instantiate the plugin registered under ``name``."""
    for ep in entry_points(group="wattsched.plugins"):
        if ep.name == name:
            return ep.load()(**options)
    kind = name.split("/", 1)[0]
    raise PluginError(f"no plugin named '{name}' (available: {', '.join(available(kind)) or 'none'})")


def scheduling(config: Any) -> tuple[PriorityPlugin, SchedulerPlugin, SelectPlugin]:
    """The configured priority, scheduler and selection plugins (PriorityType, SchedulerType,
    SelectType): the same objects for the controller and the simulator. A plugin that lacks what
    its Protocol declares (wattsched.scheduling) is refused here, not at the first pass."""
    from wattsched.scheduling.plugins import PriorityPlugin, SchedulerPlugin, SelectPlugin

    priority = load(config.priority_type, config=config)
    scheduler = load(config.scheduler_type, params=config.scheduler_parameters)
    select = load(config.select_type)
    for name, plugin, protocol in ((config.priority_type, priority, PriorityPlugin),
                                   (config.scheduler_type, scheduler, SchedulerPlugin),
                                   (config.select_type, select, SelectPlugin)):
        if not isinstance(plugin, protocol):
            raise PluginError(f"plugin '{name}' does not provide what a {protocol.__name__} declares")
    return priority, scheduler, select


def power_save_policies(config: Any) -> list[tuple[str, Any]]:
    """Slurm's idle timeout (when SuspendTime is set) and the PowerSaveType policies, with
    PowerSaveParameters."""
    params = dict(config.power_save_parameters)
    policies: list[tuple[str, Any]] = []
    if config.suspend_time_s is not None:
        policies.append(("power_save/idle", load("power_save/idle", t_idle=float(config.suspend_time_s))))
    policies += [(name, load(name, **params)) for name in config.power_save_type]
    return policies

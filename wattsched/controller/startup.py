"""What the controller must have before it starts or takes a re-read configuration: its plugins,
loaded by their Slurm-style names and checked (a wrong one is a StartupError naming the file)."""

from __future__ import annotations

import os

from wattsched import config as config_mod
from wattsched.controller.powersaving import PowerSaving
from wattsched.controller.state import Plugins
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

"""Plugins, found by their Slurm-style names (``sched/builtin``, ``select/cons_tres``, ...).

Each plugin is registered as an entry point in the ``wattsched.plugins`` group, named
exactly as a site writes it in the configuration, so a site can ship its own plugin in
its own package.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any


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

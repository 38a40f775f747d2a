"""A virtual node's chassis record on disk (``<SlurmdSpoolDir>/<node>/chassis``): the target its
emulated BMC was last told (on or off) and when. The BMC writes it; the node's agent and power
model read it and derive the node's state with wattsched.switching."""

from __future__ import annotations

import os

from wattsched.switching import Chassis, parse_chassis


def path(spool: str, node: str) -> str:
    return os.path.join(spool, node, "chassis")


def read(spool: str, node: str) -> Chassis:
    """The node's chassis (a node never switched is on, and has been for ever)."""
    try:
        with open(path(spool, node)) as handle:
            return parse_chassis(handle.read())
    except OSError:
        return Chassis()


def write(spool: str, node: str, chassis: Chassis) -> None:
    target = path(spool, node)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".tmp", "w") as handle:
        handle.write(chassis.dumps())
    os.replace(target + ".tmp", target)

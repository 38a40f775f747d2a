"""Partitions changed while the controller runs: ``scontrol create``, ``update`` and ``delete
PartitionName=``, with the semantics of Slurm's partition manager.

A change makes a new configuration whose partitions differ, and the controller takes it as it takes
a re-read file: nodes learn their partitions again and every memo of the old configuration goes, so
the next snapshot sees it. The partitions as changed are saved with the state, so a restart and a
backup that takes over keep them (as Slurm's ``slurmctld -R`` and its backups do) for as long as the
configuration file's own partitions are the ones they were changed from; ``scontrol reconfigure``
goes back to the file's, as Slurm does without ``ReconfigFlags=KeepPartInfo``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from wattsched import states
from wattsched.config import PartitionConf, change_partition
from wattsched.controller import snapshots
from wattsched.controller.actions import Refused

if TYPE_CHECKING:
    from wattsched.controller.state import ClusterState

log = logging.getLogger(__name__)

INVALID_NAME = "Invalid partition name specified"  # Slurm's ESLURM_INVALID_PARTITION_NAME
IN_USE = "Partition is in use"  # Slurm's ESLURM_PARTITION_IN_USE


def create(state: ClusterState, name: str, settings: Sequence[tuple[str, str]]) -> None:
    """A new partition: Slurm's defaults (no nodes, UP) and the given settings."""
    if name.upper() == "DEFAULT":
        raise Refused('PartitionName cannot be "DEFAULT".', 400)
    if any(p.name == name for p in state.config.partitions):
        raise Refused(f"{INVALID_NAME}: partition {name} exists", 409)
    new = _changed(state, PartitionConf(name=name), settings)
    _take(state, [*state.config.partitions, new], name if new.default else "")


def update(state: ClusterState, name: str, settings: Sequence[tuple[str, str]]) -> None:
    """The given settings of an existing partition; jobs already running are not affected."""
    old = _find(state, name)
    new = _changed(state, old, settings)
    _take(state, [new if p.name == name else p for p in state.config.partitions],
          name if new.default and not old.default else "")


def delete(state: ClusterState, name: str) -> None:
    """A partition no job waits or runs in and no reservation names (Slurm's "in use")."""
    _find(state, name)
    if any(job.partition == name and job.state not in states.FINISHED for job in state.jobs.values()) or \
            any(resv.partition == name for resv in state.resv.by_name.values()):
        raise Refused(IN_USE, 409)
    _take(state, [p for p in state.config.partitions if p.name != name])


def _find(state: ClusterState, name: str) -> PartitionConf:
    for part in state.config.partitions:
        if part.name == name:
            return part
    raise Refused(INVALID_NAME, 404)


def _changed(state: ClusterState, part: PartitionConf, settings: Sequence[tuple[str, str]]) -> PartitionConf:
    try:
        return change_partition(part, settings, list(state.nodes))
    except ValueError as exc:
        raise Refused(str(exc), 400) from exc


def _take(state: ClusterState, parts: list[PartitionConf], made_default: str = "") -> None:
    """Run on ``parts`` from now on; the one ``made_default`` is the only default (Slurm's way of
    moving the default partition)."""
    if made_default:
        parts = [replace(p, default=False) if p.default and p.name != made_default else p for p in parts]
    config = replace(state.config, partitions=tuple(parts))
    member = config.node_partitions()
    for node in state.nodes.values():
        node.partitions = member.get(node.name, ())
    state.config = config
    if state.power_saving is not None:  # SuspendExcParts names partitions
        state.power_saving.reconfigure(config)
    state.memo = snapshots.Memos()
    state.journal.meta_dirty = True


# -- saved with the state ------------------------------------------------------------------------

def _records(parts: Sequence[PartitionConf]) -> list[dict[str, Any]]:
    return json.loads(json.dumps([asdict(p) for p in parts]))  # tuples as lists, as they come back


def _partition(record: dict[str, Any]) -> PartitionConf:
    fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value for key, value in record.items()}
    return PartitionConf(**fields)


def saved(state: ClusterState) -> str:
    """The partitions to save: with the file's they were changed from; "" while they are the file's."""
    if state.config.partitions == state.configured_partitions:
        return ""
    return json.dumps({"from": _records(state.configured_partitions), "partitions": _records(state.config.partitions)})


def restore(state: ClusterState, text: str) -> None:
    """Take saved partitions, unless the file's partitions changed since they were changed at run time."""
    if not text:
        return
    saved_parts = json.loads(text)
    if saved_parts["from"] != _records(state.configured_partitions):
        log.warning("the configuration file's partitions changed: partitions changed by scontrol are dropped")
        state.journal.meta_dirty = True
        return
    known = set(state.nodes)
    parts = [_partition(p) for p in saved_parts["partitions"]]
    _take(state, [replace(p, nodes=tuple(n for n in p.nodes if n in known)) for p in parts])

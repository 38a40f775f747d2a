"""Pending tasks of a job array shown as one line, ``12_[3-15%4]``, as squeue shows them (unless
-r): the rule, declared once. squeue folds the records it fetched; the controller folds before it
answers when squeue asks (``GET /v1/jobs?fold=true``), so that a queue of 100,000 pending tasks
in a few arrays is a few records on the wire, not 100,000.

The task that stands for its array's pending tasks is the one squeue's order puts first: the
highest priority, then the lowest job id. A pending task held or released on its own is a record of
its own, as Slurm splits it out of its array's pending record (``group``). Pure: the records in,
the folded ones out.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: squeue imports this module (typing costs a command ~5 ms)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeVar

    T = TypeVar("T")


def task_ranges(ids: list[int]) -> str:
    """Sorted task ids as squeue folds them: 1-3,7,9-10."""
    parts, start = [], ids[0]
    for prev, cur in zip(ids, [*ids[1:], None], strict=True):
        if cur is None or cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur if cur is not None else start
    return ",".join(parts)


def folded_id(array_job_id: int, task_ids: list[int], throttle: int) -> str:
    return f"{array_job_id}_[{task_ranges(sorted(task_ids))}{f'%{throttle}' if throttle else ''}]"


def group(array_job_id: int, hold: str) -> tuple[int, str]:
    """Which of its array's pending records a pending task is in: its array's, apart by its hold (a
    task held or released while the others are not was split out of the array's record)."""
    return array_job_id, hold


def fold(records: Iterable[T], pending_task: Callable[[T], tuple[tuple[int, str], int] | None],
         rank: Callable[[T], tuple]) -> list[tuple[T, list[int]]]:
    """Each record that is not a pending array task with [], and for each array's pending record
    one pending task, the first by ``rank``, with the task ids of all its tasks (``pending_task``:
    the record's (group, task id) when it is a pending task of an array, else None)."""
    result: list[tuple[T, list[int]]] = []
    groups: dict[tuple[int, str], tuple[T, list[int]]] = {}
    for record in records:
        task = pending_task(record)
        if task is None:
            result.append((record, []))
            continue
        array_id, task_id = task
        found = groups.get(array_id)
        if found is None:
            groups[array_id] = (record, [task_id])
        else:
            first, ids = found
            ids.append(task_id)
            if rank(record) < rank(first):
                groups[array_id] = (record, ids)
    result.extend(groups.values())
    return result

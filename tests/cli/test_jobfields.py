"""squeue's %-codes read only the record keys jobfields.KEYS declares for them: squeue asks the
controller for those alone, so a key missing there would break that column."""

from __future__ import annotations

import itertools

import pytest

from wattsched.cli.jobfields import FIELDS, KEYS
from wattsched.controller import views

NOW = 1_800_000_000.0
EXTRA = ("display_id", "node_list", "num_nodes", "num_cpus", "run_time_s", "command", "tres_per_node",
         "tres_per_task", "tres_per_job", "num_gpus")


class Declared(dict):
    """A record that refuses the keys its column did not declare."""

    def __init__(self, record: dict, keys: tuple[str, ...]):
        super().__init__({key: record[key] for key in keys})
        self.code_keys = keys

    def __missing__(self, key: str):
        raise AssertionError(f"reads {key!r}, not among its declared keys {self.code_keys}")

    def get(self, key: str, default=None):
        return self[key]


def records():
    """Listing records of every state and of the values that change a column's branch."""
    base = dict.fromkeys((*views._BRIEF, *EXTRA), "")
    base.update(job_id=12, array_job_id=None, array_task_id=None, array_throttle=0, uid=1000, gid=1000, priority=4242,
                nice=0, submit_time=NOW - 600, expected_start=None, exc_nodes=[], req_nodes=[], features=[],
                cpus_per_task=1, ntasks=2, num_nodes=1, num_cpus=2, run_time_s=0.0, exclusive=False,
                name="job", user="alice", partition="debug", reason="None", node_list="")
    for state, limit, started, ended, mem, per_node, array in itertools.product(
            ("PENDING", "RUNNING", "COMPLETING", "COMPLETED", "CANCELLED"), (None, 60), (0, NOW - 300),
            (0, NOW - 10), (0, 4000), (0, 2), (None, 3)):
        yield dict(base, state=state, time_limit_min=limit, start_time=started, end_time=ended, mem_per_node_mb=mem,
                   mem_per_cpu_mb=mem // 2, ntasks_per_node=per_node, array_job_id=array and 11,
                   array_task_id=array, reason="Priority" if state == "PENDING" else "None",
                   node_list="n[1-2]" if started else "", run_time_s=250.0 if started else 0.0,
                   expected_start=NOW + 60 if state == "PENDING" else None, exclusive=bool(per_node))


@pytest.mark.parametrize("code", sorted(FIELDS))
def test_each_code_reads_only_the_keys_it_declares(code: str) -> None:
    value = FIELDS[code][2]
    for record in records():
        assert value(Declared(record, KEYS.get(code, ())), NOW) == value(record, NOW), (code, record)


def test_rows_rendered_a_column_at_a_time_are_the_rows_rendered_one_by_one() -> None:
    from wattsched.cli import fmt, squeue

    parts = fmt.parse_format(squeue.LONG + " %Z %.3j|%-4u %k")
    records = [dict.fromkeys(itertools.chain(*KEYS.values(), EXTRA, squeue._ALWAYS), 0) | {
        "job_id": i, "state": "PENDING", "name": f"j\x1b{i}" if i % 2 else "plain", "user": "alice",
        "partition": "p", "reason": "Resources", "node_list": "", "display_id": str(i), "array_task_id": None,
        "time_limit_min": 30, "comment": "", "work_dir": "/w", "nodes_expr": "", "features": ""}
        for i in range(5)]
    value_of = lambda code: FIELDS[code][2] if code in FIELDS else None  # noqa: E731
    row = fmt.compile_row(parts, lambda code: fmt.bound(value_of(code), code, NOW))
    assert fmt.render_rows(parts, value_of, records, NOW) == [row(r) for r in records]
    assert "\\x1b" in fmt.render_rows(parts, value_of, records, NOW)[1]  # control characters escaped


def test_the_listing_filters_squeue_applies_itself() -> None:
    from wattsched.cli import squeue

    job = {"name": "a", "account": "phys", "qos": "normal", "reservation": "", "node_list": "n[1-3]"}
    assert squeue._selector({}) is None
    assert squeue._selector({"name": ["a,b"]})(job) and not squeue._selector({"name": ["b"]})(job)
    assert squeue._selector({"account": ["phys"]})(job) and not squeue._selector({"qos": ["high"]})(job)
    assert squeue._selector({"nodelist": ["n[3-4]"]})(job) and not squeue._selector({"nodelist": ["n4"]})(job)
    assert not squeue._selector({"reservation": "r1"})(job) and not squeue._selector({"licenses": "x"})(job)

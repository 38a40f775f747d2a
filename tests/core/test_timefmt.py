"""Slurm's time and size formats."""

from __future__ import annotations

import time

import pytest

from wattsched import patterns, timefmt


@pytest.mark.parametrize(("text", "minutes"), [
    ("10", 10), ("10:30", 11), ("1:00:00", 60), ("2-0", 2880), ("1-2:30", 1590), ("1-0:0:1", 1441),
    ("0:02", 1), ("UNLIMITED", None), ("infinite", None), ("-1", None),
])
def test_durations(text: str, minutes: int | None) -> None:
    assert timefmt.parse_duration_min(text) == minutes


@pytest.mark.parametrize("text", ["", "1:2:3:4", "abc", "1-", "-5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(timefmt.TimeFormatError):
        timefmt.parse_duration_min(text)


def test_displays() -> None:
    assert timefmt.secs_to_str(5) == "0:05"
    assert timefmt.secs_to_str(3725) == "1:02:05"
    assert timefmt.secs_to_str(90061) == "1-01:01:01"
    assert timefmt.elapsed_str(65) == "00:01:05"
    assert timefmt.elapsed_str(90061) == "1-01:01:01"
    assert timefmt.limit_str(None) == "UNLIMITED"
    assert timefmt.limit_str(30) == "30:00"


def test_absolute_times() -> None:
    now = time.mktime((2026, 11, 21, 14, 0, 0, 0, 0, -1))
    assert timefmt.parse_time("now", now) == now
    assert timefmt.parse_time("now+20minutes", now) == now + 1200
    assert timefmt.parse_time("now+1hour", now) == now + 3600
    assert timefmt.parse_time("now+30", now) == now + 30
    assert timefmt.parse_time("16:00", now) == now + 7200
    assert timefmt.parse_time("10:00", now) == now + 20 * 3600  # past today: tomorrow
    assert timefmt.parse_time("teatime", now) == now + 7200
    assert timefmt.parse_time("tomorrow", now) == now + 10 * 3600
    assert timefmt.parse_time("2026-11-22T08:30", now) == now + 18.5 * 3600
    assert timefmt.parse_time("11/22-08:30", now) == now + 18.5 * 3600
    with pytest.raises(timefmt.TimeFormatError):
        timefmt.parse_time("someday", now)


def test_memory_sizes() -> None:
    assert timefmt.parse_mem_mb("100") == 100
    assert timefmt.parse_mem_mb("2G") == 2048
    assert timefmt.parse_mem_mb("512K") == 1
    assert timefmt.parse_mem_mb("1T") == 1024 * 1024
    with pytest.raises(timefmt.TimeFormatError):
        timefmt.parse_mem_mb("lots")


def test_filename_patterns() -> None:
    common = dict(job_id=42, job_name="sim", user="alice", node="n07.cluster", work_dir="/home/a")
    assert patterns.expand("slurm-%j.out", **common) == "/home/a/slurm-42.out"
    assert patterns.expand("/abs/%x_%u_%N_%%.log", **common) == "/abs/sim_alice_n07_%.log"
    array = dict(common, job_id=45, array_job_id=42, array_task_id=3)
    assert patterns.expand("slurm-%A_%a.out", **array) == "/home/a/slurm-42_3.out"
    assert patterns.expand("o-%4a-%j", **array) == "/home/a/o-0003-45"
    assert patterns.expand("t%t-n%n-%J", **common, step_id="2", task_id=5, node_id=1) == "/home/a/t5-n1-42.2"


@pytest.mark.parametrize("text", ["now+" + "9" * 60, "now-100000days", "9999-12-31T23:59:59x"])
def test_times_out_of_any_range_are_refused(text: str) -> None:
    with pytest.raises(timefmt.TimeFormatError, match="Invalid time specification"):
        timefmt.parse_time(text, 1_800_000_000.0)

"""Hardware counters through perf_event_open (wattsched.noded.perfcounters) and the signature the
energy policies take from them on real nodes (energypolicy.counted_signature).

CPU-wide counting is tested with the kernel's software events, which every Linux has; the
hardware events (cycles, instructions, misses) where the machine has a PMU, skipped elsewhere
with the kernel's reason (a VM without a virtual PMU)."""

from __future__ import annotations

import os
import time

import pytest

from wattsched import energypolicy
from wattsched.noded import perfcounters

ROOT = os.geteuid() == 0


def _busy_child(cpu: int, seconds: float, fault: bool = False) -> int:
    """A process pinned to ``cpu`` that computes (or takes page faults) for ``seconds``."""
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {cpu})
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if fault:
                    buffer = bytearray(8 << 20)
                    buffer[::4096] = b"x" * len(buffer[::4096])
                else:
                    sum(range(10000))
        finally:
            os._exit(0)
    return pid


@pytest.mark.skipif(not ROOT, reason="counting a CPU's every process needs root (the agent's)")
def test_a_jobs_cpus_are_counted_with_the_kernels_software_events() -> None:
    cpu = max(os.sched_getaffinity(0))
    counters = perfcounters.JobCounters([cpu], ["page-faults", "context-switches"])
    try:
        assert counters.counting and counters.missing == {}
        os.waitpid(_busy_child(cpu, 0.3, fault=True), 0)
        counted = counters.interval()
        assert counted.values["page-faults"] >= 2048  # 8 MiB touched a page at a time, at least once
        assert 0 < counted.seconds < 60
        again = counters.interval()  # the next interval starts where the last one ended
        totals, _seconds = counters.totals()
        assert again.values["page-faults"] >= 0
        assert totals["page-faults"] >= counted.values["page-faults"] + again.values["page-faults"]
    finally:
        counters.close()
    assert counters.fds == {}


def test_an_event_the_machine_lacks_is_left_out_not_an_error() -> None:
    reason = perfcounters.unavailable(["cycles"])
    counters = perfcounters.JobCounters([0], ["cycles", "page-faults"] if ROOT else ["cycles"])
    try:
        assert ("cycles" in counters.missing) == (reason is not None)
    finally:
        counters.close()


@pytest.mark.skipif(not ROOT, reason="counting a CPU's every process needs root (the agent's)")
def test_hardware_counters_give_a_signature() -> None:
    reason = perfcounters.unavailable()
    if reason is not None:
        pytest.skip(f"this machine has no hardware counters for the signature: {reason}")
    cpu = max(os.sched_getaffinity(0))
    counters = perfcounters.JobCounters([cpu])
    try:
        os.waitpid(_busy_child(cpu, 0.5), 0)
        counted = counters.interval()
    finally:
        counters.close()
    sig = energypolicy.counted_signature(counted.values, counted.seconds, 2_000_000, 150.0, 1.0)
    assert sig is not None and sig.cpi > 0 and 0 <= sig.memory_share < 1


def test_the_signature_from_counts() -> None:
    # 2e9 cycles, 1e9 instructions: CPI 2; back-end stalls counted: their share
    sig = energypolicy.counted_signature({"cycles": 2e9, "instructions": 1e9, "cache-misses": 1e7,
                                          "stalled-cycles-backend": 5e8}, 1.0, 2_000_000, 150.0, 1.0)
    assert sig is not None and sig.cpi == 2.0 and sig.memory_share == 0.25 and sig.gbs == pytest.approx(0.64)
    # no back-end count: 1e7 misses x 90 ns at 2 GHz = 1.8e9 stalled cycles of 2e9
    sig = energypolicy.counted_signature({"cycles": 2e9, "instructions": 1e9, "cache-misses": 1e7}, 1.0,
                                         2_000_000, 150.0, 1.0)
    assert sig is not None and sig.memory_share == pytest.approx(0.9)
    assert energypolicy.counted_signature({"cycles": 2e9, "instructions": 1e9}, 1.0, 2_000_000, 150.0, 1.0) is None
    assert energypolicy.counted_signature({"cycles": 0.0, "instructions": 0.0}, 1.0, 2_000_000, 150.0, 1.0) is None

"""What every benchmark prints first: the machine it ran on."""

from __future__ import annotations

import os
import platform


def describe() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({model}), {mem_gib:.0f} GiB, Python {platform.python_version()}"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        kb = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
    return kb / 1024


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, workload: str, figures: dict[str, str]) -> None:
    print(f"bench: {name}")
    print(f"workload: {workload}")
    print(f"machine: {describe()}")
    for key, value in figures.items():
        print(f"{key}: {value}")
    print()

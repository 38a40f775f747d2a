"""This host's hardware as slurm.conf describes a node (``slurmd -C``): its CPUs, sockets, cores and
threads from the kernel's CPU topology (/sys/devices/system/cpu), its memory and its uptime."""

from __future__ import annotations

import os
import socket
from pathlib import Path

CPUS = Path("/sys/devices/system/cpu")


def _online(root: Path) -> list[int]:
    """The online CPUs' numbers, from the kernel's list ("0-3,8"); every CPU folder where it is missing."""
    try:
        text = (root / "online").read_text().strip()
    except OSError:
        return sorted(int(p.name[3:]) for p in root.glob("cpu[0-9]*"))
    numbers: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        numbers.extend(range(int(first), int(last or first) + 1))
    return numbers


def topology(root: Path = CPUS) -> tuple[int, int, int, int]:
    """(CPUs, sockets, cores per socket, threads per core) of the online CPUs."""
    cpus = _online(root)
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        folder = root / f"cpu{cpu}" / "topology"
        try:
            cores.add(((folder / "physical_package_id").read_text().strip(), (folder / "core_id").read_text().strip()))
        except OSError:  # no topology (some containers): each CPU a core of one socket
            cores.add(("0", str(cpu)))
    sockets = len({package for package, _ in cores}) or 1
    per_socket = max(1, len(cores) // sockets)
    threads = max(1, len(cpus) // (sockets * per_socket))
    return len(cpus), sockets, per_socket, threads


def memory_mib() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)


def uptime_s() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]))


def node_line() -> str:
    """slurmd -C's two lines: the NodeName line and the uptime (days-HH:MM:SS)."""
    cpus, sockets, cores, threads = topology()
    up = uptime_s()
    days, rest = divmod(up, 86400)
    return (f"NodeName={socket.gethostname().split('.')[0]} CPUs={cpus} Boards=1 SocketsPerBoard={sockets} "
            f"CoresPerSocket={cores} ThreadsPerCore={threads} RealMemory={memory_mib()}\n"
            f"UpTime={days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}\n")

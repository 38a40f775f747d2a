"""CPU frequency control through cpufreq sysfs, on real nodes and on virtual ones.

A real node's tree is ``<root>/sys/devices/system/cpu``; a virtual node gets a tree laid out as
the kernel lays it out (``cpufreq/policyN`` folders, ``cpuN/cpufreq`` links to them, the same
file names and formats) under its own folder, and this module then also plays the cpufreq
driver: after each write it updates ``scaling_cur_freq`` as the kernel would for a busy CPU.

Settings are applied per CPU and the previous ones returned, so that the caller can persist
them and restore them after the job, even across an agent restart.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Sequence

from wattsched import cpufreq

_FILES = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed")


class CpuFreqSysfs:
    def __init__(self, root: str, emulated: bool = False):
        self.root = root or "/"
        self.base = os.path.join(self.root, "sys", "devices", "system", "cpu")
        self.emulated = emulated

    def _path(self, cpu: int, name: str) -> str:
        return os.path.join(self.base, f"cpu{cpu}", "cpufreq", name)

    def _read(self, cpu: int, name: str) -> str:
        with open(self._path(cpu, name)) as handle:
            return handle.read().strip()

    def _write(self, cpu: int, name: str, value: str) -> None:
        path = self._path(cpu, name)
        if not self.emulated:  # sysfs: written in place, the kernel makes it atomic
            with open(path, "w") as handle:
                handle.write(f"{value}\n")
            return
        # a virtual node's tree is a plain folder: written aside and renamed, a reader never sees a
        # value half written (as sysfs shows none)
        aside = f"{path}.{threading.get_ident()}.tmp"
        with open(aside, "w") as handle:
            handle.write(f"{value}\n")
        os.replace(aside, path)

    def present(self) -> bool:
        return os.path.isdir(os.path.join(self.base, "cpu0", "cpufreq"))

    def cpus(self) -> list[int]:
        if not os.path.isdir(self.base):
            return []
        found = [int(d[3:]) for d in os.listdir(self.base) if d.startswith("cpu") and d[3:].isdigit()]
        return sorted(c for c in found if os.path.isdir(os.path.join(self.base, f"cpu{c}", "cpufreq")))

    def available(self, cpu: int) -> list[int]:
        """The CPU's frequencies (kHz, ascending); the cpuinfo range when the driver lists none."""
        with contextlib.suppress(OSError):
            values = [int(v) for v in self._read(cpu, "scaling_available_frequencies").split()]
            if values:
                return sorted(values)
        return sorted({int(self._read(cpu, "cpuinfo_min_freq")), int(self._read(cpu, "cpuinfo_max_freq"))})

    def max_khz(self, cpu: int) -> int:
        return int(self._read(cpu, "cpuinfo_max_freq"))

    def current_khz(self, cpu: int) -> int:
        return int(self._read(cpu, "scaling_cur_freq"))

    def settings(self, cpu: int) -> dict[str, str]:
        values = {}
        for name in _FILES:
            with contextlib.suppress(OSError):
                values[name] = self._read(cpu, name)
        return values

    def apply(self, cpus: Iterable[int], setting: cpufreq.FreqSetting) -> dict[int, dict[str, str]]:
        """Apply ``setting`` to ``cpus``; returns each CPU's previous settings."""
        saved = {}
        for cpu in cpus:
            saved[cpu] = self.settings(cpu)
            if setting.governor:
                self._write(cpu, "scaling_governor", setting.governor)
            self._set_range(cpu, setting.min_khz, setting.max_khz)
            if setting.setspeed is not None:
                self._write(cpu, "scaling_setspeed", str(setting.setspeed))
            self._driver_update(cpu)
        return saved

    def restore(self, saved: dict[int, dict[str, str]]) -> None:
        for cpu, values in saved.items():
            if "scaling_governor" in values:
                self._write(cpu, "scaling_governor", values["scaling_governor"])
            low, high = values.get("scaling_min_freq"), values.get("scaling_max_freq")
            self._set_range(cpu, int(low) if low else None, int(high) if high else None)
            setspeed = values.get("scaling_setspeed", "")
            if values.get("scaling_governor") == "userspace" and setspeed.isdigit():
                self._write(cpu, "scaling_setspeed", setspeed)
            self._driver_update(cpu)

    def _set_range(self, cpu: int, low: int | None, high: int | None) -> None:
        """Write min and max in the order that never has min above max."""
        order: tuple[tuple[str, int | None], ...]
        if low is not None and high is not None and low > int(self._read(cpu, "scaling_max_freq")):
            order = (("scaling_max_freq", high), ("scaling_min_freq", low))
        else:
            order = (("scaling_min_freq", low), ("scaling_max_freq", high))
        for name, value in order:
            if value is not None:
                self._write(cpu, name, str(value))

    def _driver_update(self, cpu: int) -> None:
        """On a virtual node, do what the kernel does after a write: the CPU's new speed."""
        if not self.emulated:
            return
        values = self.settings(cpu)
        setspeed = values.get("scaling_setspeed", "")
        khz = cpufreq.effective_khz(values["scaling_governor"], int(setspeed) if setspeed.isdigit() else None,
                                    int(values["scaling_min_freq"]), int(values["scaling_max_freq"]))
        if values["scaling_governor"] != "userspace":
            self._write(cpu, "scaling_setspeed", "<unsupported>")
        self._write(cpu, "scaling_cur_freq", str(khz))


def layout_tree(root: str, cpus: int, frequencies: Sequence[int], governor: str = "performance",
                governors: Sequence[str] = cpufreq.GOVERNORS) -> None:
    """Lay out a kernel-shaped cpufreq tree for ``cpus`` CPUs under ``root`` (kept if present)."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    if os.path.isdir(os.path.join(base, "cpu0", "cpufreq")):
        return
    freqs = sorted(frequencies, reverse=True)  # the kernel lists them highest first
    span = f"0-{cpus - 1}" if cpus > 1 else "0"
    os.makedirs(base, exist_ok=True)
    for name in ("online", "possible", "present"):
        _put(os.path.join(base, name), span)
    for cpu in range(cpus):
        policy = os.path.join(base, "cpufreq", f"policy{cpu}")
        os.makedirs(policy, exist_ok=True)
        files = {
            "affected_cpus": str(cpu), "related_cpus": str(cpu),
            "cpuinfo_min_freq": str(freqs[-1]), "cpuinfo_max_freq": str(freqs[0]),
            "cpuinfo_transition_latency": "10000", "scaling_driver": "acpi-cpufreq",
            "scaling_available_frequencies": " ".join(map(str, freqs)) + " ",
            "scaling_available_governors": " ".join(governors),
            "scaling_governor": governor, "scaling_min_freq": str(freqs[-1]), "scaling_max_freq": str(freqs[0]),
            "scaling_setspeed": "<unsupported>", "scaling_cur_freq": str(freqs[0]),
        }
        for name, value in files.items():
            _put(os.path.join(policy, name), value)
        cpu_dir = os.path.join(base, f"cpu{cpu}")
        os.makedirs(cpu_dir, exist_ok=True)
        link = os.path.join(cpu_dir, "cpufreq")
        if not os.path.lexists(link):
            os.symlink(os.path.join("..", "cpufreq", f"policy{cpu}"), link)


def _put(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(f"{value}\n")

"""The agent's energy meter: polls the AcctGatherEnergyType plugin for every node it hosts in a
thread of its own, every AcctGatherNodeFreq seconds, and keeps each node's energy counter.

Power readings are integrated with the trapezoid rule over the measured timestamps (seed 004,
eq. 1: E += (P_prev + P_now) / 2 * dt); energy readings (RAPL) are taken as they are. Each read
has a time limit: a sensor that does not answer in time leaves its node's last reading in place,
flagged stale, and never holds up the other nodes, job launches or heartbeats (they run on the
event loop, not here). Counters are saved in the spool folder, so a node's energy survives an
agent restart (Slurm's reset on restart is why it stopped printing ConsumedJoules).

The emulated model needs each node's CPU utilization: the CPU time of the processes in the
process groups of the node's jobs (batch scripts and step tasks), read from /proc.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from wattsched.api import EnergySample

log = logging.getLogger("wattsched.noded")

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class NodeEnergy:
    joules: float = 0.0
    watts: float = 0.0
    time: float = 0.0
    stale: bool = False
    base: float = 0.0  # an energy plugin's reading that corresponds to joules=0 here


def cpu_seconds_by_pgid() -> dict[int, float]:
    """CPU seconds (user + system) of all processes, summed per process group."""
    totals: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pgid = int(fields[2])
        totals[pgid] = totals.get(pgid, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS
    return totals


class EnergyMeter:
    """Per-node energy counters, fed by a polling thread."""

    def __init__(self, plugin, nodes: dict[str, int], spool: str, interval_s: float,
                 pgids_of: Callable[[], dict[str, set[int]]], read_timeout_s: float = 5.0):
        self.plugin, self.cpus, self.interval_s = plugin, nodes, interval_s
        self.pgids_of = pgids_of
        self.read_timeout_s = read_timeout_s
        self.path = os.path.join(spool, "energy.json")
        self.nodes = {name: NodeEnergy() for name in nodes}
        self._load()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="energy-read")
        self._pending: dict[str, concurrent.futures.Future] = {}
        self._cpu_prev: dict[str, tuple[float, float]] = {}
        self._thread = threading.Thread(target=self._run, name="energy", daemon=True)
        self._last_save = 0.0

    def _load(self) -> None:
        try:
            with open(self.path) as handle:
                saved = json.load(handle)
        except (OSError, ValueError):
            return
        for name, data in saved.items():
            if name in self.nodes:
                # the plugin's own counters restart with us: carry the joules, rebase the readings
                self.nodes[name] = NodeEnergy(joules=data["joules"], watts=data.get("watts", 0.0))

    def _save(self) -> None:
        data = {n: {"joules": e.joules, "watts": e.watts, "time": e.time} for n, e in self.nodes.items()}
        with open(self.path + ".tmp", "w") as handle:
            json.dump(data, handle)
        os.replace(self.path + ".tmp", self.path)

    def start(self) -> None:
        if self.plugin.kind != "none":
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.read_timeout_s + 1)
            self._save()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def samples(self) -> dict[str, EnergySample]:
        with self._lock:
            return {n: EnergySample(time=e.time, joules=e.joules, watts=e.watts, stale=e.stale)
                    for n, e in self.nodes.items() if e.time}

    def _utilization(self, now: float) -> dict[str, float]:
        by_pgid = cpu_seconds_by_pgid()
        result = {}
        for node, pgids in self.pgids_of().items():
            used = sum(by_pgid.get(p, 0.0) for p in pgids)
            previous = self._cpu_prev.get(node)
            self._cpu_prev[node] = (used, now)
            if previous is None or now <= previous[1]:
                continue
            result[node] = max(0.0, used - previous[0]) / (now - previous[1]) / max(1, self.cpus.get(node, 1))
        return result

    def poll_once(self, now: float) -> None:
        """Read every node (each read with its time limit) and update the counters."""
        usage = self._utilization(now) if self.plugin.kind == "power" else {}
        futures = {}
        for name in self.nodes:
            pending = self._pending.get(name)
            if pending is not None and not pending.done():
                self.nodes[name].stale = True  # still stuck in its last read
                continue
            futures[name] = self._pool.submit(self.plugin.read, name, now, usage.get(name, 0.0))
        done, _late = concurrent.futures.wait(futures.values(), timeout=self.read_timeout_s)
        with self._lock:
            for name, future in futures.items():
                state = self.nodes[name]
                if future not in done or future.exception() is not None:
                    state.stale = True
                    self._pending[name] = future
                    continue
                self._pending.pop(name, None)
                self._update(state, future.result(), now)

    def _update(self, state: NodeEnergy, value: float, now: float) -> None:
        if self.plugin.kind == "power":
            if state.time:
                state.joules += (state.watts + value) / 2 * (now - state.time)
            state.watts = value
        else:
            if not state.time:
                state.base = value - state.joules  # first reading since (re)start: continue the count
            joules = value - state.base
            if state.time and now > state.time:
                state.watts = (joules - state.joules) / (now - state.time)
            state.joules = joules
        state.time, state.stale = now, False

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            try:
                self.poll_once(started)
                if started - self._last_save >= 10:
                    self._save()
                    self._last_save = started
            except Exception as exc:  # a broken sensor must not stop the meter
                log.error("energy polling failed", extra={"error": str(exc)})
            self._stop.wait(max(0.0, self.interval_s - (time.time() - started)))

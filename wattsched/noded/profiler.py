"""The profiling thread of acct_gather_profile/hdf5: appends each profiled job's samples to its
node's HDF5 file at the job's intervals (--acctg-freq energy=N, task=N).

Samples take the meter's latest poll (the meter polls at least as often as the shortest
interval asked for): the node's power and energy, and the CPU time and RSS of the job's
processes. Writes happen in this thread only, so h5py is never used concurrently.
"""

from __future__ import annotations

import logging
import threading
import time

from wattsched.noded.allocations import Allocations
from wattsched.noded.energymeter import EnergyMeter
from wattsched.noded.policies import Policies

log = logging.getLogger("wattsched.noded")

TICK_S = 0.25


class Profiler:
    def __init__(self, allocations: Allocations, meter: EnergyMeter, lock: threading.Lock, policies: Policies):
        self.allocations, self.meter, self.policies = allocations, meter, policies
        self.lock = lock  # the agent's lock over its allocations
        self._due: dict[tuple[str, int, str], float] = {}
        self._last_task: dict[tuple[str, int], tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="profiler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.sample(time.time())
            except Exception as exc:  # a full disk must not stop the agent
                log.error("profiling failed", extra={"error": str(exc)})

    def sample(self, now: float) -> None:
        with self.lock:
            for key, profile in list(self.allocations.profiles.items()):
                job = self.allocations.jobs.get(key)
                if job is None:
                    continue
                khz, f_max = self.allocations.running_freq(job)
                if "energy" in job.profile and self._is_due(key, "energy", job.energy_s, now):
                    state = self.meter.nodes.get(job.node)
                    if state is not None and state.time:
                        if job.joules_at_start is None:
                            job.joules_at_start = state.joules
                        profile.append("Energy", now, Power=state.watts, Energy=state.joules - job.joules_at_start,
                                       CPUFrequency=khz)
                    sig = self.policies.latest.get(key)
                    if sig is not None:
                        profile.append("Signature", now, CPUFrequency=sig.khz, CPI=sig.cpi, MemBW=sig.gbs,
                                       MemBound=sig.bound_at(f_max or sig.khz), Power=sig.watts,
                                       PolicyFrequency=job.policy_khz)
                if "task" in job.profile and self._is_due(key, "task", job.task_s, now):
                    cpu_s, rss_kb = self.meter.job_usage(*key)
                    then, cpu_before = self._last_task.get(key, (job.start, 0.0))
                    self._last_task[key] = (now, cpu_s)
                    percent = max(0.0, cpu_s - cpu_before) / max(1e-9, now - then) * 100
                    profile.append("Task", now, CPUFrequency=khz, CPUTime=cpu_s, CPUUtilization=percent, RSS=rss_kb)
            live = set(self.allocations.profiles)
            for due in [k for k in self._due if (k[0], k[1]) not in live]:
                del self._due[due]
            for key in [k for k in self._last_task if k not in live]:
                del self._last_task[key]

    def _is_due(self, key: tuple[str, int], series: str, interval: int, now: float) -> bool:
        slot = (*key, series)
        if now < self._due.get(slot, 0.0):
            return False
        self._due[slot] = now + max(1, interval)
        return True

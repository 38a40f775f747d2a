"""Slower CPUs for virtual nodes: a job whose CPUs run below their highest frequency gets only
that fraction of each 500 ms period (SIGCONT at the start, SIGSTOP after f / f_max of it).

Compute-bound work therefore takes f_max / f times longer, while sleeping and waiting take as
long as before: the job's own compute-bound fraction decides how its run time stretches, as on
a real CPU. Real nodes never use this; their hardware slows down by itself.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet

from wattsched.noded import procs

# Long enough that a thread's wake-up latency in a busy agent (a few ms) stays ~1 % of the
# shortest stop window (f / f_max = 0.92 leaves 40 ms); short enough to look continuous to a job.
PERIOD_S = 0.5


class Throttle:
    def __init__(self, pgids_of: Callable[[tuple[str, int]], set[int]]):
        self.pgids_of = pgids_of
        self.ratios: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle", daemon=True)

    def set(self, key: tuple[str, int], ratio: float) -> None:
        if ratio >= 0.999:  # full speed: a job caught in the stopped part of a period must go on
            self.release(key)
            return
        with self._lock:
            self.ratios[key] = max(0.05, ratio)
        if self.ratios and not self._thread.is_alive():
            self._thread.start()

    def release(self, key: tuple[str, int]) -> None:
        """Stop throttling a job and let its processes run (before it is signalled or ends)."""
        with self._lock:
            known = self.ratios.pop(key, None)
        if known is not None:
            self._signal(self.pgids_of(key), signal.SIGCONT)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            keys = list(self.ratios)
            self.ratios.clear()
        for key in keys:
            self._signal(self.pgids_of(key), signal.SIGCONT)

    @staticmethod
    def _signal(pgids: AbstractSet[int], sig: int) -> None:
        for pgid in pgids:
            procs.killpg(pgid, sig)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                plan = sorted((ratio, key) for key, ratio in self.ratios.items())
            started = time.monotonic()
            for _ratio, key in plan:
                self._signal(self.pgids_of(key), signal.SIGCONT)
            for ratio, key in plan:
                self._stop.wait(max(0.0, started + ratio * PERIOD_S - time.monotonic()))
                with self._lock:  # a job released meanwhile must not be stopped again
                    if key in self.ratios and not self._stop.is_set():
                        self._signal(self.pgids_of(key), signal.SIGSTOP)
            self._stop.wait(max(0.0, started + PERIOD_S - time.monotonic()))

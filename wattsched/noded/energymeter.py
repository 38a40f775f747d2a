"""The agent's energy meter: polls the AcctGatherEnergyType plugin for every node it hosts in a
thread of its own, every AcctGatherNodeFreq seconds, and keeps each node's energy counter.

Power readings are integrated with the trapezoid rule over the measured timestamps (Georgiou et al. 2014,
eq. 1: E += (P_prev + P_now) / 2 * dt), or, from plugins whose reading is the mean power since
the previous one (the emulated model, driven by CPU time between polls), as E += P * dt;
energy readings (RAPL) are taken as they are. Each read
has a time limit: a sensor that does not answer in time leaves its node's last reading in place,
flagged stale, and never holds up the other nodes, job launches or heartbeats (they run on the
event loop, not here). Counters are saved in the spool folder, so a node's energy survives an
agent restart (Slurm's reset on restart is why it stopped printing ConsumedJoules).

Every poll also reads from /proc the CPU time and RSS of each job's processes on each node
(batch script and step tasks and what they started): the controller splits a shared node's dynamic
energy by it, sstat shows it, and the emulated power model turns it into load. A job whose
CPUs run at f < f_max gets only its share of the CPU (f / f_max when compute-bound, more when it
waits for memory: noded.throttle, noded.policies.speed), so its load is its CPU use over that
share, drawn at the watts of f. On virtual nodes read through an emulated BMC,
the model's watts are published in ``<spool>/<node>/model_watts`` for the BMC to serve.
Nodes with GPUs have them metered at each poll too (noded.gpus), and each job's GPU energy
reported with its CPU time.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from wattsched.api import EnergySample, JobUsage
from wattsched.noded import procstat
from wattsched.noded.gpus import GpuMeter

log = logging.getLogger("wattsched.noded")

WAKE_GAP_S = 0.25  # the shortest time between two reads asked for by job ends
SLOW_READ_S = 0.1
# per node: for each job, (process groups, current kHz, highest kHz, its share of the CPU)
JobLoad = tuple[set[int], int, int, float]
JobLoads = Callable[[], dict[str, dict[int, JobLoad]]]


@dataclass(slots=True)
class NodeEnergy:
    joules: float = 0.0
    watts: float = 0.0
    time: float = 0.0
    stale: bool = False
    base: float = 0.0  # an energy plugin's reading that corresponds to joules=0 here
    error: str = ""  # why the last read failed, while it does


class EnergyMeter:
    """Per-node energy counters, fed by a polling thread."""

    def __init__(self, plugin, nodes: dict[str, int], spool: str, interval_s: float,
                 job_loads: JobLoads, read_timeout_s: float = 5.0, model=None, calc_adjustment: bool = False,
                 cgroup_usage: Callable[[str, int], tuple[float, int] | None] | None = None,
                 gpus: GpuMeter | None = None):
        self.plugin, self.cpus, self.interval_s = plugin, nodes, interval_s
        self.job_loads = job_loads
        # with cgroups, a job's CPU time and memory come from its cgroup: every process of it counts
        self.cgroup_usage = cgroup_usage
        self.model = model  # the emulated power model whose watts an emulated BMC serves
        self.gpus = gpus if gpus else None  # the nodes' GPUs, metered each poll too
        if self.gpus is not None and model is not None:
            model.extra_watts = self.gpus.watts  # an emulated node's watts include its GPUs'
        self.calc_adjustment = calc_adjustment
        self.spool = spool
        self.job_cpu: dict[tuple[str, int], float] = {}  # CPU seconds of each job's processes on a node
        self.job_freq: dict[tuple[str, int], int] = {}
        self.job_rss: dict[tuple[str, int], int] = {}
        self.job_busy: dict[tuple[str, int], float] = {}  # its busy share of the node over the last poll
        self.read_timeout_s = read_timeout_s
        self.nodes = {name: NodeEnergy() for name in nodes}
        # one file for all the nodes this agent hosts, named for them: agents that share a spool folder
        # (an emulated cluster's) never write the same file, and a poll costs one write, not one per
        # node (20,000 renames every poll on the largest emulated machines)
        key = hashlib.sha256("\n".join(sorted(self.nodes)).encode()).hexdigest()[:16]
        self._saved_path = os.path.join(spool, "energy", f"{key}.json")
        self._load()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # a job ended: read the nodes now, not at the next interval
        self.on_poll: Callable[[], object] | None = None  # told when a poll asked for by wake() is done
        self.after_poll: Callable[[], object] | None = None  # told after every poll (energy policies)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="energy-read")
        self._pending: dict[str, concurrent.futures.Future] = {}
        self._cpu_prev: dict[tuple[str, int], tuple[float, float]] = {}
        self._thread = threading.Thread(target=self._run, name="energy", daemon=True)
        self._last_save = 0.0


    def _load(self) -> None:
        """Each node's latest saved count, whichever agent saved it: a node keeps its count
        whichever agent hosts it next. The plugin's own counters restart with us: carry the joules,
        rebase the readings."""
        folder = os.path.join(self.spool, "energy")
        try:
            files = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".json")]
        except OSError:
            return
        saved_at: dict[str, float] = {}
        for path in files:
            try:
                with open(path) as handle:
                    data = json.load(handle)
            except (OSError, ValueError):
                continue
            for name, record in (data.items() if isinstance(data, dict) else ()):
                try:
                    at = float(record["time"])
                    if name in self.nodes and at >= saved_at.get(name, -1.0):
                        self.nodes[name] = NodeEnergy(joules=float(record["joules"]), watts=float(record["watts"]))
                        saved_at[name] = at
                except (KeyError, TypeError, ValueError):
                    continue

    def _save(self) -> None:
        path = self._saved_path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        text = json.dumps({name: {"joules": e.joules, "watts": e.watts, "time": e.time}
                           for name, e in self.nodes.items()})
        with open(path + ".tmp", "w") as handle:
            handle.write(text)
        os.replace(path + ".tmp", path)

    def start(self) -> None:
        if self.plugin.kind != "none" or self.model is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.read_timeout_s + 1)
            self._save()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        """Read the nodes as soon as the last read is WAKE_GAP_S old: a job that just ended gets a
        reading past its end, so that its energy is settled when its completion is recorded."""
        self._wake.set()

    def samples(self) -> dict[str, EnergySample]:
        """Each node's counter; with ``calc_adjustment`` (EnergyIPMICalcAdjustment) carried from
        the last reading to now at the last power, as Slurm does between two BMC reads."""
        now = time.time()
        with self._lock:
            return {n: self._adjusted(e, now) for n, e in self.nodes.items() if e.time}

    def errors(self) -> dict[str, str]:
        """Why each node whose sensor fails is unread (its energy is unknown, not zero)."""
        with self._lock:
            return {n: e.error for n, e in self.nodes.items() if e.error}

    def _adjusted(self, e: NodeEnergy, now: float) -> EnergySample:
        if self.calc_adjustment and not e.stale and now > e.time:
            return EnergySample(time=now, joules=e.joules + e.watts * (now - e.time), watts=e.watts)
        return EnergySample(time=e.time, joules=e.joules, watts=e.watts, stale=e.stale)

    def job_usage(self, node: str, job_id: int) -> tuple[float, int]:
        """A job's CPU seconds and RSS on a node as of the last poll."""
        with self._lock:
            return self.job_cpu.get((node, job_id), 0.0), self.job_rss.get((node, job_id), 0)

    def usage(self) -> dict[str, list[JobUsage]]:
        """Per node, its jobs' usage as of the last poll: one walk over the jobs for all the nodes
        (an agent may host a thousand nodes; a walk per node cost nodes x jobs every heartbeat)."""
        by_node: dict[str, list[JobUsage]] = {}
        with self._lock:
            gpu_j = self.gpus.job_joules if self.gpus is not None else {}
            for (n, j), cpu in self.job_cpu.items():
                by_node.setdefault(n, []).append(JobUsage(
                    job_id=j, cpu_s=round(cpu, 3), cpu_freq_khz=self.job_freq.get((n, j), 0),
                    rss_kb=self.job_rss.get((n, j), 0), gpu_j=round(gpu_j.get((n, j), 0.0), 3)))
        return by_node

    def busy_and_watts(self) -> tuple[dict[tuple[str, int], float], dict[str, float]]:
        """Each job's busy share of its node over the last poll, and each node's last watts."""
        with self._lock:
            return dict(self.job_busy), {n: e.watts for n, e in self.nodes.items()}

    def _loads(self, now: float, running: dict[str, dict[int, JobLoad]]) -> dict[str, list[tuple[float, int, int]]]:
        """Per node, each ``running`` job's load as (busy share of the node, kHz, highest kHz),
        and the jobs' CPU seconds brought up to date (a process that ended takes its time along:
        only rises count)."""
        reader = procstat.Reader()
        loads: dict[str, list[tuple[float, int, int]]] = {}
        seen = set()
        for node, jobs in running.items():
            for job_id, (pgids, khz, f_max, share) in jobs.items():
                key = (node, job_id)
                seen.add(key)
                from_cgroup = self.cgroup_usage(node, job_id) if self.cgroup_usage else None
                if from_cgroup is not None:
                    used, self.job_rss[key] = from_cgroup
                else:
                    total = reader.usage(pgids)
                    used, self.job_rss[key] = total.cpu_s, total.rss_kb
                previous = self._cpu_prev.get(key)
                self._cpu_prev[key] = (used, now)
                self.job_freq[key] = khz
                if previous is None:
                    self.job_cpu.setdefault(key, 0.0)
                    continue
                rise = max(0.0, used - previous[0])
                self.job_cpu[key] = self.job_cpu.get(key, 0.0) + rise
                if now > previous[1]:
                    busy = rise / (now - previous[1]) / max(1, self.cpus.get(node, 1)) / max(share, 0.01)
                    self.job_busy[key] = busy
                    loads.setdefault(node, []).append((busy, khz, f_max))
        for key in [k for k in self._cpu_prev if k not in seen]:
            del self._cpu_prev[key]
            self.job_cpu.pop(key, None)
            self.job_freq.pop(key, None)
            self.job_rss.pop(key, None)
            self.job_busy.pop(key, None)
        return loads

    def _publish(self, loads: dict[str, list[tuple[float, int, int]]]) -> None:
        # the BMC shows the off and switching watts itself: the model here is the node while on
        for node in self.nodes:
            path = os.path.join(self.spool, node, "model_watts")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as handle:
                handle.write(f"{self.model.model(node, loads.get(node, [])):.3f}\n")
            os.replace(path + ".tmp", path)

    def poll_once(self, now: float) -> None:
        """Read every node (each read with its time limit) and update the counters."""
        began = time.monotonic()
        # the agent's lock is taken (for the jobs) before ours, never while ours is held: the
        # profiler takes them in that order, and the other order would deadlock with it
        running = self.job_loads()
        held = self.gpus.job_gpus() if self.gpus is not None else {}
        with self._lock:
            loads = self._loads(now, running)
            if self.gpus is not None:
                self.gpus.poll(now, running, held)
        if self.model is not None and self.model is not self.plugin:
            self._publish(loads)
        if self.plugin.kind == "none":
            return
        futures = {}
        for name in self.nodes:
            pending = self._pending.get(name)
            if pending is not None and not pending.done():
                self.nodes[name].stale = True  # still stuck in its last read
                self.nodes[name].error = self.nodes[name].error or "sensor read still running"
                continue
            futures[name] = self._pool.submit(self._timed_read, name, now, began, loads.get(name, []))
        done, _late = concurrent.futures.wait(futures.values(), timeout=self.read_timeout_s)
        with self._lock:
            for name, future in futures.items():
                state = self.nodes[name]
                if future not in done or future.exception() is not None:
                    error = str(future.exception() if future in done
                                else f"no answer within {self.read_timeout_s:g} s")[:256]
                    if error != state.error:  # once per cause: a flapping sensor must not flood the log
                        log.warning("energy reading failed", extra={"node": name, "error": error})
                    state.stale, state.error = True, error
                    self._pending[name] = future
                    continue
                self._pending.pop(name, None)
                if state.error:
                    log.warning("energy reading back", extra={"node": name})
                self._update(state, *future.result())

    def _timed_read(self, node: str, now: float, began: float, load) -> tuple[float, float]:
        """A reading and when it was taken: a read slower than SLOW_READ_S (an IPMI exchange that
        had to be sent again) is stamped with the time it completed, not when the poll began."""
        value = self.plugin.read(node, now, load)
        took = time.monotonic() - began
        return value, now + took if took > SLOW_READ_S else now

    def _update(self, state: NodeEnergy, value: float, now: float) -> None:
        if self.plugin.kind == "power":
            if state.time:
                # a mean over the interval since the last reading counts as it is; a power sampled
                # at an instant is integrated with the trapezoid rule (Georgiou et al. 2014, eq. 1)
                mean = value if getattr(self.plugin, "interval_mean", False) else (state.watts + value) / 2
                state.joules += mean * (now - state.time)
            state.watts = value
        else:
            if not state.time:
                state.base = value - state.joules  # first reading since (re)start: continue the count
            joules = value - state.base
            if state.time and now > state.time:
                state.watts = (joules - state.joules) / (now - state.time)
            state.joules = joules
        state.time, state.stale, state.error = now, False, ""

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            asked = self._wake.is_set()
            self._wake.clear()
            try:
                self.poll_once(started)
                if started - self._last_save >= 10:
                    self._save()
                    self._last_save = started
            except Exception as exc:  # a broken sensor must not stop the meter
                log.error("energy polling failed", extra={"error": str(exc)})
            if self.after_poll is not None:
                try:
                    self.after_poll()
                except Exception as exc:  # a policy's failure must not stop the meter
                    log.error("energy policies failed", extra={"error": str(exc)})
            if asked and self.on_poll is not None:
                self.on_poll()
            self._wake.wait(max(0.0, self.interval_s - (time.time() - started)))
            # job ends come in bursts: they share a read, at most one per WAKE_GAP_S
            self._stop.wait(max(0.0, started + WAKE_GAP_S - time.time()))

"""The controller's power-saving shell (Slurm's power save, plus our policies): it keeps node
power flags, runs SuspendProgram / ResumeProgram with a hostlist, and times switches out.

- Suspend: a node chosen by the policies (wattsched.powersave) or by an admin becomes
  POWERING_DOWN (not schedulable), SuspendProgram runs, and after SuspendTimeout it is
  POWERED_DOWN (``idle~``): schedulable again, and counted at PowerSaveWatts by the power cap.
- Resume: a job allocated powered-down nodes stays CONFIGURING while ResumeProgram wakes them
  (POWERING_UP, ``#``); it is launched when every node has come up, its start time set then.
  A node is up when its agent reports it on since after the resume began (a real node boots
  a new agent; a virtual node's chassis finishes switching on). A node not up within
  ResumeTimeout goes DOWN and its job is requeued.
- A program that fails (non-zero exit) leaves no false state: a node it failed to suspend is
  on again (idle, its idle time counted anew); a node it failed to resume goes DOWN at once,
  its job requeued. The log line names the program and the nodes.
- Rates: at most SuspendRate suspends and ResumeRate resumes per minute (0: no limit);
  resumes for jobs are never held back, as a job would otherwise wait for a minute.
- Every change is a node event (POWERING_DOWN, POWERED_DOWN, POWERING_UP, POWERED_UP,
  the reason naming the job a resume was for), from which the saving report is made.
"""

from __future__ import annotations

import collections
import logging
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from wattsched import hostlist, plugins, powersave
from wattsched.config import Config
from wattsched.model import Node
from wattsched.nodestates import PowerFlag, PowerState

log = logging.getLogger("wattsched.controller.power")

RESUME_TIMEOUT_REASON = "ResumeTimeout reached"
RESUME_FAILED_REASON = "ResumeProgram failed"
SUSPEND_FAILED_REASON = "SuspendProgram failed"


@dataclass(slots=True)
class PowerProgram:
    """Run SuspendProgram (``suspend``) or ResumeProgram (``resume``) on some nodes."""

    kind: str
    nodes: list[str]


def program_argv(config: Config, kind: str, nodes: list[str]) -> list[str]:
    """The command for a hostlist: the configured program, or for virtual nodes ``wattsched power
    on|off`` through their emulated BMCs (the path real hardware takes)."""
    program = config.suspend_program if kind == "suspend" else config.resume_program
    names = hostlist.compress(nodes)
    if program:
        return [*shlex.split(program), names]
    return [sys.executable, "-m", "wattsched.cli.wattsched", "power", "off" if kind == "suspend" else "on",
            names, "--config", config.source]


class PowerSaving:
    def __init__(self, config: Config):
        self.config = config
        self.policies = plugins.power_save_policies(config)
        self.memories: dict[str, dict] = {}
        self.suspends: collections.deque[float] = collections.deque()
        self.resumes: collections.deque[float] = collections.deque()
        self.excluded = config.suspend_excluded
        # the metrics' counters, from the controller's start
        self.switched_off = self.switched_on = 0
        self._saved_j = self._saving_w = self._saved_at = 0.0
        # nodes whose SuspendProgram has not exited: not POWERED_DOWN (so not resumed) before it
        # has, or a slow program still switching its list off would switch off a node resumed
        # meanwhile (257 nodes powered off one by one outlast SuspendTimeout=2 on a loaded host)
        self.suspending: set[str] = set()

    def reconfigure(self, config: Config) -> None:
        """A re-read configuration: its policies and exclusions; the switches under way and the
        counters carry on."""
        self.config = config
        self.policies = plugins.power_save_policies(config)
        self.excluded = config.suspend_excluded
        self.memories = {}

    # --- the pure policies' view ------------------------------------------------------------------

    @staticmethod
    def node_state(node: Node) -> PowerState:
        return powersave.seen_state(node.power_state, node.drain)

    def snapshot(self, nodes: Iterable[Node], pending: list[powersave.PendingBrief],
                 releases: list[tuple[float, int]], power_snap, now: float) -> powersave.PowerSaveSnap:
        ps_nodes = tuple(powersave.PsNode(n.name, self.node_state(n), n.idle_since, n.name in self.excluded)
                         for n in nodes)
        return powersave.PowerSaveSnap(now, ps_nodes, tuple(pending), tuple(releases), power_snap,
                                       powersave.recent(self.suspends, now), powersave.recent(self.resumes, now))

    def decide(self, snap: powersave.PowerSaveSnap) -> tuple[list[str], list[str]]:
        off, on, self.memories = powersave.decide(self.policies, snap, self.memories, self.config.suspend_rate,
                                                  self.config.resume_rate)
        return off, on

    # --- switching ------------------------------------------------------------------------------

    def begin_suspend(self, node: Node, now: float) -> None:
        node.power, node.power_since, node.power_job = PowerFlag.POWERING_DOWN, now, 0
        self.suspends.append(now)
        self.switched_off += 1
        self.suspending.add(node.name)

    def program_done(self, kind: str, names: list[str]) -> None:
        """A SuspendProgram or ResumeProgram exited (well or not)."""
        if kind == "suspend":
            self.suspending.difference_update(names)

    def begin_resume(self, node: Node, now: float, job_id: int = 0) -> None:
        node.power, node.power_since, node.power_job = PowerFlag.POWERING_UP, now, job_id
        self.resumes.append(now)
        self.switched_on += 1

    @staticmethod
    def saving_watts(node: Node) -> float:
        """What a powered-down node saves against staying on idle."""
        idle = node.idle_watts or 0
        return max(0.0, idle - (idle if node.power_save_watts is None else node.power_save_watts))

    def accrue(self, now: float, saving_w: float) -> None:
        """Add the saving since the last tick at the rate then, and take the rate from now on."""
        self._saved_j = self.saved_joules(now)
        self._saving_w, self._saved_at = saving_w, now

    def saved_joules(self, now: float) -> float:
        return self._saved_j + (self._saving_w * max(0.0, now - self._saved_at) if self._saved_at else 0.0)

    def timed_out(self, node: Node, now: float) -> str | None:
        """The next flag of a node whose switch has run its time: POWERED_DOWN after
        SuspendTimeout, or DOWN (the returned reason) after ResumeTimeout."""
        if node.power == PowerFlag.POWERING_DOWN and now - node.power_since >= self.config.suspend_timeout_s \
                and node.name not in self.suspending:
            return PowerFlag.POWERED_DOWN
        if node.power == PowerFlag.POWERING_UP and now - node.power_since >= self.config.resume_timeout_s:
            return RESUME_TIMEOUT_REASON
        return None


def run_program(config: Config, action: PowerProgram, finished: Callable[[PowerProgram, str], None]) -> None:
    """Run the program in a thread of its own, as Slurm forks it: the controller never waits. Its
    end is reported through ``finished`` (from the thread) with "" or, for a program that failed
    (also logged with its nodes), the error."""
    argv = program_argv(config, action.kind, action.nodes)
    env = dict(os.environ, SLURM_CONF=config.source, WATTSCHED_CONF=config.source)
    nodes = hostlist.compress(action.nodes)

    def run() -> None:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            error = str(exc)
        else:
            if done.returncode == 0:
                finished(action, "")
                return
            error = f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
        log.error("power program failed", extra={"program": argv[0], "kind": action.kind, "nodes": nodes,
                                                  "error": error})
        finished(action, error)

    threading.Thread(target=run, name=f"power-{action.kind}", daemon=True).start()

"""The replay's mutable records: each simulated node (its power state, the jobs on it, what it
draws and has drawn) and each job (its times, its allocation, its pace and its energy). The engine
and its parts (simulator.clusterpower, simulator.capmeter) change them as virtual time passes;
simulator.result reads them at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

from wattsched.config import NodeConf
from wattsched.nodestates import PowerFlag
from wattsched.scheduling.records import NodeSnap
from wattsched.simulator.workload import SimJob

# what a node is doing, as its energy is counted
COMPUTING, IDLE, OFF, SWITCHING_ON, SWITCHING_OFF = "computing", "idle", "off", "switching_on", "switching_off"
CATEGORIES = (COMPUTING, IDLE, OFF, SWITCHING_ON, SWITCHING_OFF)

# a node's power flags, looked up once: an enum member's lookup costs ~90 ns against ~10 ns for a
# module constant (measured), and the engine compares them for every node of every job
ON, POWERED_OFF, WAKING, SLEEPING = PowerFlag.NONE, PowerFlag.POWERED_DOWN, PowerFlag.POWERING_UP, \
    PowerFlag.POWERING_DOWN


@dataclass(slots=True)
class SimNode:
    conf: NodeConf
    power: PowerFlag = ON
    jobs: dict[int, int] = field(default_factory=dict)  # jobs holding it (running or waiting) -> CPUs
    # the jobs computing on it -> the watts each adds to IdleWatts (kept, since its watts are asked for at
    # every start and end on it)
    draws: dict[int, float] = field(default_factory=dict)
    # its snapshot in each state it has been in, (allocated CPUs, memory, power) -> NodeSnap: a node goes
    # back and forth between a few, and an unchanged snapshot is the very same object (NodeMemo skips it)
    snaps: dict[tuple[int, int, str], NodeSnap] = field(default_factory=dict)
    alloc_cpus: int = 0  # what those jobs' allocations hold here, as the controller counts it
    alloc_mem_mb: int = 0
    idle_since: float = 0.0
    category: str = IDLE
    since: float = 0.0
    watts: float = 0.0
    joules: float = 0.0  # drawn since the start
    limit: float | None = None  # the moving budget's limit (None: none)
    khz: int | None = None  # the clock its limit holds it to (None: its own)
    mark: tuple[float, float] = (0.0, 0.0)  # (time, joules) at the budget's last turn


@dataclass(slots=True)
class JobRecord:
    job: SimJob
    nodes: int
    submit: float  # the trace's, or for a job following another, that one's end plus the think time
    start: float = -1.0
    end: float = -1.0
    alloc: list[str] = field(default_factory=list)
    alloc_cpus: dict[str, int] = field(default_factory=dict)
    alloc_mem_mb: dict[str, int] = field(default_factory=dict)
    waiting_for: int = 0  # nodes still switching on
    energy_j: float = 0.0
    freq_khz: int | None = None
    end_due: float = -1.0  # when its run ends (an END event of an earlier, cut-short run is ignored)
    preempted: str = ""  # CANCEL or REQUEUE while its GraceTime runs; "PREEMPTED" once cancelled
    preempted_by: int = 0
    requeues: int = 0
    suspended_at: float = -1.0  # when a preemptor suspended it (-1: it is not suspended)
    suspended_s: float = 0.0  # how long it has been suspended in all: its run and time limit last that much longer
    suspensions: int = 0
    # its progress: full-speed seconds of its run done by ``pace_since``, and the pace since (a power
    # limit slows it); its watts on all its nodes since ``watts_since``, for its energy
    done_s: float = 0.0
    pace: float = 1.0
    pace_since: float = 0.0
    watts: float = 0.0
    watts_since: float = 0.0
    timed_out: bool = False

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def runtime(self) -> float:
        """How long it ran: from its start to its end, but for the time it was suspended."""
        return self.end - self.start - self.suspended_s

    @property
    def response(self) -> float:
        return self.end - self.submit

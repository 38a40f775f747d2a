"""Energy policies (pure): the CPU frequency a running job should run at, chosen from its
signature at the frequency it runs at now. EAR's policies (Corbalan et al., "Energy optimization
and analysis with EAR", IEEE Cluster 2020) under their names and settings, with an analytic
model in place of EAR's coefficients learned per node.

A signature is measured over an interval at the job's current frequency f_ref: the share s of
the job's cycles spent waiting for memory (hardware counters, :func:`counted_signature`, or an
emulated node's application model), its CPI and memory bandwidth (shown to the user), the watts
of its node and the job's busy share b of the node.

The model (Hsu & Feng's beta model, with beta = 1 - s measured at f_ref): computing scales with
the clock, waiting for memory does not, and the job's busy share moves along the node's
busy-watts curve W (CpuFreqWatts, else IdleWatts + (MaxWatts - IdleWatts)(f / f_max)^3):

    T(f) / T(f_ref) = (1 - s) * f_ref / f + s
    P(f) = P_ref + b * (W(f) - W(f_ref))
    E(f) = P(f) * T(f)

Every figure is relative to the job's ceiling f_top, the highest frequency it may use (its
CPUs' top, or what CpuFreqDef or the power cap gave it); a policy never goes above it.

- ``monitoring``: measure only; the job keeps its frequency.
- ``min_energy`` (setting: the largest time penalty, default 0.10): the frequency of least
  projected energy among those whose projected time is at most (1 + penalty) * T(f_top).
- ``min_time`` (setting: the least efficiency gain, default 0.7): the job starts at a lower
  frequency (EnergyPolicyMinTimeFreq); from there, each higher frequency is taken when the time
  it gains is at least setting * the relative rise of the clock over the last one taken.

A job whose memory-bound share at f_top moves by more than PHASE_CHANGE since the signature that
decided its frequency has changed phase: its policy decides again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wattsched import cpufreq

POLICIES = ("monitoring", "min_energy", "min_time")
DEFAULT_PENALTY = 0.10
DEFAULT_MIN_GAIN = 0.7
PHASE_CHANGE = 0.10


# an emulated node's application model, from the job's environment: the share of its time at the
# highest frequency spent waiting for memory (0: compute-bound, the default; 1: memory-bound), in
# phases: "0.9@20,0.1" is 0.9 for the first 20 s of its run, then 0.1 to its end
APP_ENV = "WATTSCHED_APP_MEMORY_BOUND"
APP_PHASES_MAX = 16
Phases = tuple[tuple[float, float], ...]  # (memory-bound share, seconds; 0 for the last: to the end)


class PolicyError(ValueError):
    """An energy policy name or setting that is not one."""


def app_model(environment: Mapping[str, str]) -> Phases:
    """The application model a job declares for emulated nodes (APP_ENV), checked."""
    text = environment.get(APP_ENV, "").strip()
    if not text:
        return ((0.0, 0.0),)
    parts = text[:256].split(",")
    if len(text) > 256 or len(parts) > APP_PHASES_MAX:
        raise PolicyError(f"Invalid {APP_ENV}: at most {APP_PHASES_MAX} phases")
    phases = []
    for index, part in enumerate(parts):
        share_text, at, seconds_text = part.strip().partition("@")
        try:
            share, seconds = float(share_text), float(seconds_text) if at else 0.0
        except ValueError:
            share, seconds = -1.0, 0.0
        last = index == len(parts) - 1
        # the comparisons also refuse nan and infinities
        if not 0.0 <= share <= 1.0 or not 0.0 <= seconds < 1e9 or (not last and not seconds > 0) or (last and at):
            raise PolicyError(f"Invalid {APP_ENV}: {text[:32]} (shares from 0 to 1, each but the last "
                              "@seconds: 0.9@20,0.1)")
        phases.append((share, seconds))
    return tuple(phases)


def declared_model(environment: Mapping[str, str]) -> list[list[float]]:
    """The application model a job's environment declares, as its record keeps it: [] when it
    declares none (most jobs: no list each)."""
    return [list(phase) for phase in app_model(environment)] if APP_ENV in environment else []


def share_at(phases: Sequence[Sequence[float]], elapsed: float) -> float:
    """The memory-bound share of an application model ``elapsed`` seconds into the run."""
    for share, seconds in phases:
        if not seconds or elapsed < seconds:
            return share
        elapsed -= seconds
    return phases[-1][0] if phases else 0.0


def check(name: str) -> str:
    """A policy name as given (any case) -> its canonical name."""
    canonical = name.strip().lower()
    if canonical not in POLICIES:
        raise PolicyError(f"Invalid energy policy: {name} ({', '.join(POLICIES)})")
    return canonical


@dataclass(frozen=True, slots=True)
class NodePower:
    """What the model needs of a node: its idle and busy watts and its frequency table."""

    idle_watts: float
    max_watts: float
    freq_watts: tuple[tuple[int, int], ...] = ()

    def busy(self, khz: int, f_max: int) -> float:
        return cpufreq.busy_watts(khz, f_max, self.idle_watts, self.max_watts, self.freq_watts)


@dataclass(frozen=True, slots=True)
class Signature:
    """A job on one node over one interval, at ``khz``."""

    khz: int
    memory_share: float  # s: the share of its cycles stalled on memory
    watts: float  # its node's mean watts
    busy: float  # its busy share of the node (0..1)
    cpi: float = 0.0
    gbs: float = 0.0  # memory bandwidth, GB/s

    def bound_at(self, f_max: int) -> float:
        """Its memory-bound share at ``f_max``: comparable across the frequencies it was measured at."""
        compute = (1 - self.memory_share) * self.khz / f_max
        return self.memory_share / (self.memory_share + compute) if self.memory_share + compute > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """The frequency a policy chose and what the model projects for it, relative to the ceiling."""

    khz: int
    time_factor: float  # T(khz) / T(f_top)
    energy_factor: float  # E(khz) / E(f_top)
    watts: float  # projected node watts at khz


# a last-level cache miss waits this long for memory (a server's loaded latency, ~80-120 ns): what
# makes misses a share of stalled cycles where the CPU does not count back-end stalls itself
MEMORY_LATENCY_NS = 90.0
LINE_BYTES = 64  # a miss moves one cache line
MAX_STALL = 0.99  # a job stalled on every cycle still retires instructions


def counted_signature(counts: Mapping[str, float], seconds: float, khz: int, watts: float, busy: float
                      ) -> Signature | None:
    """A signature from a job's hardware counters over ``seconds`` at ``khz`` (noded.perfcounters):
    CPI is cycles over instructions; the stalled share is the back end's stalled cycles over
    cycles where the CPU counts them, else last-level misses x MEMORY_LATENCY_NS over the cycles
    (Hsu & Feng's off-chip share); bandwidth is misses x 64 bytes a second. None without cycles
    and instructions, or when too little ran to tell."""
    cycles, instructions = counts.get("cycles", 0.0), counts.get("instructions", 0.0)
    if cycles <= 0 or instructions <= 0 or seconds <= 0 or khz <= 0:
        return None
    misses = counts.get("cache-misses", 0.0)
    if counts.get("stalled-cycles-backend"):
        stalled = counts["stalled-cycles-backend"] / cycles
    elif "cache-misses" in counts:
        stalled = misses * MEMORY_LATENCY_NS * khz / 1e6 / cycles
    else:
        return None
    return Signature(khz=khz, memory_share=min(MAX_STALL, max(0.0, stalled)), watts=watts, busy=busy,
                     cpi=cycles / instructions, gbs=misses * LINE_BYTES / seconds / 1e9)


def time_ratio(sig: Signature, khz: int) -> float:
    """T(khz) / T(sig.khz)."""
    return (1 - sig.memory_share) * sig.khz / khz + sig.memory_share


def watts_at(sig: Signature, khz: int, node: NodePower, f_max: int) -> float:
    return max(0.0, sig.watts + min(1.0, sig.busy) * (node.busy(khz, f_max) - node.busy(sig.khz, f_max)))


def _project(sig: Signature, khz: int, top: int, node: NodePower, f_max: int) -> Decision:
    time_top, watts_top = time_ratio(sig, top), watts_at(sig, top, node, f_max)
    time, watts = time_ratio(sig, khz), watts_at(sig, khz, node, f_max)
    energy_top = time_top * watts_top
    return Decision(khz, time / time_top, time * watts / energy_top if energy_top > 0 else 1.0, watts)


def min_energy(sig: Signature, ladder: Sequence[int], top: int, node: NodePower, f_max: int,
               penalty: float) -> Decision:
    """The least projected energy within (1 + penalty) of the time at ``top``."""
    best = _project(sig, top, top, node, f_max)
    for khz in sorted(k for k in ladder if k < top):
        candidate = _project(sig, khz, top, node, f_max)
        if candidate.time_factor <= 1 + penalty and candidate.energy_factor < best.energy_factor:
            best = candidate
    return best


def min_time(sig: Signature, ladder: Sequence[int], top: int, start: int, node: NodePower, f_max: int,
             min_gain: float) -> Decision:
    """From ``start`` up to ``top``: each frequency whose time gain over the last one taken is at
    least ``min_gain`` times its clock rise (EAR's min_time)."""
    taken = min(start, top)
    for khz in sorted(k for k in ladder if taken < k <= top):
        clock_gain = (khz - taken) / taken
        time_gain = (time_ratio(sig, taken) - time_ratio(sig, khz)) / time_ratio(sig, taken)
        if time_gain >= min_gain * clock_gain:
            taken = khz
    return _project(sig, taken, top, node, f_max)


@dataclass(frozen=True, slots=True)
class Settings:
    """A job's policy and its setting (the penalty of min_energy, the least gain of min_time)."""

    name: str = "monitoring"
    setting: float = 0.0
    start_khz: int = 0  # min_time's starting frequency (0: the ladder's medium)


def start_khz(settings: Settings, ladder: Sequence[int], top: int) -> int:
    """The frequency a job starts at: min_time's starting one (never above the ceiling), else the ceiling."""
    if settings.name != "min_time":
        return top
    wanted = settings.start_khz or cpufreq.pick("medium", ladder)
    return min(top, cpufreq.pick(str(wanted), ladder))


def decide(settings: Settings, sig: Signature, ladder: Sequence[int], top: int, node: NodePower,
           f_max: int) -> Decision:
    """The frequency ``settings`` choose for a job with signature ``sig`` whose ceiling is ``top``."""
    if settings.name == "min_energy":
        return min_energy(sig, ladder, top, node, f_max, settings.setting)
    if settings.name == "min_time":
        return min_time(sig, ladder, top, start_khz(settings, ladder, top), node, f_max, settings.setting)
    return _project(sig, sig.khz, top, node, f_max)


def phase_changed(decided_bound: float, now: Signature, f_max: int) -> bool:
    """The job's memory-bound share (at ``f_max``) moved enough since its frequency was decided on a
    signature whose share was ``decided_bound`` to decide again."""
    return abs(decided_bound - now.bound_at(f_max)) > PHASE_CHANGE

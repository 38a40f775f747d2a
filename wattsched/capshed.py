"""Meeting a lowered cap (ours: no peer does it). When the power cap (or a power reservation that
begins) drops below what the running jobs may draw, the controller sheds load, in the order the
administrator chose with PowerCapShed, until the cluster's current maximum power (the cap's own
model: wattsched.capadmission) is under the cap again; and when there is room again, it gives back what
it took, in the reverse order of importance.

Steps, each over the jobs in shedding order (lowest QOS priority first, then the most recently
started first), until the excess is gone:

- ``cpufreq``: a job that did not pin ``--cpu-freq``, on nodes that all declare CpuFreqWatts, is
  moved down its nodes' common frequencies to the highest one that covers what is left of the
  excess (or the lowest, if none does);
- ``suspend``, ``requeue``, ``cancel``: a job its QOS lets be preempted (PreemptMode not OFF) is
  suspended, requeued or cancelled; its nodes fall to idle watts.

A node's watts follow its jobs: busy at the highest of their frequencies, idle when the jobs
left on it are all on their way out or suspended; a node powered down or down keeps its own.
Restoring: a job the cap suspended resumes, and a job it slowed gets its frequency back, when
that fits under the cap (highest QOS priority first, then the oldest).

Pure: the cap's snapshot, the running jobs and the QOS in; the actions out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from wattsched import preemption
from wattsched.capadmission import NodePower, PowerSnap
from wattsched.limits import Qos
from wattsched.nodestates import PowerState
from wattsched.scheduling.records import PartitionSnap, PreemptSettings, RunningJob

STEPS = ("cpufreq", "suspend", "requeue", "cancel")
Draw = tuple[int | None, float | None]  # a job on a node: its kHz, and the watts it was admitted at
_BUSY, _IDLE = PowerState.BUSY, PowerState.IDLE


@dataclass(frozen=True, slots=True)
class Shed:
    """One action: ``step`` (a STEPS name, or "resume" / "restore"), the job, the frequency it
    goes to (cpufreq, restore) and the watts the model says it saves (negative: it adds them)."""

    job_id: int
    step: str
    khz: int | None
    watts: float


class Model:
    """The cluster's current maximum power, node by node, as the jobs on them change."""

    def __init__(self, snap: PowerSnap, running: Iterable[RunningJob]):
        self.snap = snap
        # node -> job -> its kHz (None: full speed) and the watts a node it was admitted at (None: MaxWatts)
        self.jobs: dict[str, dict[int, Draw]] = {}
        for job in running:
            if not job.ending and not job.suspended:
                for name in job.cpus:
                    self.jobs.setdefault(name, {})[job.job_id] = (job.freq_khz, job.node_watts)
        self.watts = {name: self.node_watts(name) for name in snap.nodes}
        self.total = sum(self.watts.values())

    def node_watts(self, name: str, jobs: Mapping[int, Draw] | None = None) -> float:
        node: NodePower = self.snap.nodes[name]
        state = self.snap.states.get(name, _IDLE)
        if state != _BUSY:
            return node.watts(state)
        draws = (self.jobs.get(name, {}) if jobs is None else jobs).values()
        if not draws:
            return node.watts(_IDLE)  # what is left on it is going, or frozen
        return max(node.busy_for(khz, predicted) for khz, predicted in draws)

    def _after(self, job: RunningJob, khz: int | None, gone: bool) -> list[tuple[str, dict[int, Draw], float]]:
        """Each of the job's nodes with its jobs and watts once the job goes to ``khz`` (or away)."""
        result = []
        for name in job.cpus:
            if name in self.watts:
                jobs = dict(self.jobs.get(name, {}))
                if gone:
                    jobs.pop(job.job_id, None)
                else:
                    jobs[job.job_id] = (khz, job.node_watts)
                result.append((name, jobs, self.node_watts(name, jobs)))
        return result

    def saving(self, job: RunningJob, khz: int | None, gone: bool = False) -> float:
        """The watts saved by the job going to ``khz`` (or away)."""
        return sum(self.watts[name] - after for name, _jobs, after in self._after(job, khz, gone))

    def change(self, job: RunningJob, khz: int | None, gone: bool = False) -> float:
        """What :meth:`saving` says, applied to the model."""
        saved = 0.0
        for name, jobs, after in self._after(job, khz, gone):
            saved += self.watts[name] - after
            self.jobs[name], self.watts[name] = jobs, after
        self.total -= saved
        return saved


def _order(jobs: Iterable[RunningJob], qos: Mapping[str, Qos]) -> list[RunningJob]:
    """Shedding order: lowest QOS priority first, then the most recently started."""
    return sorted(jobs, key=lambda j: (qos[j.qos].priority if j.qos in qos else 0, -j.start, -j.job_id))


def _ladder(job: RunningJob, snap: PowerSnap) -> list[int]:
    """The frequencies all the job's nodes declare watts for, highest first ([] if one declares none)."""
    tables = [dict(snap.nodes[n].freq_watts) for n in job.cpus if n in snap.nodes]
    if not tables or not all(tables):
        return []
    return sorted(set.intersection(*(set(t) for t in tables)), reverse=True)


def shed(snap: PowerSnap, running: Collection[RunningJob], qos: Mapping[str, Qos], settings: PreemptSettings,
         steps: Iterable[str], partitions: Mapping[str, PartitionSnap] | None = None) -> list[Shed]:
    """What to do, step by step, to bring the current maximum power under the cap (``partitions``:
    their PreemptMode, under preempt/partition_prio)."""
    model = Model(snap, running)
    limit = snap.limit()
    if model.total <= limit:
        return []
    actions: list[Shed] = []
    live = [j for j in running if not j.ending and not j.suspended]
    taken: set[int] = set()
    for step in steps:
        for job in _order((j for j in live if j.job_id not in taken), qos):
            excess = model.total - limit
            if excess <= 0:
                return actions
            if step == "cpufreq":
                found = _slower(job, model, snap, excess)
                if found is not None:
                    khz, saved = found
                    model.change(job, khz)
                    actions.append(Shed(job.job_id, step, khz, saved))
            elif preemption.mode_of(qos.get(job.qos), settings, (partitions or {}).get(job.partition)) != \
                    preemption.OFF:
                saved = model.change(job, None, gone=True)
                taken.add(job.job_id)
                actions.append(Shed(job.job_id, step, None, saved))
    return actions


def _slower(job: RunningJob, model: Model, snap: PowerSnap, excess: float) -> tuple[int, float] | None:
    """The highest frequency below the job's that covers ``excess`` (else its lowest that saves
    anything), with the watts it saves; None when the job cannot be slowed."""
    if job.pinned:
        return None
    current = job.freq_khz
    lower = [f for f in _ladder(job, snap) if current is None or f < current]
    best: tuple[int, float] | None = None
    for khz in lower:  # highest first
        saved = model.saving(job, khz)
        if saved >= excess:
            return khz, saved
        if saved > 0 and (best is None or saved > best[1]):
            best = (khz, saved)
    return best


def restore(snap: PowerSnap, running: Collection[RunningJob], qos: Mapping[str, Qos], slowed: Mapping[int, int | None],
            suspended: Collection[int]) -> list[Shed]:
    """What the cap took that fits back under it: jobs it suspended resume, jobs it slowed get
    their frequency back (``slowed``: job -> the kHz it had, None: full speed)."""
    model = Model(snap, running)
    limit = snap.limit()
    actions: list[Shed] = []
    by_id = {j.job_id: j for j in running}
    for job in reversed(_order((by_id[j] for j in suspended if j in by_id), qos)):
        added = -model.saving(job, job.freq_khz)
        if model.total + added <= limit:
            model.change(job, job.freq_khz)
            actions.append(Shed(job.job_id, "resume", job.freq_khz, -added))
    for job in reversed(_order((by_id[j] for j in slowed if j in by_id and j not in suspended), qos)):
        before = slowed[job.job_id]
        added = -model.saving(job, before)
        if added > 0 and model.total + added <= limit:
            model.change(job, before)
            actions.append(Shed(job.job_id, "restore", before, -added))
    return actions

"""The controller's event loop: scheduling passes (at most every MIN_PASS_INTERVAL_S, and no more
often than twice the last pass took), the once-a-second timers, actions handed to the dispatcher,
profiles merged off the loop, and scontrol reconfigure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time

from wattsched import config as config_mod
from wattsched.accounting.store import AccountingStore
from wattsched.api import JobSubmit
from wattsched.auth import Identity
from wattsched.controller import failover, launching, nodes, statesave, timers, triggerctl
from wattsched.controller import jobs as jobs_mod
from wattsched.controller.acctsync import AccountingSync
from wattsched.controller.actions import Refused
from wattsched.controller.dispatch import Dispatcher
from wattsched.controller.listings import ListingGate
from wattsched.controller.powerlog import PowerLog, record_power
from wattsched.controller.priority import FairShareCalc
from wattsched.controller.startup import StartupError, load_plugins
from wattsched.controller.state import ClusterState
from wattsched.controller.store import Fenced, StateWriteError
from wattsched.model import Job

log = logging.getLogger("wattsched.controller")

MIN_PASS_INTERVAL_S = 0.05
TIMER_INTERVAL_S = 1.0


def due(now: float, kicked: bool, last_timers: float, last_pass: float, interval: float) -> tuple[bool, bool]:
    """Whether the timers are due (every second: time limits, node timeouts) and whether a pass is
    (when something happened, ``kicked``, and every ``interval``: Slurm's sched_interval)."""
    return now - last_timers >= TIMER_INTERVAL_S, kicked or now - last_pass >= interval


class Controller:
    """The imperative shell: owns the state, the loop, the dispatcher and the accounting thread."""

    def __init__(self, state: ClusterState, accounting: AccountingStore | None, sync: AccountingSync | None,
                 me: failover.Me | None = None):
        self.state, self.accounting, self.sync = state, accounting, sync
        self.me = me or failover.Me(0, state.config.slurmctld_host, state.config.slurmctld_addr)
        self.dispatcher: Dispatcher | None = None
        self.fairshare = (FairShareCalc(state, accounting, sync.flush if sync else None)
                          if accounting is not None else None)
        self._kick = asyncio.Event()
        self.started = time.time()
        self.power_log = PowerLog()
        self._merge_tries: dict[tuple[str, int, int], int] = {}
        self.listings = ListingGate()  # the job listings' turns (controller.listings)
        self._unsaved: list = []  # actions waiting for their state to be saved (a full disk, say)
        self._save_error = ""  # why the last state write failed ("" while writes succeed)

    def reconfigure(self) -> list[str]:
        """Re-read the configuration file (scontrol reconfigure, SIGHUP); Refused with the file's
        error, or with what cannot change without a restart, leaves everything as it was."""
        try:
            config = config_mod.load(self.state.config.source, switches_nodes=True)
            plugins = load_plugins(config)
        except (config_mod.ConfigError, StartupError) as exc:
            raise Refused(str(exc), 400) from exc
        changes = nodes.reconfigure(self.state, config, plugins, time.time())
        if self.dispatcher is not None:
            self.dispatcher.reconfigure_agents()
        triggerctl.note(self.state, "reconfig")
        log.warning("configuration re-read", extra={"source": config.source, "changes": "; ".join(changes)})
        self.changed()
        return changes

    def changed(self, schedule: bool = True) -> None:
        """Persist, wake the scheduler (unless the change gives it nothing to do: ``schedule``) and
        the accounting thread. While the state cannot be written this raises Refused (503): the
        change stays in memory and in the journal, and is saved by the first write that succeeds
        (the scheduling loop tries at every pass)."""
        saved = self._persist()
        if schedule:
            self._kick.set()
        if self.sync:
            self.sync.kick()
        if not saved:
            raise Refused(f"Unable to save the controller's state ({self._save_error}); the request will "
                          "take effect once the state can be saved", 503)

    def act(self, actions: list) -> None:
        """Persist, then carry out ``actions``: never before their state is saved, so no job is
        launched (or killed) that a restart would not know of."""
        self._unsaved.extend(actions)
        self.changed()

    def submit(self, req: JobSubmit, who: Identity, now: float) -> list[Job]:
        """A submission saved, or refused and gone: a job the state store did not take never existed.
        A held submission gives the scheduler nothing to do (its reason is set at submission, its
        priority is 0): no pass for it, which a stream of ``sbatch -H`` would otherwise get every
        MIN_PASS_INTERVAL_S, each over the whole queue."""
        jobs = jobs_mod.submit(self.state, req, who, now)
        try:
            self.changed(schedule=not req.hold)
        except Refused as exc:
            jobs_mod.withdraw(self.state, jobs)
            raise Refused(f"Slurm temporarily unable to accept job: {exc}", 503) from exc
        return jobs

    def _persist(self) -> bool:
        """Flush the journal; True when saved, and then the actions that waited for it go out. A
        controller whose lease another took saves nothing and sends nothing: it starts again as a
        standby, and the request that found it out is never answered (its client tries the next)."""
        try:
            statesave.flush(self.state)
        except Fenced as exc:
            failover.give_up(self.state.config, str(exc))
            raise
        except StateWriteError as exc:
            if not self._save_error:
                log.error("state save failed; requests are refused until it succeeds",
                          extra={"error": str(exc)})
            self._save_error = str(exc)
            return False
        if self._save_error:
            log.warning("state saved again")
            self._save_error = ""
        actions, self._unsaved = self._unsaved, []
        if actions and self.dispatcher:
            self.dispatcher.run(actions)
        return True

    async def loop(self) -> None:
        """The scheduling loop and, with accounting, the fair-share loop (cancelled together)."""
        await asyncio.gather(self._schedule(), *([self.fairshare.loop()] if self.fairshare else []))

    async def _schedule(self) -> None:
        last_timers = last_pass = 0.0
        while True:
            # a pass when something happened (a submission, a job's end: the kick) and every
            # interval; the timers every second whatever the interval
            interval = self.state.config.pass_interval_s()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=min(interval, TIMER_INTERVAL_S))
            # Coalesce bursts of submissions and job ends into one pass, and never let passes take
            # more than about a third of the loop's time (Slurm's sched_min_interval, made adaptive).
            await asyncio.sleep(max(MIN_PASS_INTERVAL_S, 2 * self.state.stats.last_ms / 1000))
            kicked = self._kick.is_set()
            self._kick.clear()
            now = time.time()
            started = time.perf_counter()
            actions = []
            timers_due, pass_due = due(now, kicked, last_timers, last_pass, interval)
            if not (timers_due or pass_due):
                continue
            if timers_due:  # limits, warnings, node timeouts: a second's resolution is Slurm's too
                if self.sync:
                    triggerctl.database(self.state, self.sync.healthy)
                actions += timers.check_timers(self.state, now)
                record_power(self.power_log, self.state, now)
                last_timers = now
            if pass_due:
                actions += launching.schedule(self.state, now)
                last_pass = now
                self.state.stats.pass_done((time.perf_counter() - started) * 1000)
            self._unsaved.extend(actions)
            self._persist()
            if self.sync:
                self.sync.kick()
            assert self.dispatcher is not None
            if timers_due:
                self.dispatcher.retry()
                self._merge_profiles()

    def _merge_profiles(self) -> None:
        """Merge the node profiles of ended jobs into one file per job, off the event loop; a file
        still open on a node (HDF5 locks it) is tried again for a minute."""
        due, self.state.profiles_due[:] = list(self.state.profiles_due), []
        for entry in due:
            task = asyncio.get_running_loop().run_in_executor(None, merge_profile, self.state.config.profile_dir,
                                                             *entry)
            task.add_done_callback(functools.partial(self._merged, entry))

    def _merged(self, entry: tuple[str, int, int], future: asyncio.Future) -> None:
        tries = self._merge_tries.get(entry, 0) + 1
        if future.result() or tries >= 60:
            self._merge_tries.pop(entry, None)
            return
        self._merge_tries[entry] = tries
        self.state.profiles_due.append(entry)


def merge_profile(profile_dir: str, user: str, uid: int, job_id: int) -> bool:
    """Merge a job's node profiles, handing the merged file to its user; False when a node file is
    still locked (try again later). h5py is imported here, at the first merge: a controller whose
    cluster keeps no profiles never holds it (about 13 MiB of its memory, measured)."""
    from wattsched.profiles import h5profile

    try:
        h5profile.merge(profile_dir, user, job_id, owner_uid=uid)
    except BlockingIOError:
        return False
    except (OSError, KeyError, ValueError) as exc:
        log.warning("profile merge failed", extra={"job": job_id, "error": str(exc)})
    return True

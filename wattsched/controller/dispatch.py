"""Carrying out the controller's actions on node agents: launching scripts, signalling jobs;
and running the power-saving programs.

Calls are asynchronous and grouped per agent. Failed calls are not lost: the state keeps
what still has to happen (a job not yet launched, a job still completing or being killed),
and :meth:`Dispatcher.retry` sends it again until an agent confirms it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, cast

import httpx
from pydantic import BaseModel

from wattsched import gres, prologs, snapbuild, states
from wattsched.api import (
    EPOCH_HEADER,
    BatchLaunch,
    FreezeJob,
    JobAllocation,
    JobFreq,
    LaunchBatch,
    Order,
    ProfileSeries,
    SignalJob,
)
from wattsched.config import Config
from wattsched.controller import failover, jobend, launching, powersavecontrol, statesave, triggerctl
from wattsched.controller import jobs as jobs_mod
from wattsched.controller.actions import Action, AdminProgram, Freeze, Launch, Mail, RunTrigger, SetFreq, Signal
from wattsched.controller.powersaving import PowerProgram, run_program
from wattsched.controller.state import ClusterState
from wattsched.controller.views import output_path
from wattsched.model import Job, JobScript

log = logging.getLogger("wattsched.controller.dispatch")
MAIL_PROG_TIMEOUT_S = 120  # Slurm's MAIL_PROG_TIMEOUT: a MailProg that hangs is killed then

RETRY_AFTER_S = 5.0


class Dispatcher:
    def __init__(self, state: ClusterState, on_change: Callable[[], None]):
        self.state = state
        self.on_change = on_change
        timeout = httpx.Timeout(state.config.message_timeout_s)
        self.client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=64))
        self._token = ""
        self._token_time = 0.0
        self._last_try: dict[tuple[str, int], float] = {}
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop power programs report back to
        self._stale: list[Action] = []  # actions held while this controller's lease may have ended
        self.triggers = triggerctl.Runner()

    def _headers(self) -> dict[str, str]:
        now = time.time()
        if now - self._token_time > 600:
            self._token = failover.controller_token(self.state.key)
            self._token_time = now
        return {"Authorization": f"Bearer {self._token}", EPOCH_HEADER: self.state.store.fencing_token}

    def run(self, actions: list[Action]) -> None:
        """Carry ``actions`` out; while this controller's lease may have ended (not renewed for most
        of its length: the state store is away, or this process was paused), they wait: another
        controller may be in charge, and agents must not take orders from two."""
        if not self.state.store.fresh():
            self._stale.extend(actions)
            return
        if self._stale:
            actions, self._stale = self._stale + actions, []
        launches: dict[str, list[Job]] = defaultdict(list)
        allocations: dict[str, list[JobAllocation]] = defaultdict(list)
        now = time.monotonic()
        for action in actions:
            if isinstance(action, Launch):
                job = action.job
                self._last_try[("launch", job.job_id)] = now
                by_agent: dict[str, dict[str, int]] = defaultdict(dict)
                for name, cpus in job.alloc.alloc_cpus.items():
                    node = self.state.nodes.get(name)
                    if node is not None and node.agent_url:
                        by_agent[node.agent_url][name] = cpus
                for url, share in by_agent.items():
                    allocations[url].append(job_allocation(self.state.config, job, share))
                batch_node = self.state.nodes[job.alloc.batch_host]
                if not job.request.interactive and batch_node.agent_url:
                    launches[batch_node.agent_url].append(job)
            elif isinstance(action, PowerProgram):
                self._loop = asyncio.get_running_loop()
                run_program(self.state.config, action, self._power_finished_in_thread)
            elif isinstance(action, AdminProgram):
                self._spawn(self._admin_program(action))
            elif isinstance(action, RunTrigger):
                self.triggers.start(action.trigger, time.time())
            elif isinstance(action, Mail):
                self._spawn(self._mail(action))
            elif isinstance(action, Freeze):
                for url, names in self._by_agent(action.nodes).items():
                    self._spawn(self._post(f"{url}/v1/freeze", FreezeJob(job_id=action.job_id, nodes=names,
                                                                         frozen=action.frozen)))
            elif isinstance(action, SetFreq):
                for url, names in self._by_agent(action.nodes).items():
                    self._spawn(self._post(f"{url}/v1/freq", JobFreq(job_id=action.job_id, nodes=names,
                                                                     khz=action.khz)))
            else:
                self._last_try[("signal", action.job_id)] = now
                for url, names in self._by_agent(action.nodes).items():
                    self._spawn(self._signal(url, action, names))
        for url in set(launches) | set(allocations):
            self._spawn(self._launch(url, launches.get(url, []), allocations.get(url, [])))

    def _by_agent(self, nodes: list[str]) -> dict[str, list[str]]:
        """Nodes grouped by the agent that hosts them (nodes with no agent yet are left out)."""
        by_agent: dict[str, list[str]] = defaultdict(list)
        for name in nodes:
            node = self.state.nodes.get(name)
            if node is not None and node.agent_url:
                by_agent[node.agent_url].append(name)
        return by_agent

    def _power_finished_in_thread(self, program: PowerProgram, error: str) -> None:
        assert self._loop is not None  # set before the program's thread starts
        self._loop.call_soon_threadsafe(self._power_finished, program, error)

    def _power_finished(self, program: PowerProgram, error: str) -> None:
        assert self.state.power_saving is not None
        if error:
            self.run(powersavecontrol.power_program_failed(self.state, program.kind, program.nodes, time.time()))
        self.state.power_saving.program_done(program.kind, program.nodes)
        self.on_change()

    async def _admin_program(self, program: AdminProgram) -> None:
        """PrologSlurmctld / EpilogSlurmctld in a thread; its end goes back to the state."""
        code, error = await asyncio.to_thread(prologs.run_program, program.path, program.env,
                                              self.state.config.prolog_epilog_timeout_s)
        self.run(launching.admin_program_done(self.state, program, code, error, time.time()))
        self.on_change()

    async def _mail(self, mail: Mail) -> None:
        """MailProg in a thread, as root runs the site's programs: its arguments are the subject and
        the recipient, each one argument (no shell), so a job's name or --mail-user cannot become
        another option or command."""
        program = self.state.config.mail_prog
        code, error = await asyncio.to_thread(prologs.run_program, program, mail.env, MAIL_PROG_TIMEOUT_S,
                                              ["-s", mail.subject, mail.recipient])
        if code:
            log.warning("MailProg failed", extra={"job": mail.job_id, "error": error})

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, url: str, body: BaseModel) -> dict | None:
        """POST to an agent; None (and a warning) when it fails, as the caller will retry later."""
        try:
            reply = await self.client.post(url, content=body.model_dump_json(),
                                           headers=self._headers() | {"Content-Type": "application/json"})
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("agent call failed, will retry", extra={"url": url, "error": str(exc)})
            return None
        return reply.json()

    async def _launch(self, url: str, jobs: list[Job], allocations: list[JobAllocation]) -> None:
        saved = statesave.scripts(self.state, {job.script_id for job in jobs})
        reply = await self._post(f"{url}/v1/launch", LaunchBatch(jobs=[self._batch(job, saved) for job in jobs],
                                                                 allocations=allocations))
        if reply is None:
            return
        for job_id in reply.get("accepted", []):
            jobs_mod.launched(self.state, job_id)
        self.on_change()

    def _batch(self, job: Job, saved: dict[int, JobScript]) -> BatchLaunch:
        script = saved.get(job.script_id)
        if script is None:  # (saved with the job in one transaction: only a damaged state.db has none)
            log.error("batch script missing from the state store", extra={"job_id": job.job_id})
            script = JobScript("", {})
        asked = job.request
        return BatchLaunch(job_id=job.job_id, node=job.alloc.batch_host, run=job.restart_count, uid=job.uid,
                           gid=job.gid, user=job.user, script=script.script or "", argv=asked.argv,
                           work_dir=asked.work_dir, environment=batch_environment(self.state, job, script.environment),
                           std_out=output_path(job, asked.std_out),
                           std_err=output_path(job, asked.std_err or asked.std_out),
                           std_in=output_path(job, asked.std_in), open_mode=asked.open_mode, rlimits=asked.rlimits)

    async def _signal(self, url: str, action: Signal, names: list[str]) -> None:
        body = SignalJob(job_id=action.job_id, nodes=names, signal=action.signal, batch_only=action.batch_only,
                         terminate=action.terminate, step_id=action.step_id, full=action.full)
        reply = await self._post(f"{url}/v1/signal", body)
        if reply is not None and action.terminate:
            for name in reply.get("clean", []):
                jobend.node_clean(self.state, action.job_id, name)
            self.on_change()

    def retry(self) -> None:
        """Send again what no agent has confirmed yet (and what waited for the lease); nothing while
        the lease may have ended (the same orders would pile up, once a second, while they wait)."""
        self.triggers.reap(time.time())
        if not self.state.store.fresh():
            return
        now = time.monotonic()
        actions: list[Action] = []
        for job in self.state.jobs.values():
            if job.state == states.RUNNING and not job.launched and not job.configuring:
                key = ("launch", job.job_id)
                if now - self._last_try.get(key, 0) > RETRY_AFTER_S:
                    actions.append(Launch(job))
            elif job.alloc.completing_nodes or (job.state == states.RUNNING and
                                                    (job.cancelled_by is not None or job.timed_out)):
                key = ("signal", job.job_id)
                if now - self._last_try.get(key, 0) > RETRY_AFTER_S:
                    nodes = job.alloc.completing_nodes or job.node_list
                    actions.append(Signal(job.job_id, nodes, 9 if job.alloc.completing_nodes else 15,
                                          terminate=True))
        for key in [k for k in self._last_try if k[1] not in self.state.jobs]:
            del self._last_try[key]
        if actions or self._stale:
            self.run(actions)

    async def shutdown_agents(self) -> list[str]:
        """Tell every agent to stop (scontrol shutdown), all at once; one that does not answer is
        said and left. The agents told, by URL."""
        urls = self._agent_urls()
        replies = await asyncio.gather(*(self._post(f"{url}/v1/shutdown", Order()) for url in urls))
        return [url for url, reply in zip(urls, replies, strict=True) if reply is not None]

    def reconfigure_agents(self) -> None:
        """Tell every agent to read the configuration again (scontrol reconfigure), as Slurm's
        controller tells its slurmds; one that does not answer reads it at its next start."""
        for url in self._agent_urls():
            self._spawn(self._post(f"{url}/v1/reconfigure", Order()))

    def _agent_urls(self) -> list[str]:
        """Every agent heard from, once each."""
        return sorted({node.agent_url for node in self.state.nodes.values() if node.agent_url})

    async def close(self) -> None:
        await self.client.aclose()


def job_allocation(config: Config, job: Job, nodes: dict[str, int]) -> JobAllocation:
    """What the agents of ``nodes`` need to run the job there: its CPUs, frequency and profile."""
    freq = dict(job.request.acctg_freq)
    defaults = dict(config.job_acct_gather_frequency)
    cpu_freq = job.request.cpu_freq or (str(job.capping.cpu_freq_khz) if job.capping.cpu_freq_khz else "")
    energy_s = freq.get("energy") or defaults.get("energy") or config.acct_gather_node_freq_s
    return JobAllocation(job_id=job.job_id, uid=job.uid, user=job.user, start_time=job.start_time, nodes=nodes,
                         mem_mb=job.alloc.alloc_mem_mb, run=job.restart_count, gid=job.gid, account=job.account,
                         partition=job.partition, job_name=job.name, node_list=job.alloc.nodes_expr,
                         cpu_freq=cpu_freq, profile=cast(list[ProfileSeries], list(job.request.profile)),
                         profile_energy_s=energy_s,
                         profile_task_s=freq.get("task") or defaults.get("task") or 30,
                         gpus={n: job.alloc.alloc_gpus[n] for n in nodes if job.alloc.alloc_gpus.get(n)},
                         power_limits=start_limits(config, job, nodes), **energy_settings(config, job))


def start_limits(config: Config, job: Job, nodes: Iterable[str]) -> dict[str, float]:
    """Under the moving budget, the limits a job that started under them holds its nodes to:
    what they draw at the frequency it was fitted at (the controller orders the same)."""
    if job.capping.start_limit_khz is None:
        return {}
    confs = {n.name: n for n in config.nodes}
    return {n: float(snapbuild.limit_watts(confs[n], job.capping.start_limit_khz)) for n in nodes if n in confs}


def energy_settings(config: Config, job: Job) -> dict[str, Any]:
    """The job's energy policy with its setting, and the application model it declared (checked
    at submission; a value that is not one counts as compute-bound)."""
    policy = job.energy.energy_policy or "monitoring"
    setting = {"min_energy": config.energy_policy_penalty, "min_time": config.energy_policy_min_gain}.get(policy, 0.0)
    return {"energy_policy": policy, "energy_setting": setting,
            "energy_start_khz": config.energy_policy_min_time_freq, "app_model": job.energy.app_model or [[0.0, 0.0]]}


def batch_environment(state: ClusterState, job: Job, exported: dict[str, str]) -> dict[str, str]:
    """The batch script's environment: the submitter's ``exported`` variables plus Slurm's."""
    from wattsched import hostlist

    nodes = job.node_list
    env = dict(exported)
    tasks_per_node = [job.alloc.tasks_per_node.get(n, 1) for n in nodes]
    env.update({
        "SLURM_JOB_ID": str(job.job_id), "SLURM_JOBID": str(job.job_id),
        "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_NODELIST": hostlist.compress(nodes), "SLURM_NODELIST": hostlist.compress(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)), "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(job.request.ntasks), "SLURM_NPROCS": str(job.request.ntasks),
        "SLURM_NTASKS_PER_NODE": _compress_counts(tasks_per_node),
        "SLURM_TASKS_PER_NODE": _compress_counts(tasks_per_node),
        "SLURM_JOB_CPUS_PER_NODE": _compress_counts([job.alloc.alloc_cpus[n] for n in nodes]),
        "SLURM_CPUS_ON_NODE": str(job.alloc.alloc_cpus.get(job.alloc.batch_host, 1)),
        "SLURM_CPUS_PER_TASK": str(job.request.cpus_per_task),
        "SLURM_SUBMIT_DIR": job.request.work_dir, "SLURM_SUBMIT_HOST": job.submit_host,
        "SLURM_JOB_PARTITION": job.partition, "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_USER": job.user, "SLURM_JOB_UID": str(job.uid), "SLURM_JOB_GID": str(job.gid),
        "SLURMD_NODENAME": job.alloc.batch_host, "SLURM_CLUSTER_NAME": state.config.cluster_name,
        "SLURM_JOB_QOS": "normal", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0", "SLURM_PRIO_PROCESS": str(job.nice),
        "SLURM_RESTART_COUNT": str(job.restart_count), "SLURM_EXPORT_ENV": "ALL",
        "SLURM_CONF": state.config.source, "ENVIRONMENT": "BATCH",
    })
    env.update(gres.request_environment(job.gpu_request))
    env.update(gres.environment(job.alloc.alloc_gpus.get(job.alloc.batch_host, []), state.config.gpus_hidden))
    if job.capping.cpu_freq_khz is not None or job.request.cpu_freq:
        # the frequency the job runs at: the user's --cpu-freq, or the one that fits the power cap
        env["SLURM_CPU_FREQ_REQ"] = job.request.cpu_freq or str(job.capping.cpu_freq_khz)
    if job.request.overcommit:
        env["SLURM_OVERCOMMIT"] = "1"
    if job.request.licenses:
        env["SLURM_JOB_LICENSES"] = job.request.licenses
    if job.time_limit_min is not None:
        env["SLURM_JOB_END_TIME"] = str(int(job.start_time + job.time_limit_min * 60))
    env["SLURM_JOB_START_TIME"] = str(int(job.start_time))
    if job.array_task_id is not None:
        env.update({
            "SLURM_ARRAY_JOB_ID": str(job.array_job_id), "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
            "SLURM_ARRAY_TASK_COUNT": str(job.array_task_count),
            "SLURM_ARRAY_TASK_MIN": str(job.array_task_min), "SLURM_ARRAY_TASK_MAX": str(job.array_task_max),
        })
    return env


def _compress_counts(counts: list[int]) -> str:
    """Slurm's run-length form: [2, 2, 1] -> '2(x2),1'."""
    parts: list[str] = []
    index = 0
    while index < len(counts):
        run = 1
        while index + run < len(counts) and counts[index + run] == counts[index]:
            run += 1
        parts.append(f"{counts[index]}(x{run})" if run > 1 else str(counts[index]))
        index += run
    return ",".join(parts)

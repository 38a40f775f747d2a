"""The node agent's HTTP API (v1): launch batch scripts, signal jobs, run step tasks."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from wattsched import auth, cpubind
from wattsched import config as config_mod
from wattsched.api import (
    EPOCH_HEADER,
    FreezeJob,
    JobFreq,
    LaunchBatch,
    Order,
    SignalJob,
    StatRequest,
    StepOnNode,
    StepPmi,
    StepTerminate,
    TaskInput,
    TaskLaunch,
)
from wattsched.noded import broadcast, procs, procstat, steps
from wattsched.noded.agent import Agent
from wattsched.noded.metrics import AgentCollector
from wattsched.plugins import mpi
from wattsched.service import exposition, httplimits, httpserve
from wattsched.service.httpauth import Who, loop_lifespan, metrics_access, require_role

log = logging.getLogger("wattsched.noded")

Controller = Annotated[auth.Identity, require_role("controller")]


async def _current_controller(request: Request, who: Controller) -> auth.Identity:
    """A controller's order, obeyed unless a newer controller has taken over (409)."""
    agent: Agent = request.app.state.agent
    token = request.headers.get(EPOCH_HEADER, "")
    if not agent.link.follow(token):
        raise HTTPException(409, f"Orders from a controller that lost its lease ({token[:60]}; the newest is "
                                 f"{agent.link.lease[0]}:{agent.link.lease[1]})")
    return who


Ctl = Annotated[auth.Identity, Depends(_current_controller)]


def reread(agent: Agent) -> None:
    """Read the configuration file again (scontrol reconfigure, SIGHUP); an error in it leaves the
    agent as it was (ConfigError)."""
    try:
        config = config_mod.load(agent.config.source)
    except config_mod.ConfigError as exc:
        log.error("configuration not re-read", extra={"error": str(exc)})
        raise
    agent.reconfigure(config)
    log.warning("configuration re-read", extra={"source": config.source})


def _on_hangup(agent: Agent) -> None:
    """SIGHUP re-reads the file, as it does Slurm's slurmd."""
    def hangup() -> None:
        with contextlib.suppress(config_mod.ConfigError):  # (said in the log)
            reread(agent)

    with contextlib.suppress(RuntimeError, NotImplementedError, ValueError):  # not the main thread (tests)
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup)


def create_app(agent: Agent) -> FastAPI:
    lifespan = loop_lifespan(agent.run, lambda: _on_hangup(agent), stop=agent.close)

    app = FastAPI(title="wattsched node agent", version="1", lifespan=lifespan)
    # the controller's launch messages carry whole batches of scripts; users reach only step launches
    httplimits.guard(app, 256 * 1024 * 1024, streamed={"/v1/bcast": 1 << 44})
    app.state.key = agent.key
    app.state.agent = agent  # the controllers' epochs (_current_controller)
    app.state.config = lambda: agent.config  # as the metrics routes read it

    @app.post("/v1/launch")
    async def launch(req: LaunchBatch, who: Ctl) -> dict[str, Any]:
        for alloc in req.allocations:
            agent.allocate(alloc)
        accepted = []
        for job in req.jobs:
            if job.node in agent.nodes:
                agent.launch_batch(job)
                accepted.append(job.job_id)
        return {"accepted": accepted}

    @app.post("/v1/signal")
    async def signal_job(req: SignalJob, who: Ctl) -> dict[str, Any]:
        return {"clean": agent.signal_job(req.job_id, req.nodes, req.signal, req.batch_only, req.terminate, req.full,
                                          req.step_id)}

    @app.post("/v1/shutdown")
    async def shutdown(req: Order, who: Ctl, request: Request) -> dict[str, Any]:
        """scontrol shutdown, through the controller: the agent stops as on SIGTERM."""
        log.warning("shutdown ordered by the controller")
        httpserve.stop(request.app)
        return {"shutdown": True}

    @app.post("/v1/reconfigure")
    async def reconfigure(req: Order, who: Ctl) -> dict[str, Any]:
        """scontrol reconfigure, through the controller: the agent reads its configuration file again
        (an error in it leaves the agent as it was, and is said)."""
        try:  # on the loop, where jobs are launched: none sees a half-changed agent (a small file)
            reread(agent)
        except config_mod.ConfigError as exc:
            raise HTTPException(400, str(exc)) from exc
        return {"done": True}

    @app.post("/v1/freeze")
    async def freeze(req: FreezeJob, who: Ctl) -> dict[str, Any]:
        return {"done": agent.freeze_job(req.job_id, req.nodes, req.frozen)}

    @app.post("/v1/freq")
    async def job_freq(req: JobFreq, who: Ctl) -> dict[str, Any]:
        return {"done": agent.set_job_freq(req.job_id, req.nodes, req.khz)}

    @app.post("/v1/steps/launch")
    async def launch_tasks(req: TaskLaunch, who: Who) -> StreamingResponse:
        cred = step_credential(agent, req, who)
        layout = {node: list(tasks) for node, tasks in cred["layout"].items()}
        if req.node not in layout or req.node not in agent.nodes:
            raise HTTPException(400, f"Node {req.node} is not part of this step on this agent")
        # srun -Z (root's): a step of no job, on no allocation: nothing confines it, nothing accounts it
        no_allocation = bool(cred.get("noalloc"))
        if not no_allocation and not await agent.runs_job(req.node, req.job_id):
            raise HTTPException(403, f"Invalid job credential: job {req.job_id} does not run on {req.node}")
        uid = int(cred["uid"])
        try:
            binding = cpubind.unbound(len(layout[req.node])) if no_allocation else \
                agent.task_binding(req.node, req.job_id, req.cpu_bind, len(layout[req.node]))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from exc
        gpu_env = {} if no_allocation else agent.gpu_environment(req.node, req.job_id)
        if gpu_env:  # the job's GPUs on this node, whatever the caller's environment says
            req = req.model_copy(update={"environment": {**req.environment, **gpu_env}})
        if req.mpi != "none" and req.mpi not in mpi.types():
            raise HTTPException(400, f"Invalid MPI type '{req.mpi}', --mpi=list for acceptable types")
        gid = procs.gid_of(uid)
        identity = agent.virtual.identity(req.node, req.job_id, uid, gid)
        pgids = agent.jobs_here.step_groups(req.node, req.job_id)
        key = (req.job_id, req.step_id, req.node)
        inputs = agent.step_inputs[key] = []

        async def stream() -> AsyncIterator[bytes]:
            try:
                async for line in steps.run_tasks(req, layout, uid, gid, auth.username(uid),
                                                  agent.config.kill_wait_s, pgids,
                                                  steps.unreported if no_allocation else agent.step_ended, inputs,
                                                  [] if no_allocation else
                                                  agent.join_step(req.node, req.job_id, str(req.step_id)),
                                                  {**agent.task_scripts, **identity, **_user_task_scripts(req),
                                                   "rlimits": agent.propagated(req.rlimits)},
                                                  binding, agent.live_steps):
                    yield line
            finally:
                if agent.step_inputs.get(key) is inputs:
                    del agent.step_inputs[key]
                if no_allocation:  # no job end will come for it: its traces go with its tasks
                    agent.jobs_here.drop_step_groups(req.node, req.job_id)
                    agent.virtual.release(req.node, req.job_id)

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    @app.post("/v1/steps/attach")
    async def step_attach(req: StepOnNode, who: Who) -> StreamingResponse:
        """sattach: the step's tasks' output here from now on, as NDJSON lines, until it ends."""
        step_credential(agent, req, who)
        step = agent.live_steps.get((req.job_id, req.step_id, req.node))
        if step is None:
            raise HTTPException(404, f"Job step {req.job_id}.{req.step_id} is not running on {req.node}")
        if len(step.watchers) >= steps.MAX_WATCHERS:
            raise HTTPException(429, f"Job step {req.job_id}.{req.step_id} already has {steps.MAX_WATCHERS} sattach")
        watcher: asyncio.Queue[bytes | None] = asyncio.Queue()  # (bounded by steps.WATCHER_BACKLOG)
        step.watchers.append(watcher)

        async def stream() -> AsyncIterator[bytes]:
            try:
                while (item := await watcher.get()) is not None:
                    yield item
            finally:
                with contextlib.suppress(ValueError):
                    step.watchers.remove(watcher)

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    @app.post("/v1/steps/stdin")
    async def step_stdin(req: TaskInput, who: Who) -> dict[str, Any]:
        """srun's standard input for the step's tasks on this node (those srun -i names)."""
        step_credential(agent, req, who)
        pipes = agent.step_inputs.get((req.job_id, req.step_id, req.node))
        if not pipes:
            return {"accepted": False}
        try:
            data = base64.b64decode(req.data, validate=True)
        except ValueError as exc:
            raise HTTPException(400, "stdin data is not base64") from exc
        await asyncio.get_running_loop().run_in_executor(None, steps.feed, pipes, data, req.eof)
        return {"accepted": True}

    @app.post("/v1/steps/pmi")
    async def step_pmi(req: StepPmi, who: Who) -> dict[str, Any]:
        """A fence's result from the step's nodes, for its MPI server here."""
        step_credential(agent, req, who)
        step = agent.live_steps.get((req.job_id, req.step_id, req.node))
        if step is None or step.mpi is None:
            return {"accepted": False}
        step.mpi.deliver(req.message.model_dump())
        return {"accepted": True}

    @app.post("/v1/steps/terminate")
    async def step_terminate(req: StepTerminate, who: Who) -> dict[str, Any]:
        """The step's tasks here end: a task failed elsewhere in the step (srun -K, an MPI abort); or
        srun sends them a signal (-W's time up, Ctrl-C)."""
        step_credential(agent, req, who)
        step = agent.live_steps.get((req.job_id, req.step_id, req.node))
        if step is None:
            return {"accepted": False}
        if req.signal:
            step.signal(req.signal)
        else:
            step.terminate(req.reason)
        return {"accepted": True}

    @app.post("/v1/bcast")
    async def bcast(request: Request, who: Who) -> dict[str, Any]:
        """sbcast's file for the job's nodes here, written as the job's user (wattsched.noded.broadcast)."""
        return await broadcast.receive(agent, request.stream(), who)

    @app.post("/v1/steps/stat")
    async def step_stat(req: StatRequest, who: Who) -> dict[str, Any]:
        """sstat: the tasks of the job's steps named, on its nodes here, so far (TaskStat records)."""
        cred = stat_credential(agent, req, who)
        uid, wanted = int(cred["uid"]), set(req.steps)
        # the job's process groups, read here on the loop that changes them; /proc in a worker thread
        leaders = {node: agent.job_pgids(node, req.job_id) for node in req.nodes}

        def sample() -> list[dict[str, Any]]:
            found = []
            for node, pgids in leaders.items():
                for (step, rank), task in procstat.tasks(pgids, uid).items():
                    if step in wanted:
                        found.append({"node": node, "step_id": step, "task": rank, "pids": task.pids,
                                      "user_cpu_s": task.user_cpu_s, "system_cpu_s": task.system_cpu_s,
                                      "max_rss_kb": task.rss_kb, "vsize_kb": task.vsize_kb, "pages": task.pages,
                                      "disk_read_b": task.read_b, "disk_write_b": task.write_b})
            return found

        return {"tasks": await asyncio.get_running_loop().run_in_executor(None, sample)}

    @app.get("/v1/ping")
    async def ping(who: Who) -> dict[str, Any]:
        return {"status": "UP", "nodes": list(agent.nodes), "controller_connected": agent.link.connected}

    collector = AgentCollector(agent.energy)

    @app.get("/metrics", dependencies=[metrics_access()])
    async def metrics(request: Request) -> Response:
        return exposition.render(request, [collector])

    return app


def step_credential(agent: Agent, req: TaskLaunch | TaskInput | StepOnNode, who: auth.Identity) -> dict[str, Any]:
    """The step credential the controller signed, checked: for this job and step, and the caller
    its owner (or root); 403 otherwise."""
    try:
        cred = auth.verify(agent.key, req.credential)
    except auth.AuthError as exc:
        raise HTTPException(403, f"Invalid job credential: {exc}") from exc
    if cred.get("job") != req.job_id or cred.get("step") != req.step_id:
        raise HTTPException(403, "Invalid job credential: wrong job or step")
    if who.uid != cred.get("uid") and who.uid != 0:
        raise HTTPException(403, "Access/permission denied")
    return cred


def stat_credential(agent: Agent, req: StatRequest, who: auth.Identity) -> dict[str, Any]:
    """sstat's leave from the controller: for this job, these steps and these nodes (all here), and
    the caller the job's user or root; 403 otherwise."""
    try:
        cred = auth.verify(agent.key, req.credential)
    except auth.AuthError as exc:
        raise HTTPException(403, f"Invalid job credential: {exc}") from exc
    granted, nodes = cred.get("stat"), cred.get("nodes")
    if cred.get("job") != req.job_id or not isinstance(granted, list) or not isinstance(nodes, list):
        raise HTTPException(403, "Invalid job credential: wrong job")
    if who.uid != cred.get("uid") and who.uid != 0:
        raise HTTPException(403, "Access/permission denied")
    if not set(req.steps) <= set(granted) or any(n not in nodes or n not in agent.nodes for n in req.nodes):
        raise HTTPException(403, "Invalid job credential: not for these steps or nodes here")
    return cred


def _user_task_scripts(req: TaskLaunch) -> dict[str, str]:
    """srun's --task-prolog/--task-epilog, for the step daemon to run once it is the user (never
    opened by the agent: root never touches a path a user named)."""
    return {key: path for key, path in (("user_task_prolog", req.task_prolog),
                                        ("user_task_epilog", req.task_epilog)) if path}

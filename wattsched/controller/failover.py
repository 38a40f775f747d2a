"""Several controllers, one active (SlurmctldHost listed more than once, primary first).

Which controller runs is decided by the lease in the state store (:mod:`controller.store`), not
by the controllers among themselves: a controller that cannot take it is a standby, which answers
pings and ``scontrol takeover`` and refuses everything else ("in standby mode") so that clients
try the next controller, while it waits for the lease to be free. The active one renews it from a
thread of its own, so a long scheduling pass never loses it; when it learns that another
controller took it, or hands it over on purpose, it runs SlurmctldPrimaryOffProg and starts again
as a standby (a new process: nothing of the old state survives into it). The primary, started
afresh, asks the controller in charge to hand over to it, as Slurm's primary does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from wattsched import auth
from wattsched.config import Config
from wattsched.controller.startup import StartupError
from wattsched.controller.store import Fenced, StateStore
from wattsched.service import httplimits, httpserve
from wattsched.service.httpauth import Who

log = logging.getLogger("wattsched.controller")

STANDBY_ENV = "WATTSCHED_STANDBY"  # set on the new process of a controller that gave the lease up
STANDBY_DETAIL = "Controller is in standby mode, try a different controller"  # Slurm's words
PROGRAM_TIMEOUT_S = 60


@dataclass(frozen=True)
class Me:
    """This controller: its place in the SlurmctldHost list (0: the primary), name and address."""

    index: int
    name: str
    addr: str


def mode_of(index: int, count: int) -> str:
    """Slurm's name for a controller's place among ``count``: primary, backup (of two), backupN."""
    if index == 0:
        return "primary"
    return "backup" if count == 2 else f"backup{index}"


def me(config: Config, name: str | None = None) -> Me:
    """The SlurmctldHost line this controller is: the one ``name`` gives, else the one named like
    this host (short name), else the only one."""
    hosts = config.slurmctld_hosts
    wanted = name or socket.gethostname().split(".")[0]
    for index, (host, addr) in enumerate(hosts):
        if host == wanted:
            return Me(index, host, addr)
    if name is None and len(hosts) == 1:
        return Me(0, *hosts[0])
    raise StartupError(f"This host ({wanted}) not a valid controller: SlurmctldHost names "
                       f"{', '.join(h for h, _ in hosts)}")


def run_program(path: str, what: str) -> None:
    """SlurmctldPrimaryOnProg or SlurmctldPrimaryOffProg; a failure is logged, never fatal."""
    if not path:
        return
    try:
        done = subprocess.run([path], capture_output=True, text=True, timeout=PROGRAM_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("%s failed", what, extra={"program": path, "error": str(exc)})
        return
    if done.returncode:
        log.error("%s failed", what, extra={"program": path, "exit": done.returncode,
                                            "error": done.stderr.strip()[-500:]})


_giving_up = threading.Lock()


def give_up(config: Config, why: str) -> None:
    """Stop being the active controller, from any thread: SlurmctldPrimaryOffProg, then this
    process becomes a new one, a standby. Nothing more is written or sent by this one."""
    if not _giving_up.acquire(blocking=False):
        return
    log.error("no longer the active controller: %s; starting again as a standby", why)
    run_program(config.slurmctld_primary_off_prog, "SlurmctldPrimaryOffProg")
    logging.shutdown()
    os.environ[STANDBY_ENV] = "1"
    # sys.orig_argv: the command line as given, `python -m ...` included
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


class Renewer:
    """Renews the active controller's lease every quarter of its length, on its own thread and
    database connection; gives up as soon as the lease turns out to be another's."""

    def __init__(self, config: Config, store: StateStore):
        self.config, self.store = config, store
        self._failing = False

    def start(self) -> None:
        threading.Thread(target=self._run, name="lease", daemon=True).start()

    def _run(self) -> None:
        interval = max(0.25, self.store.ttl / 4)
        while True:
            time.sleep(interval)
            try:
                self.store.renew()
            except Fenced as exc:
                give_up(self.config, str(exc))
                return
            except Exception as exc:  # the state store is away: orders stop once the lease is stale
                if not self._failing:
                    log.error("cannot renew the controller lease", extra={"error": str(exc)})
                self._failing = True
                continue
            if self._failing:
                log.warning("controller lease renewed again")
            self._failing = False


def controller_token(key: bytes) -> str:
    return auth.user_token(key, 0, "slurm", role="controller")


def ask_handover(config: Config, key: bytes, store: StateStore, heir: Me) -> str:
    """Ask the controller holding the lease to hand it to ``heir``; what happened, in words."""
    lease = store.lease()
    if not lease["holder"] or lease["left_s"] <= 0:
        return "the lease is free"
    if lease["holder"] == heir.name:
        return f"{heir.name} is already in control"
    addr = dict(config.slurmctld_hosts).get(lease["holder"])
    if addr is None:
        return f"the lease is held by {lease['holder']}, which is not configured"
    try:
        reply = httpx.post(f"http://{addr}:{config.slurmctld_port}/v1/relinquish", params={"heir": heir.name},
                           headers={"Authorization": f"Bearer {controller_token(key)}"}, timeout=10)
        reply.raise_for_status()
    except httpx.HTTPError as exc:
        return (f"{lease['holder']} did not answer ({exc}); taking over when its lease ends, "
                f"in {lease['left_s']:.0f} s")
    return f"{lease['holder']} handed over"


async def ping_all(config: Config, key: bytes, this: Me) -> list[dict[str, Any]]:
    """Every controller, UP or DOWN (this one, which asks, is UP), for slurmrestd's ping."""
    hosts = config.slurmctld_hosts
    pongs = []
    async with httpx.AsyncClient(timeout=2.0) as client:
        for index, (name, addr) in enumerate(hosts):
            started = time.monotonic()
            up = index == this.index
            if not up:
                try:
                    reply = await client.get(f"http://{addr}:{config.slurmctld_port}/v1/ping",
                                             headers={"Authorization": f"Bearer {controller_token(key)}"})
                    up = reply.status_code == 200
                except httpx.HTTPError:
                    up = False
            pongs.append({"hostname": name, "pinged": "UP" if up else "DOWN", "mode": mode_of(index, len(hosts)),
                          "latency": int((time.monotonic() - started) * 1e6)})
    return pongs


def _is_admin(config: Config, who: auth.Identity) -> bool:
    """permissions.is_admin as a standby can tell it: without the accounting's administrators."""
    return who.uid == 0 or who.user in config.admin_users or who.role == "controller"


def standby_app(config: Config, key: bytes, this: Me, store: StateStore) -> FastAPI:
    """What a standby serves: its ping, takeover, and a refusal of everything else that sends the
    client to the next controller."""
    app = FastAPI(title="wattsched controller (standby)", version="1", openapi_url=None)
    httplimits.guard(app, 64 * 1024)
    app.state.key = key

    @app.get("/v1/ping")
    async def ping(who: Who) -> dict[str, Any]:
        return {"status": "UP", "cluster": config.cluster_name, "user": who.user, "uid": who.uid, "admin": False,
                "host": this.name, "index": this.index, "active": False}

    @app.post("/v1/takeover")
    async def takeover(who: Who) -> dict[str, Any]:
        if not _is_admin(config, who):
            raise HTTPException(403, "Access/permission denied")
        return {"result": await asyncio.to_thread(ask_handover, config, key, store, this)}

    @app.post("/v1/shutdown")
    async def shutdown(who: Who, request: Request) -> dict[str, Any]:
        """scontrol shutdown reaches the backups too, as Slurm's: this standby stops."""
        if not _is_admin(config, who):
            raise HTTPException(403, "Invalid user id")
        log.warning("shutdown requested", extra={"user": who.user})
        httpserve.stop(request.app)
        return {"shutdown": True}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PATCH", "PUT", "DELETE"], include_in_schema=False)
    async def standby(request: Request) -> JSONResponse:
        return JSONResponse({"detail": STANDBY_DETAIL, "standby": True}, status_code=503)

    return app


DEAD_AFTER_REFUSALS = 2  # a holder whose port refuses connections this many looks in a row is gone


def _holder_gone(config: Config, store: StateStore, this: Me, refused: tuple[int, int]) -> tuple[int, int]:
    """Whether the controller in charge is gone, not merely silent: its host refuses connections
    on its port, which it never does while the process lives (a frozen or cut-off one lets them
    wait instead, and keeps its lease until it runs out). Returns (its epoch, refusals in a row at
    that epoch). Taking a lease at the epoch seen refused is safe: a process that no longer exists
    writes nothing, and one that took the lease since has moved the epoch on."""
    lease = store.lease()
    addr = dict(config.slurmctld_hosts).get(lease["holder"])
    if addr is None or lease["holder"] == this.name or lease["left_s"] <= 0:
        return (0, 0)
    try:
        with socket.create_connection((addr, config.slurmctld_port), timeout=0.5):
            return (0, 0)
    except ConnectionRefusedError:
        return (lease["epoch"], refused[1] + 1 if refused[0] == lease["epoch"] else 1)
    except OSError:  # no answer, no route: the lease decides
        return (0, 0)


def wait_for_lease(config: Config, key: bytes, this: Me, store: StateStore, sock: socket.socket) -> int:
    """Take the lease, serving as a standby on ``sock`` until it can, and keep it renewed: returns
    the epoch. ``sock`` is this controller's, bound before it takes the lease and kept until it
    gives it up: while this process lives its port never refuses a connection (see _holder_gone)."""
    ttl = float(config.slurmctld_timeout_s)
    again = os.environ.pop(STANDBY_ENV, "") == "1"  # this process follows one that gave the lease up
    # the only controller takes the lease at its start whatever its state (an older process of it
    # is fenced); one that has just given it up waits like a backup, so two never take turns
    epoch = store.acquire(this.name, ttl, force=len(config.slurmctld_hosts) == 1 and not again)
    if epoch is not None:
        Renewer(config, store).start()
        return epoch
    server = httpserve.server(standby_app(config, key, this, store), this.addr, config.slurmctld_port,
                              config.message_timeout_s)
    taken: list[int] = []

    def poll() -> None:
        if this.index == 0 and not again:  # the primary, started afresh, asks for control (Slurm's REQUEST_CONTROL)
            log.warning("asking for control", extra={"result": ask_handover(config, key, store, this)})
        failing = ""
        refused: tuple[int, int] = (0, 0)  # (epoch, times its holder's port refused a connection in a row)
        while not taken:
            try:
                refused = _holder_gone(config, store, this, refused)
                dead = refused[0] if refused[1] >= DEAD_AFTER_REFUSALS else 0
                got, failing = store.acquire(this.name, ttl, dead=dead), ""
            except Exception as exc:  # the state store is away: keep waiting (and say so once)
                if str(exc) != failing:
                    log.warning("cannot read the controller lease", extra={"error": str(exc).strip()[:500]})
                got, failing = None, str(exc)
            if got is not None:
                Renewer(config, store).start()  # before the state is loaded, which may take seconds
                taken.append(got)
                server.should_exit = True
                return
            time.sleep(min(1.0, ttl / 10))

    log.warning("standby: another controller is active",
                extra={"host": this.name, "mode": mode_of(this.index, len(config.slurmctld_hosts))})
    threading.Thread(target=poll, name="standby", daemon=True).start()
    httpserve.serve_on(server, sock)
    if not taken:  # stopped by a signal
        raise SystemExit(0)
    return taken[0]

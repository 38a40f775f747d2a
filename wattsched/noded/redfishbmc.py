"""Emulated BMCs over Redfish: one HTTPS service per virtual node, on the node's BMC port over TCP
(EmulatedBMCPort + its index, the numbers its IPMI service uses over UDP), all served by one
uvicorn server in ``wattsched bmc``, each telling its node by the port it was reached on.

Each serves what acct_gather_energy/redfish and power saving ask of a real BMC, laid out as
DMTF's Redfish schema lays it out (DSP0266, DSP0268):

- the service root, with sessions (``SessionService/Sessions``: a login gives an
  ``X-Auth-Token``, ended by DELETE or after SessionTimeout idle) and HTTP Basic as well;
- ``Systems/<node>`` with its PowerState (``PoweringOn``/``PoweringOff`` while it switches, over
  the node's SwitchOnTime/SwitchOffTime) and ``Actions/ComputerSystem.Reset``;
- ``Chassis/<node>`` with the node's power both ways a BMC may offer it: the current
  ``EnvironmentMetrics`` (``PowerWatts``) and the older, deprecated ``Power``
  (``PowerControl`` with ``PowerConsumedWatts`` and a minute's ``PowerMetrics``).

The watts and the chassis are those of the node's view (wattsched.noded.bmc.NodeView), the same
the node's IPMI service shows. Anyone on the host can reach these ports: every resource but the
service root asks for the cluster's BMC credentials (compared in constant time), a request body
is at most BODY_MAX bytes, a BMC keeps at most SESSIONS_MAX sessions (a login past that is
refused with 503, as real BMCs refuse it), and connections are bounded as the daemons' are
(wattsched.service.httpserve).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import secrets
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from wattsched import bmcauth, switching
from wattsched.config import Config
from wattsched.noded.bmc import NodeView, PowerStats
from wattsched.service import httplimits, httpserve

log = logging.getLogger("wattsched.bmc")
ROOT = "/redfish/v1"
BODY_MAX = 4096
SESSIONS_MAX = 16
SESSION_TIMEOUT_S = 600
RESET_TYPES = {"On": switching.ON, "ForceOn": switching.ON, "ForceOff": switching.OFF,
               "GracefulShutdown": switching.OFF, "ForceRestart": switching.ON, "GracefulRestart": switching.ON,
               "PowerCycle": switching.ON}
POWER_STATES = {switching.ON: "On", switching.OFF: "Off", switching.SWITCHING_ON: "PoweringOn",
                switching.SWITCHING_OFF: "PoweringOff"}
_UNAUTHENTICATED = {"/redfish", "/redfish/", ROOT, ROOT + "/"}


class Bmc:
    """One node's Redfish service: its view of the node, its sessions, its power statistics."""

    def __init__(self, view: NodeView):
        self.view = view
        self.stats = PowerStats()
        self.sessions: dict[str, tuple[str, str, float]] = {}  # id: (token, user, last used)
        self.lock = threading.Lock()

    def session_of(self, token: str, now: float) -> str | None:
        with self.lock:
            for ident, (known, user, used) in list(self.sessions.items()):
                if now - used > SESSION_TIMEOUT_S:
                    del self.sessions[ident]
                elif hmac.compare_digest(known, token):
                    self.sessions[ident] = (known, user, now)
                    return ident
        return None

    def open_session(self, user: str, now: float) -> tuple[str, str] | None:
        """A new session's (id, token), or None when the BMC holds as many as it may."""
        with self.lock:
            for ident, (_t, _u, used) in list(self.sessions.items()):
                if now - used > SESSION_TIMEOUT_S:
                    del self.sessions[ident]
            if len(self.sessions) >= SESSIONS_MAX:
                return None
            ident, token = secrets.token_hex(8), secrets.token_urlsafe(24)
            self.sessions[ident] = (token, user, now)
            return ident, token


def error(status: int, code: str, message: str) -> JSONResponse:
    """A Redfish error body (DSP0266 9.6.2), with the Base registry's message id."""
    return JSONResponse({"error": {"code": f"Base.1.8.{code}", "message": message,
                                   "@Message.ExtendedInfo": [{"MessageId": f"Base.1.8.{code}",
                                                              "Message": message}]}},
                        status_code=status, headers={"OData-Version": "4.0"})


def resource(kind: str, path: str, **fields: Any) -> JSONResponse:
    return JSONResponse({"@odata.type": kind, "@odata.id": path, **fields}, headers={"OData-Version": "4.0"})


def collection(kind: str, path: str, name: str, members: list[str]) -> JSONResponse:
    return resource(kind, path, Name=name, **{"Members@odata.count": len(members),
                                              "Members": [{"@odata.id": m} for m in members]})


def app(bmcs: dict[int, Bmc], users: dict[str, str]) -> FastAPI:
    """The Redfish services of the BMCs served here, by local port."""
    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    httplimits.guard(api, BODY_MAX)

    def bmc_of(request: Request) -> Bmc:
        return bmcs[request.scope["server"][1]]

    def own(request: Request, name: str, what: str) -> Bmc | JSONResponse:
        """The BMC reached, if ``name`` is its node; else 404: each BMC is its own node's alone."""
        bmc = bmc_of(request)
        return bmc if name == bmc.view.node.name else error(404, "ResourceMissingAtURI", f"No {what} {name!r} here")

    def valid(user: str, password: str) -> bool:
        known = users.get(user)
        return known is not None and hmac.compare_digest(known.encode(), password.encode())

    @api.middleware("http")
    async def authenticate(request: Request, call_next: Any) -> Any:
        if request.scope.get("server", (None, None))[1] not in bmcs:
            return error(404, "ResourceMissingAtURI", "No BMC is served on this port")
        path = request.url.path
        login = path.rstrip("/") == ROOT + "/SessionService/Sessions" and request.method == "POST"
        if path in _UNAUTHENTICATED or login:
            return await call_next(request)
        token = request.headers.get("x-auth-token")
        if token is not None and bmc_of(request).session_of(token, time.time()) is not None:
            return await call_next(request)
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user, password = "", ""
            if valid(user, password):
                return await call_next(request)
        answer = error(401, "NoValidSession", "There is no valid session established with the implementation")
        answer.headers["WWW-Authenticate"] = 'Basic realm="Redfish"'
        return answer

    @api.get("/redfish")
    def versions() -> JSONResponse:
        return JSONResponse({"v1": ROOT + "/"})

    @api.get(ROOT)
    @api.get(ROOT + "/")
    def service_root(request: Request) -> JSONResponse:
        node = bmc_of(request).view.node.name
        return resource("#ServiceRoot.v1_11_0.ServiceRoot", ROOT, Id="RootService", Name="Root Service",
                        RedfishVersion="1.15.0", UUID=_uuid(node),
                        Systems={"@odata.id": ROOT + "/Systems"}, Chassis={"@odata.id": ROOT + "/Chassis"},
                        SessionService={"@odata.id": ROOT + "/SessionService"},
                        Links={"Sessions": {"@odata.id": ROOT + "/SessionService/Sessions"}})

    @api.get(ROOT + "/SessionService")
    def session_service() -> JSONResponse:
        return resource("#SessionService.v1_1_8.SessionService", ROOT + "/SessionService", Id="SessionService",
                        Name="Session Service", ServiceEnabled=True, SessionTimeout=SESSION_TIMEOUT_S,
                        Sessions={"@odata.id": ROOT + "/SessionService/Sessions"})

    @api.get(ROOT + "/SessionService/Sessions")
    def sessions(request: Request) -> JSONResponse:
        bmc = bmc_of(request)
        with bmc.lock:
            idents = list(bmc.sessions)
        return collection("#SessionCollection.SessionCollection", ROOT + "/SessionService/Sessions",
                          "Session Collection", [f"{ROOT}/SessionService/Sessions/{i}" for i in idents])

    @api.post(ROOT + "/SessionService/Sessions")
    async def login(request: Request) -> JSONResponse:
        body = await _json(request)
        user, password = body.get("UserName"), body.get("Password")
        if not isinstance(user, str) or not isinstance(password, str):
            return error(400, "PropertyMissing", "UserName and Password are required")
        if not valid(user, password):
            return error(401, "InsufficientPrivilege", "Invalid user name or password")
        opened = bmc_of(request).open_session(user, time.time())
        if opened is None:
            return error(503, "SessionLimitExceeded", "The session establishment failed because the number "
                         "of simultaneous sessions exceeded the limit of the implementation")
        ident, token = opened
        path = f"{ROOT}/SessionService/Sessions/{ident}"
        answer = resource("#Session.v1_6_0.Session", path, Id=ident, Name="User Session", UserName=user)
        answer.status_code = 201
        answer.headers["X-Auth-Token"], answer.headers["Location"] = token, path
        return answer

    @api.get(ROOT + "/SessionService/Sessions/{ident}")
    def session(request: Request, ident: str) -> JSONResponse:
        bmc = bmc_of(request)
        with bmc.lock:
            known = bmc.sessions.get(ident)
        if known is None:
            return error(404, "ResourceMissingAtURI", "No such session")
        return resource("#Session.v1_6_0.Session", f"{ROOT}/SessionService/Sessions/{ident}", Id=ident,
                        Name="User Session", UserName=known[1])

    @api.delete(ROOT + "/SessionService/Sessions/{ident}")
    def logout(request: Request, ident: str) -> Response:
        bmc = bmc_of(request)
        with bmc.lock:
            known = bmc.sessions.pop(ident, None)
        if known is None:
            return error(404, "ResourceMissingAtURI", "No such session")
        return Response(status_code=204)

    @api.get(ROOT + "/Systems")
    def systems(request: Request) -> JSONResponse:
        node = bmc_of(request).view.node.name
        return collection("#ComputerSystemCollection.ComputerSystemCollection", ROOT + "/Systems",
                          "Computer System Collection", [f"{ROOT}/Systems/{node}"])

    @api.get(ROOT + "/Systems/{name}")
    def system(request: Request, name: str) -> JSONResponse:
        bmc = own(request, name, "system")
        if isinstance(bmc, JSONResponse):
            return bmc
        view, path = bmc.view, f"{ROOT}/Systems/{name}"
        return resource("#ComputerSystem.v1_20_0.ComputerSystem", path, Id=name, Name=name, UUID=_uuid(name),
                        SystemType="Physical", PowerState=_power_state(view),
                        ProcessorSummary={"Count": view.node.sockets, "LogicalProcessorCount": view.node.cpus},
                        MemorySummary={"TotalSystemMemoryGiB": round(view.node.real_memory_mb / 1024, 2)},
                        Links={"Chassis": [{"@odata.id": f"{ROOT}/Chassis/{name}"}]},
                        Actions={"#ComputerSystem.Reset": {
                            "target": f"{path}/Actions/ComputerSystem.Reset",
                            "ResetType@Redfish.AllowableValues": list(RESET_TYPES)}})

    @api.post(ROOT + "/Systems/{name}/Actions/ComputerSystem.Reset")
    async def reset(request: Request, name: str) -> Response:
        bmc = own(request, name, "system")
        if isinstance(bmc, JSONResponse):
            return bmc
        kind = (await _json(request)).get("ResetType")
        if kind not in RESET_TYPES:
            return error(400, "ActionParameterValueNotInList",
                         f"ResetType must be one of {', '.join(RESET_TYPES)}")
        bmc.view.set_power(RESET_TYPES[kind])
        return Response(status_code=204)

    @api.get(ROOT + "/Chassis")
    def chassis_collection(request: Request) -> JSONResponse:
        node = bmc_of(request).view.node.name
        return collection("#ChassisCollection.ChassisCollection", ROOT + "/Chassis", "Chassis Collection",
                          [f"{ROOT}/Chassis/{node}"])

    @api.get(ROOT + "/Chassis/{name}")
    def chassis(request: Request, name: str) -> JSONResponse:
        bmc = own(request, name, "chassis")
        if isinstance(bmc, JSONResponse):
            return bmc
        path = f"{ROOT}/Chassis/{name}"
        return resource("#Chassis.v1_23_0.Chassis", path, Id=name, Name=name, ChassisType="RackMount",
                        PowerState=_power_state(bmc.view),
                        EnvironmentMetrics={"@odata.id": f"{path}/EnvironmentMetrics"},
                        Power={"@odata.id": f"{path}/Power"},
                        Links={"ComputerSystems": [{"@odata.id": f"{ROOT}/Systems/{name}"}]})

    def reading(request: Request, name: str) -> tuple[float, tuple[float, float, float, float]] | JSONResponse:
        """The chassis' watts now and its minute's statistics, or 404 for another node's chassis."""
        bmc = own(request, name, "chassis")
        if isinstance(bmc, JSONResponse):
            return bmc
        now = time.time()
        watts = bmc.view.watts(now)
        return watts, bmc.stats.add(now, watts)

    @api.get(ROOT + "/Chassis/{name}/EnvironmentMetrics")
    def environment(request: Request, name: str) -> JSONResponse:
        read = reading(request, name)
        if isinstance(read, JSONResponse):
            return read
        path = f"{ROOT}/Chassis/{name}/EnvironmentMetrics"
        return resource("#EnvironmentMetrics.v1_3_2.EnvironmentMetrics", path, Id="EnvironmentMetrics",
                        Name="Chassis Environment Metrics", PowerWatts={"Reading": round(read[0], 2)})

    @api.get(ROOT + "/Chassis/{name}/Power")
    def power(request: Request, name: str) -> JSONResponse:
        read = reading(request, name)
        if isinstance(read, JSONResponse):
            return read
        watts, (least, most, mean, _period) = read
        path = f"{ROOT}/Chassis/{name}/Power"
        control = {"@odata.id": f"{path}#/PowerControl/0", "MemberId": "0", "Name": "System Power Control",
                   "PowerConsumedWatts": round(watts, 2),
                   "PowerMetrics": {"IntervalInMin": 1, "MinConsumedWatts": round(least, 2),
                                    "MaxConsumedWatts": round(most, 2), "AverageConsumedWatts": round(mean, 2)}}
        return resource("#Power.v1_7_3.Power", path, Id="Power", Name="Power", PowerControl=[control])

    return api


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _power_state(view: NodeView) -> str:
    return POWER_STATES[view.state(time.time())]


def _uuid(node: str) -> str:
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.bmc.wattsched"))


def serve(config: Config, views: dict[int, NodeView]) -> None:
    """Serve the nodes' Redfish services until the process ends."""
    user, password = bmcauth.credentials(config, "redfish")
    _ca, cert, key = bmcauth.emulated_tls(config.state_save_location)
    bmcs = {port: Bmc(view) for port, view in views.items()}
    limit = max(64, httpserve.raise_fd_limit() - httpserve.HEADROOM - len(bmcs))
    protocol = httpserve.guarded_protocol(float(config.message_timeout_s), limit)
    sockets = []
    for port, bmc in list(bmcs.items()):
        try:
            sockets.append(httpserve.listen("127.0.0.1", port))
        except OSError as exc:  # that node's BMC is unreachable, as a real one may be; the others serve
            log.error("emulated BMC cannot listen", extra={"node": bmc.view.node.name, "port": port,
                                                            "error": str(exc)})
            del bmcs[port]
    if not sockets:
        raise OSError("no emulated Redfish BMC could listen on its port")
    server = uvicorn.Server(uvicorn.Config(app(bmcs, {user: password}), http=protocol, log_level="warning",
                                           access_log=False, ssl_certfile=cert, ssl_keyfile=key,
                                           timeout_graceful_shutdown=1))
    server.run(sockets=sockets)

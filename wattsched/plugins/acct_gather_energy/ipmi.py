"""acct_gather_energy/ipmi: node power from the node's BMC over RMCP+ (IPMI 2.0 over UDP), with
pyghmi as the client.

The reading is DCMI "Get Power Reading" (current watts), or, with ``EnergyIPMIPowerSensors``,
the sum of those named sensors read through the BMC's SDR. Each node's BMC is its
``BmcAddr`` (``host[:port]``, ``%n`` for the node name); with ``EmulatedNodes=YES`` and no
BmcAddr, the node's emulated BMC on 127.0.0.1 (wattsched.noded.bmc). Credentials are
EnergyIPMIUsername / EnergyIPMIPassword. The agent integrates the watts into joules (Georgiou et al. 2014,
eq. 1); a read that does not answer within EnergyIPMITimeout fails, and a BMC that hangs only
leaves its own node stale.

pyghmi keeps a session whose login failed in its table of sessions being set up, and the next
client for the same BMC waits on it forever: after any failure we evict it, so that a BMC that
was unreachable for a while is read again once it answers.

pyghmi shares one IO thread among all the sessions of a process, and logins and exchanges
running at once from several threads lose replies (an agent hosting many virtual nodes reads
many BMCs): so everything pyghmi does here is done one call at a time. So that a BMC that does
not answer cannot hold the others up, each read first sends it a sessionless "Get Channel
Authentication Capabilities" request (what ipmitool sends first; any BMC answers it) on a
socket of our own, and goes no further without an answer within PROBE_S.

The same client switches nodes for power saving (``wattsched power on|off``, the default
Suspend/ResumeProgram of virtual nodes): IPMI chassis control and chassis status.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from pyghmi import exceptions as ipmi_errors
from pyghmi.ipmi import command as ipmi_command
from pyghmi.ipmi.private import session as ipmi_session

from wattsched import bmcauth
from wattsched.config import Config, NodeConf

EXCHANGE_S = 1.0  # before pyghmi's first retransmission
PROBE_S = 0.5


def _auth_capabilities_request() -> bytes:
    """IPMI 1.5 sessionless Get Channel Authentication Capabilities (netfn App, cmd 0x38) for
    the current channel, IPMI 2.0 extended data asked for, administrator level."""
    header = bytes([0x20, 0x06 << 2])
    body = bytes([0x81, 0x00, 0x38, 0x8E, 0x04])
    message = header + bytes([-sum(header) & 0xFF]) + body + bytes([-sum(body) & 0xFF])
    return b"\x06\x00\xff\x07" + b"\x00" + b"\x00" * 8 + bytes([len(message)]) + message


PROBE = _auth_capabilities_request()


def bmc_port(config: Config, node: NodeConf) -> int:
    """The loopback port of a virtual node's emulated BMC: EmulatedBMCPort + its index."""
    return config.emulated_bmc_port + [n.name for n in config.nodes].index(node.name)


def bmc_endpoint(config: Config, node: NodeConf, default_port: int = 623) -> tuple[str, int]:
    """(host, port) of the node's BMC: its BmcAddr, the port the protocol's unless it names one."""
    if node.bmc_addr:
        host, _, port = node.bmc_addr.replace("%n", node.name).partition(":")
        return host, int(port or default_port)
    if config.emulated_nodes:
        return "127.0.0.1", bmc_port(config, node)
    raise ValueError(f"node {node.name} has no BmcAddr for its BMC")


class IpmiEnergy:
    kind = "power"

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.endpoints = {n.name: bmc_endpoint(config, n) for n in nodes}
        self.user, self.password = bmcauth.credentials(config)
        self.sensors = config.energy_ipmi_power_sensors
        self.timeout_s = config.energy_ipmi_timeout_s
        self._sessions: dict[str, ipmi_command.Command] = {}
        self._lock = threading.Lock()  # over the table of sessions
        self._pyghmi = threading.Lock()  # one pyghmi call at a time

    def session(self, node: str) -> ipmi_command.Command:
        with self._lock:
            session = self._sessions.get(node)
        if session is None:
            host, port = self.endpoints[node]
            with self._pyghmi:
                session = ipmi_command.Command(bmc=host, userid=self.user, password=self.password, port=port,
                                               keepalive=False)
            with self._lock:
                self._sessions[node] = session
        return session

    def _forget(self, node: str) -> None:
        """Log in afresh next time, past pyghmi's leftover of a failed login."""
        host, port = self.endpoints[node]
        with self._lock:
            self._sessions.pop(node, None)
        stale = ipmi_session.Session.initting_sessions.pop((host, self.user, self.password, port, None), None)
        if stale is not None:
            stale.broken = True

    def _probe(self, node: str) -> None:
        host, port = self.endpoints[node]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(PROBE_S)
            try:
                sock.sendto(PROBE, (host, port))
                sock.recvfrom(512)
            except OSError as exc:  # timeout, refused, unreachable
                self._forget(node)
                raise OSError(f"BMC of {node} at {host}:{port} does not answer") from exc

    def read(self, node: str, now: float, load: object) -> float:
        del now, load
        if self.sensors:
            return self._exchange(node, lambda session: float(sum(
                session.get_sensor_reading(name).value or 0 for name in self.sensors)))
        reply = self._exchange(node, lambda session: session.raw_command(
            netfn=0x2C, command=0x02, data=(0xDC, 1, 0, 0), timeout=EXCHANGE_S))
        return float(struct.unpack("<H", bytes(reply["data"][1:3]))[0])

    def chassis(self, node: str, target: str | None = None) -> str:
        """Switch the node's chassis ``on`` or ``off`` (None: only ask); returns its power state."""
        reply = self._exchange(node, lambda session: session.get_power() if target is None
                               else session.set_power(target, wait=False))
        return str(reply.get("powerstate", target))

    def _exchange(self, node: str, call: Callable[[Any], Any]) -> Any:
        """One call on the node's session, once its BMC answers; a failure or an error reply is an
        OSError naming the node, and drops its session so the next call logs in again."""
        try:
            self._probe(node)
            session = self.session(node)
            with self._pyghmi:
                reply = call(session)
        except (ipmi_errors.IpmiException, OSError) as exc:
            self._forget(node)
            raise OSError(f"BMC of {node}: {exc or 'no answer'}") from exc
        if isinstance(reply, float):
            return reply
        if not reply or "error" in reply:
            self._forget(node)
            raise OSError(f"BMC of {node}: {reply['error'] if reply else 'no answer'}")
        return reply

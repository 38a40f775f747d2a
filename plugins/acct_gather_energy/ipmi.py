"""acct_gather_energy/ipmi: node power from the node's BMC over RMCP+ (IPMI 2.0 over UDP), with
pyghmi as the client.

The reading is DCMI "Get Power Reading" (current watts), or, with ``EnergyIPMIPowerSensors``,
the sum of those named sensors read through the BMC's SDR. Each node's BMC is its
``BmcAddr`` (``host[:port]``, ``%n`` for the node name); with ``EmulatedNodes=YES`` and no
BmcAddr, the node's emulated BMC on 127.0.0.1 (wattsched.noded.bmc). Credentials are
EnergyIPMIUsername / EnergyIPMIPassword. The agent integrates the watts into joules (seed 004,
eq. 1); a read that does not answer within EnergyIPMITimeout fails, and a BMC that hangs only
leaves its own node stale.
"""

from __future__ import annotations

import struct
import threading

from pyghmi import exceptions as ipmi_errors
from pyghmi.ipmi import command as ipmi_command
from wattsched.config import Config, NodeConf


def bmc_endpoint(config: Config, node: NodeConf) -> tuple[str, int]:
    if node.bmc_addr:
        host, _, port = node.bmc_addr.replace("%n", node.name).partition(":")
        return host, int(port or 623)
    if config.emulated_nodes:
        from wattsched.noded.bmc import bmc_port

        return "127.0.0.1", bmc_port(config, node)
    raise ValueError(f"node {node.name} has no BmcAddr for acct_gather_energy/ipmi")


class IpmiEnergy:
    kind = "power"

    def __init__(self, config: Config, nodes: list[NodeConf]):
        self.endpoints = {n.name: bmc_endpoint(config, n) for n in nodes}
        self.user = config.energy_ipmi_username or "admin"
        self.password = config.energy_ipmi_password or "admin"
        self.sensors = config.energy_ipmi_power_sensors
        self.timeout_s = config.energy_ipmi_timeout_s
        self._sessions: dict[str, ipmi_command.Command] = {}
        self._lock = threading.Lock()

    def _session(self, node: str) -> ipmi_command.Command:
        with self._lock:
            session = self._sessions.get(node)
        if session is None:
            host, port = self.endpoints[node]
            session = ipmi_command.Command(bmc=host, userid=self.user, password=self.password, port=port,
                                           keepalive=False)
            with self._lock:
                self._sessions[node] = session
        return session

    def read(self, node: str, now: float, load: object) -> float:
        del now, load
        try:
            session = self._session(node)
            if self.sensors:
                return float(sum(session.get_sensor_reading(name).value or 0 for name in self.sensors))
            reply = session.raw_command(netfn=0x2C, command=0x02, data=(0xDC, 1, 0, 0), timeout=self.timeout_s)
        except (ipmi_errors.IpmiException, OSError) as exc:
            with self._lock:
                self._sessions.pop(node, None)  # log in again next time
            raise OSError(f"BMC of {node}: {exc}") from exc
        if "error" in reply:
            with self._lock:
                self._sessions.pop(node, None)
            raise OSError(f"BMC of {node}: {reply['error']}")
        return float(struct.unpack("<H", bytes(reply["data"][1:3]))[0])

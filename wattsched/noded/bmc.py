"""Emulated BMCs: one RMCP+ (IPMI 2.0 over UDP) server per virtual node on a loopback port, all
in one process (pyghmi keeps one event loop per process), started by ``wattsched bmc``. Where the
cluster reads or switches its BMCs over Redfish, ``wattsched bmc`` also serves Redfish over HTTPS on
the same port numbers over TCP (wattsched.noded.redfishbmc), from the same view of each node
(NodeView).

Each answers what acct_gather_energy/ipmi and power saving ask of a real BMC:

- DCMI Get Power Reading (netfn 0x2C, cmd 0x02, group extension 0xDC), byte for byte as the
  DCMI specification lays out the response: current, minimum, maximum and average watts over
  the statistics period, an IPMI timestamp, the period in milliseconds, and the "power
  measurement active" state bit. The watts are the node's emulated power model, which its agent
  publishes in ``<SlurmdSpoolDir>/<node>/model_watts``, shown through the configured
  EnergyEmulatedLag and EnergyEmulatedNoise (a BMC averages).
- Chassis status and control (power on, off, cycle, reset, soft shutdown), the state kept in
  ``<SlurmdSpoolDir>/<node>/chassis`` (wattsched.noded.chassis) so that it survives a restart
  of this process. A switch takes the node's SwitchOnTime / SwitchOffTime (wattsched.switching):
  the node's agent sees it come up only then, and its power model draws the switching watts.

pyghmi's server always answers "SHA-1" to an RMCP+ open-session request, even to a SHA-256
proposal it cannot honour, and pyghmi's own client then fails at RAKP2. We refuse any proposal
but HMAC-SHA1 authentication and integrity with status 0x11 ("no cipher suite match"), after
which clients fall back to SHA-1 (cipher suite 3), as with real BMCs.
"""

from __future__ import annotations

import collections
import os
import struct
import threading
import time

from pyghmi.ipmi import bmc as pyghmi_bmc
from pyghmi.ipmi.private import session as ipmisession

from wattsched import bmcauth, switching
from wattsched.config import Config, NodeConf
from wattsched.noded import chassis
from wattsched.plugins.acct_gather_energy.ipmi import bmc_port
from wattsched.powermodel import Response, switched_watts

STATS_PERIOD_S = 60.0
WAKE_S = 0.5
_HMAC_SHA1 = 1


class NodeView:
    """What any emulated BMC of a virtual node knows of it, whatever it speaks: its chassis power
    state and switching, and its power as a BMC shows it."""

    def __init__(self, node: NodeConf, spool: str, response: Response):
        self.node, self.spool, self.response = node, spool, response
        self._lock = threading.Lock()
        os.makedirs(os.path.join(spool, node.name), exist_ok=True)

    def power_state(self) -> str:
        """``on`` or ``off``: what the chassis was last told to be."""
        return chassis.read(self.spool, self.node.name).target

    def state(self, now: float) -> str:
        """on, off, or switching one way or the other."""
        return chassis.read(self.spool, self.node.name).state(now, self.node.switching)

    def set_power(self, target: str) -> None:
        with self._lock:  # IPMI's and Redfish's threads both switch
            current = chassis.read(self.spool, self.node.name)
            chassis.write(self.spool, self.node.name, switching.command(current, target, time.time(),
                                                                         self.node.switching))

    def watts(self, now: float) -> float:
        """The node's power as this BMC shows it now: its agent's model while it is on, the
        switching or off watts otherwise (the agent may be gone with the node)."""
        fixed = switched_watts(self.node, self.state(now))
        if fixed is not None:
            return self.response.shown(self.node.name, fixed, now)
        try:
            with open(os.path.join(self.spool, self.node.name, "model_watts")) as handle:
                model = float(handle.read())
        except (OSError, ValueError):
            model = float(self.node.idle_watts or 0)
        return self.response.shown(self.node.name, model, now)


class PowerStats:
    """A BMC's power statistics: the readings of the last STATS_PERIOD_S, as DCMI and Redfish's
    PowerMetrics report them (current, least, most, mean over the period)."""

    def __init__(self) -> None:
        self.readings: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, now: float, watts: float) -> tuple[float, float, float, float]:
        """Record a reading; returns (least, most, mean, period in seconds)."""
        self.readings.append((now, watts))
        while self.readings and now - self.readings[0][0] > STATS_PERIOD_S:
            self.readings.popleft()
        values = [w for _t, w in self.readings]
        return min(values), max(values), sum(values) / len(values), now - self.readings[0][0]


class EmulatedBmc(pyghmi_bmc.Bmc):
    def __init__(self, view: NodeView, port: int, users: dict[str, str]):
        super().__init__(users, port=port, address="127.0.0.1")
        self.view = view
        self.stats = PowerStats()

    # --- RMCP+: refuse what cannot be honoured --------------------------------------------------

    def sessionless_data(self, data, sockaddr):
        raw = bytearray(data)
        if len(raw) >= 16 + 29 and raw[4] == 6 and raw[5] == 0x10:  # RMCP+ open session request
            request = raw[16:]
            if request[12] & 0x3F != _HMAC_SHA1 or request[20] & 0x3F != _HMAC_SHA1:
                payload = bytes([request[0], 0x11, 0, 0]) + bytes(request[4:8])
                packet = b"\x06\x00\xff\x07" + bytes([6, 0x11]) + b"\x00" * 8 + struct.pack("<H", len(payload))
                ipmisession._io_sendto(self.serversocket, packet + payload, sockaddr)
                return
        super().sessionless_data(data, sockaddr)

    # --- chassis ---------------------------------------------------------------------------------

    def get_power_state(self):
        return self.view.power_state()

    def _set_power(self, target: str) -> int:
        self.view.set_power(target)
        return 0

    def power_on(self):
        return self._set_power(switching.ON)

    def power_off(self):
        return self._set_power(switching.OFF)

    def power_shutdown(self):
        return self._set_power(switching.OFF)

    def power_cycle(self):
        return self._set_power(switching.ON)

    def power_reset(self):
        return self._set_power(switching.ON)

    # --- DCMI power reading ----------------------------------------------------------------------

    def power_reading(self, now: float) -> list[int]:
        current = self.view.watts(now)
        least, most, mean, period_s = self.stats.add(now, current)
        body = struct.pack("<BHHHHIIB", 0xDC, round(current), round(least), round(most), round(mean), int(now),
                           max(1, int(period_s * 1000)), 0x40)
        return list(body)

    def handle_raw_request(self, request, session):
        if request["netfn"] == 0x2C and request["command"] == 0x02:
            data = request.get("data") or []
            if not data or data[0] != 0xDC:
                return session.send_ipmi_response(code=0xCC)  # invalid data field in request
            return session.send_ipmi_response(data=self.power_reading(time.time()))
        return super().handle_raw_request(request, session)


def views(config: Config, names: list[str]) -> dict[int, NodeView]:
    """The named nodes' views, by their BMC port."""
    response = Response(config.energy_emulated_lag_s, config.energy_emulated_noise)
    return {bmc_port(config, node): NodeView(node, config.slurmd_spool_dir, response)
            for node in config.nodes if node.name in names}


def serve_ipmi(config: Config, names: list[str]) -> None:
    """Run the IPMI services of the named nodes until killed."""
    user, password = bmcauth.credentials(config, "ipmi")
    for port, view in views(config, names).items():
        EmulatedBmc(view, port, {user: password})
    while True:
        # pyghmi's loop can miss its IO thread's wake-up and then sleep for its whole timeout
        # with packets queued: a bounded timeout bounds such a stall
        ipmisession.Session.wait_for_rsp(WAKE_S)

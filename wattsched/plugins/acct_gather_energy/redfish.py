"""acct_gather_energy/redfish: node power from the node's BMC over Redfish (DMTF DSP0266: HTTPS
and JSON), with OpenStack's sushy as the client.

The reading is the node's chassis power, where the BMC offers it: the current schema's
``Chassis/<id>/EnvironmentMetrics`` (``PowerWatts.Reading``), else the older ``Chassis/<id>/Power``
(``PowerControl[0].PowerConsumedWatts``), which BMCs sold before 2021 offer alone. Which one a BMC
has is found once per session from its chassis (the first that answers with a reading), and
again after a failed read. The agent integrates the watts into joules as it does IPMI's
(Georgiou et al. 2014, eq. 1).

Each node's BMC is its ``BmcAddr`` (``host[:port]``, port 443 by default, ``%n`` for the node
name); with ``EmulatedNodes=YES`` and no BmcAddr, the node's emulated BMC on 127.0.0.1
(wattsched.noded.redfishbmc). The client logs in with a Redfish session (sushy falls back to
HTTP Basic where the BMC has no session service) with EnergyRedfishUsername/Password, else the
IPMI ones. The BMC's certificate is always checked: against EnergyRedfishCAFile, else the host's
trust store (an emulated BMC's against the cluster's own authority). A read answers within
EnergyRedfishTimeout or fails, once: the meter reads again at its next poll, and a BMC that hangs
leaves only its own node stale. A reading that is not a number of watts a node could draw is a
failure too, never taken as zero.

The same client switches nodes for power saving where BmcProtocol is Redfish
(``wattsched power on|off|status``): ``ComputerSystem.Reset`` (On, ForceOff) and the system's
PowerState, with a few retries, as switching is not read again by itself.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import sushy
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_errors

from wattsched import bmcauth
from wattsched.config import Config, NodeConf
from wattsched.plugins.acct_gather_energy.ipmi import bmc_endpoint

REDFISH_PORT = 443
WATTS_MAX = 1_000_000.0  # no node draws a megawatt: a reading past it is the BMC's nonsense
SWITCH_RETRIES = 3
RESETS = {"on": sushy.ResetType.ON, "off": sushy.ResetType.FORCE_OFF}


@dataclass(slots=True)
class _Link:
    """One BMC's logged-in client, and where its power and its system are."""

    conn: sushy_connector.Connector
    root: Any  # sushy.Sushy
    power: str = ""  # the path of the resource holding the power reading, once found
    system: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class RedfishEnergy:
    kind = "power"

    def __init__(self, config: Config, nodes: list[NodeConf], retries: int = 1):
        self.endpoints = {n.name: bmc_endpoint(config, n, REDFISH_PORT) for n in nodes}
        self.user, self.password = bmcauth.credentials(config, "redfish")
        self.timeout_s = float(config.energy_redfish_timeout_s)
        self.retries = retries
        emulated_ca = bmcauth.emulated_tls(config.state_save_location)[0] if config.emulated_nodes else ""
        # never False: a BMC whose certificate is not checked could be anyone, given the password
        self.verify = {n.name: config.energy_redfish_ca_file or (emulated_ca if not n.bmc_addr else "") or True
                       for n in nodes}
        self._links: dict[str, _Link] = {}
        self._lock = threading.Lock()  # over the table of links

    def _link(self, node: str) -> _Link:
        with self._lock:
            link = self._links.get(node)
        if link is not None:
            return link
        host, port = self.endpoints[node]
        url = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        conn = sushy_connector.Connector(url, verify=self.verify[node], server_side_retries=self.retries,
                                         server_side_retries_delay=1, default_request_timeout=self.timeout_s,
                                         connect_timeout=self.timeout_s)
        root = sushy.Sushy(url, username=self.user, password=self.password, connector=conn)
        link = _Link(conn, root)
        with self._lock:
            return self._links.setdefault(node, link)

    def _call(self, node: str, work: Any) -> Any:
        """``work(link)`` on the node's BMC; any failure is an OSError naming the node."""
        try:
            link = self._link(node)
            with link.lock:
                return work(link)
        except (sushy_errors.SushyError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            with self._lock:
                known = self._links.get(node)
            if known is not None:
                known.power = ""  # found again next time: the BMC may have been replaced
            raise OSError(f"BMC of {node}: {_why(exc)}") from exc

    def read(self, node: str, now: float, load: object) -> float:
        del now, load
        return float(self._call(node, _watts))

    def chassis(self, node: str, target: str | None = None) -> str:
        """Switch the node ``on`` or ``off`` (None: only ask); returns its power state."""
        def switch(link: _Link) -> str:
            system = link.root.get_system(link.system or None)
            link.system = system.path
            if target is None:  # as IPMI's chassis status says it: PoweringOn is on already
                return "on" if system.power_state in (sushy.PowerState.ON, sushy.PowerState.POWERING_ON) else "off"
            system.reset_system(RESETS[target])
            return target
        return str(self._call(node, switch))


def _watts(link: _Link) -> float:
    """The node's watts from where its BMC keeps them, found on first use: the first of the
    chassis' power resources that answers with a reading (a BMC may link a resource it does not
    serve, or serve one without the reading)."""
    if link.power:
        return _reading(link, link.power)
    failures = []
    for path in _power_paths(link):
        try:
            watts = _reading(link, path)
        except (sushy_errors.SushyError, ValueError, KeyError, IndexError, TypeError) as exc:
            failures.append(f"{path}: {_why(exc)}")
            continue
        link.power = path
        return watts
    raise ValueError("; ".join(failures) or "its chassis offers neither EnvironmentMetrics nor Power")


def _reading(link: _Link, path: str) -> float:
    document = link.conn.get(path).json()
    if path.endswith("/EnvironmentMetrics"):
        reading = (document.get("PowerWatts") or {}).get("Reading")
    else:
        reading = ((document.get("PowerControl") or [{}])[0]).get("PowerConsumedWatts")
    if isinstance(reading, bool) or not isinstance(reading, int | float) or not math.isfinite(reading) \
            or not 0 <= reading < WATTS_MAX:
        raise ValueError(f"no power reading in {path} (got {str(reading)[:40]!r})")
    return float(reading)


def _power_paths(link: _Link) -> list[str]:
    """Where this BMC's chassis may keep its power: EnvironmentMetrics, then the deprecated Power."""
    members = link.root.get_chassis_collection().members_identities
    if not members:
        raise ValueError("the BMC lists no chassis")
    chassis = link.conn.get(sorted(members)[0]).json()
    return [target for name in ("EnvironmentMetrics", "Power")
            if isinstance(target := (chassis.get(name) or {}).get("@odata.id"), str) and target.startswith("/redfish/")]


def _why(exc: BaseException) -> str:
    """A failure in a line, by its first cause: sushy wraps requests, which wraps urllib3, which
    wraps the socket's or TLS's own error (refused, timed out, certificate verify failed)."""
    cause: BaseException = exc
    for _ in range(8):
        reason = getattr(cause, "reason", None)
        inner = next((e for e in (reason, cause.__cause__, cause.__context__, *cause.args[:1])
                      if isinstance(e, BaseException)), None)
        if inner is None:
            break
        cause = inner
    text = " ".join(str(cause).split()) or type(cause).__name__
    return text[:200]

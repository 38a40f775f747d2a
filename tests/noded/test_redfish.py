"""acct_gather_energy/redfish and Redfish power switching against real Redfish services over
HTTPS on loopback: the emulated BMCs (``wattsched bmc``), and OpenStack's sushy-tools emulator,
which nobody here wrote. Readings follow the node's power model through EnvironmentMetrics and the
older Power resource; Reset switches the chassis; a wrong password, an unchecked certificate, a
BMC that hangs or answers nonsense are errors that leave the node's energy stale, never zero."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wattsched import bmcauth
from wattsched import config as config_mod
from wattsched.harness.testing import BIN, Cluster, free_port, free_port_block, wait_for
from wattsched.noded.energymeter import EnergyMeter
from wattsched.noded.redfishbmc import BODY_MAX, SESSIONS_MAX
from wattsched.plugins.acct_gather_energy.redfish import RedfishEnergy

NODES = ("NodeName=v[1-2] CPUs=4 RealMemory=4000 IdleWatts=100 MaxWatts=200 PowerSaveWatts=6 SwitchOffTime=1.5 "
         "SwitchOffWatts=90 SwitchOnTime=1.5 SwitchOnWatts=120\n")


@pytest.fixture()
def bmcs(tmp_path):
    """Two virtual nodes' emulated BMCs over Redfish, as ``wattsched bmc`` runs them."""
    base = free_port_block(2)
    conf = tmp_path / "bmc.conf"
    conf.write_text(f"ClusterName=t\nSlurmdSpoolDir={tmp_path / 'spool'}\nStateSaveLocation={tmp_path / 'ctld'}\n"
                    f"EmulatedNodes=YES\nEmulatedBMCPort={base}\nAcctGatherEnergyType=acct_gather_energy/redfish\n"
                    f"{NODES}PartitionName=p Nodes=ALL Default=YES\n")
    secrets = tmp_path / "acct_gather.conf"  # the BMCs' credentials: root's alone, as Slurm keeps them
    secrets.write_text("EnergyRedfishUsername=operator\nEnergyRedfishPassword=s3cret\nEnergyRedfishTimeout=3\n")
    secrets.chmod(0o600)
    proc = subprocess.Popen([sys.executable, "-m", "wattsched.cli.wattsched", "bmc", str(conf)])
    config = config_mod.load(conf)
    plugin = RedfishEnergy(config, list(config.nodes))
    wait_for(lambda: _reads(plugin, "v1"), 20, interval=0.3, what="BMC answering")
    yield config, plugin, tmp_path / "spool", base
    proc.kill()
    proc.wait()


def _reads(plugin: RedfishEnergy, node: str) -> bool:
    try:
        plugin.read(node, 0, [])
        return True
    except OSError:
        return False


def _https(config, port: int, method: str, path: str, body: bytes = b"", auth: str | None = None,
           headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request to an emulated BMC, checked against the cluster's authority."""
    import http.client

    context = ssl.create_default_context(cafile=bmcauth.emulated_tls(config.state_save_location)[0])
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    sent = dict(headers or {})
    if auth is not None:
        sent["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    conn.request(method, path, body=body, headers=sent)
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, data


def test_readings_follow_the_model_through_both_power_resources(bmcs) -> None:
    config, plugin, spool, base = bmcs
    assert plugin.read("v1", 0, []) == 100.0  # no model published yet: idle
    (spool / "v2").mkdir(parents=True, exist_ok=True)
    (spool / "v2" / "model_watts").write_text("187.6\n")
    assert plugin.read("v2", 0, []) == 187.6
    assert plugin._links["v2"].power == "/redfish/v1/Chassis/v2/EnvironmentMetrics"  # the current schema first
    # a BMC of older firmware offers only Power: the same watts, with its minute's statistics
    status, _h, body = _https(config, base + 1, "GET", "/redfish/v1/Chassis/v2/Power", auth="operator:s3cret")
    control = json.loads(body)["PowerControl"][0]
    assert status == 200 and control["PowerConsumedWatts"] == 187.6
    metrics = control["PowerMetrics"]
    assert metrics["MinConsumedWatts"] <= 187.6 <= metrics["MaxConsumedWatts"] and metrics["IntervalInMin"] == 1
    plugin._links["v2"].power = "/redfish/v1/Chassis/v2/Power"
    assert plugin.read("v2", 0, []) == 187.6


def test_reset_switches_the_chassis_and_the_reading_follows(bmcs) -> None:
    _config, plugin, _spool, _base = bmcs
    assert plugin.chassis("v1") == "on"
    assert plugin.chassis("v1", "off") == "off"
    assert plugin.chassis("v1") == "off"
    assert plugin.read("v1", 0, []) == 90.0  # SwitchOffWatts while it shuts down
    wait_for(lambda: plugin.read("v1", 0, []) == 6.0, 10, interval=0.2, what="PowerSaveWatts once off")
    plugin.chassis("v1", "on")
    assert plugin.chassis("v1") == "on"  # PoweringOn, as IPMI's chassis status says it
    assert plugin.read("v1", 0, []) == 120.0  # SwitchOnWatts while it boots
    wait_for(lambda: plugin.read("v1", 0, []) == 100.0, 10, interval=0.2, what="IdleWatts once on")


def test_the_service_asks_for_credentials_and_bounds_what_a_client_may_hold(bmcs) -> None:
    config, _plugin, _spool, base = bmcs
    status, _h, body = _https(config, base, "GET", "/redfish/v1/")
    assert status == 200 and json.loads(body)["SessionService"]["@odata.id"] == "/redfish/v1/SessionService"
    for auth in (None, "operator:wrong", "nobody:s3cret"):
        status, headers, body = _https(config, base, "GET", "/redfish/v1/Systems/v1", auth=auth)
        assert status == 401 and json.loads(body)["error"]["code"] == "Base.1.8.NoValidSession"
    status, _h, _b = _https(config, base, "GET", "/redfish/v1/Systems/v1", headers={"X-Auth-Token": "guess"})
    assert status == 401
    login = json.dumps({"UserName": "operator", "Password": "s3cret"}).encode()
    status, _h, _b = _https(config, base, "POST", "/redfish/v1/SessionService/Sessions",
                            json.dumps({"UserName": "operator", "Password": "nope"}).encode())
    assert status == 401
    tokens = []
    for _ in range(SESSIONS_MAX + 1):
        status, headers, body = _https(config, base, "POST", "/redfish/v1/SessionService/Sessions", login)
        if status != 201:
            break
        tokens.append((headers["x-auth-token"], headers["location"]))
    assert len(tokens) == SESSIONS_MAX - 1  # the fixture's client holds one
    assert status == 503 and "SessionLimitExceeded" in json.loads(body)["error"]["code"]
    token, location = tokens[0]
    status, _h, body = _https(config, base, "GET", "/redfish/v1/Systems/v1", headers={"X-Auth-Token": token})
    assert status == 200 and json.loads(body)["PowerState"] == "On"
    status, _h, _b = _https(config, base, "DELETE", location, headers={"X-Auth-Token": token})
    assert status == 204
    status, _h, _b = _https(config, base, "GET", "/redfish/v1/Systems/v1", headers={"X-Auth-Token": token})
    assert status == 401  # ended with its session
    status, _h, _b = _https(config, base, "POST", "/redfish/v1/SessionService/Sessions", login)
    assert status == 201  # a place freed
    big = json.dumps({"UserName": "operator", "Password": "x" * BODY_MAX}).encode()
    status, _h, _b = _https(config, base, "POST", "/redfish/v1/SessionService/Sessions", big)
    assert status == 413
    status, _h, body = _https(config, base, "POST", "/redfish/v1/Systems/v1/Actions/ComputerSystem.Reset",
                              b'{"ResetType": "Explode"}', auth="operator:s3cret")
    assert status == 400 and "ActionParameterValueNotInList" in json.loads(body)["error"]["code"]
    status, _h, _b = _https(config, base, "GET", "/redfish/v1/Systems/v2", auth="operator:s3cret")
    assert status == 404  # each BMC is its own node's alone


def test_a_bmc_whose_certificate_is_not_trusted_is_refused(bmcs, tmp_path) -> None:
    config, _plugin, _spool, base = bmcs
    # v1's BMC named as a real node's is: checked against the CA file, else the host's trust store
    nodes = [dataclasses.replace(n, bmc_addr=f"127.0.0.1:{base}") for n in config.nodes]
    other_ca = bmcauth.emulated_tls(str(tmp_path / "another-cluster"))[0]
    for ca in (other_ca, ""):
        client = RedfishEnergy(config_mod.with_overrides(config, energy_redfish_ca_file=ca), nodes)
        assert client.verify["v1"] == (ca or True)
        with pytest.raises(OSError, match=r"CERTIFICATE_VERIFY_FAILED"):
            client.read("v1", 0, [])


def test_a_wrong_password_is_an_error_not_a_reading(bmcs) -> None:
    config, _plugin, _spool, _base = bmcs
    wrong = RedfishEnergy(config_mod.with_overrides(config, energy_redfish_password="nope"), list(config.nodes))
    with pytest.raises(OSError, match="BMC of v1"):
        wrong.read("v1", 0, [])


class _Peer:
    """A TLS server under the cluster's certificate that answers every request with ``answer``, or
    never answers at all (None)."""

    def __init__(self, config, answer: bytes | None):
        _ca, cert, key = bmcauth.emulated_tls(config.state_save_location)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _addr = self.sock.accept()
            except OSError:
                return
            self.held.append(raw)
            if self.answer is None:
                continue  # takes the connection, says nothing
            try:
                conn = self.context.wrap_socket(raw, server_side=True)
                conn.recv(65536)
                conn.sendall(self.answer)
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        for raw in self.held:
            raw.close()


def _json_answer(document: dict) -> bytes:
    body = json.dumps(document).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("answer", [
    b"\x00\xffnot http at all\r\n\r\n",
    _json_answer({"PowerWatts": {"Reading": "lots"}}),
    _json_answer({"PowerWatts": {"Reading": -5}}),
    _json_answer({"PowerWatts": {"Reading": 1e12}}),
    _json_answer({"PowerWatts": None}),
    None,  # never answers, not even to a login
], ids=["garbage", "text", "negative", "absurd", "missing", "hangs"])
def test_a_bmc_answering_nonsense_leaves_its_node_stale_never_zero(bmcs, tmp_path, answer) -> None:
    from sushy import connector as sushy_connector

    from wattsched.plugins.acct_gather_energy.redfish import _Link

    config, plugin, _spool, _base = bmcs
    peer = _Peer(config, answer)
    try:
        meter = EnergyMeter(plugin, {"v1": 4, "v2": 4}, str(tmp_path), 1.0, lambda: {}, read_timeout_s=3.0)
        meter.poll_once(1000.0)
        meter.poll_once(1001.0)
        before = meter.nodes["v2"].joules
        assert before > 0 and not meter.nodes["v2"].stale
        # v2's BMC replaced by the peer: logged in to already (its readings are nonsense), or not at all
        plugin.endpoints["v2"] = ("127.0.0.1", peer.port)
        plugin._links.pop("v2")
        if answer is not None:
            conn = sushy_connector.Connector(f"https://127.0.0.1:{peer.port}", verify=plugin.verify["v2"],
                                             server_side_retries=1, default_request_timeout=2, connect_timeout=2)
            plugin._links["v2"] = _Link(conn, None, power="/redfish/v1/Chassis/v2/EnvironmentMetrics")
        started = time.monotonic()
        meter.poll_once(1002.0)
        assert time.monotonic() - started < 3.0 + 3  # at most the read time limit, on a loaded machine too
        assert meter.nodes["v2"].stale and meter.nodes["v2"].joules == before  # unknown, not zero
        assert not meter.nodes["v1"].stale
    finally:
        peer.close()


@pytest.mark.e2e
def test_a_cluster_metered_over_redfish_says_why_a_nodes_power_is_unknown(tmp_path: Path) -> None:
    """Energy over Redfish from the emulated BMCs to sacct; the BMCs gone, each node's power is
    n/a in scontrol show node, with why, and comes back with them."""
    c = Cluster(tmp_path, nodes=2, bmc=True, extra=f"EmulatedNodes=YES\nEmulatedBMCPort={free_port_block(2)}\n"
                "AcctGatherEnergyType=acct_gather_energy/redfish\nAcctGatherNodeFreq=1",
                node_extra="IdleWatts=100 MaxWatts=200", acct_gather="EnergyRedfishTimeout=2").start()
    try:
        wait_for(lambda: all(n["metered"] for n in c.nodes()), 30, what="nodes metered over Redfish")
        job_id = c.sbatch("-w", "n01", "--wrap", "sleep 2")
        c.wait_state(job_id, "COMPLETED", timeout=30)
        wait_for(lambda: float(c.run("sacct", "-n", "-X", "-j", str(job_id), "-o", "ConsumedEnergyRaw")
                               .stdout.strip() or 0) > 0, 30, what="the job's energy in accounting")
        assert c.bmc_proc is not None
        c.bmc_proc.kill()
        c.bmc_proc.wait()
        def unknown() -> str:
            out = c.run("scontrol", "show", "node", "n01").stdout
            return out if "EnergyReason=" in out else ""

        shown = wait_for(unknown, 30, what="n01's power unknown")
        assert "CurrentWatts=n/a AveWatts=n/a" in shown
        assert "EnergyReason=BMC of n01: [Errno 111] Connection refused" in shown
        assert "ConsumedJoules=" in shown  # what was measured stays
        c.bmc_proc = c._spawn(["bmc", str(c.conf)], "bmc.log")
        wait_for(lambda: "EnergyReason=" not in c.run("scontrol", "show", "node", "n01").stdout, 30,
                 what="n01 read again")
        assert "CurrentWatts=n/a" not in c.run("scontrol", "show", "node", "n01").stdout
    finally:
        c.stop()


@pytest.fixture()
def sushy_emulator(tmp_path):
    """OpenStack's sushy-tools Redfish emulator, its fake driver holding one system, over HTTPS
    with HTTP Basic against a bcrypt password file: a BMC nobody here wrote."""
    if shutil.which("sushy-emulator", path=str(BIN)) is None:
        pytest.skip("sushy-tools is not installed (the test extra has it)")
    import bcrypt

    ca, cert, key = bmcauth.emulated_tls(str(tmp_path / "sushy-tls"))
    users = tmp_path / "htpasswd"
    users.write_text("operator:" + bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode() + "\n")
    port = free_port()
    conf = tmp_path / "sushy.py"
    conf.write_text(f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
                    f"SUSHY_EMULATOR_SSL_CERT = {cert!r}\nSUSHY_EMULATOR_SSL_KEY = {key!r}\n"
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(users)!r}\nSUSHY_EMULATOR_STATE_DIR = {str(tmp_path)!r}\n"
                    "SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_FAKE_SYSTEMS = [{'uuid': "
                    "'0bd2e2a2-6c2d-4d3d-9a4e-3c1f0b2d8e11', 'name': 'far01', 'power_state': 'On', 'nics': []}]\n")
    with open(tmp_path / "sushy.log", "w") as log:
        proc = subprocess.Popen([str(BIN / "sushy-emulator"), "--config", str(conf)], stdout=log, stderr=log)
    yield port, ca
    proc.kill()
    proc.wait()


def test_power_switching_drives_a_redfish_service_nobody_here_wrote(sushy_emulator, tmp_path: Path) -> None:
    port, ca = sushy_emulator
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=far\nStateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    "BmcProtocol=Redfish\nSuspendTime=600\n"
                    f"NodeName=far01 CPUs=4 BmcAddr=127.0.0.1:{port}\nPartitionName=p Nodes=ALL Default=YES\n")
    secrets = tmp_path / "acct_gather.conf"
    secrets.write_text(f"EnergyRedfishUsername=operator\nEnergyRedfishPassword=s3cret\nEnergyRedfishCAFile={ca}\n"
                       "EnergyRedfishTimeout=5\n")
    secrets.chmod(0o600)

    def power(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "wattsched"), "power", *args, "--config", str(conf)], capture_output=True,
                              text=True, timeout=60)

    wait_for(lambda: power("status", "far01").stdout == "far01 on\n", 30, interval=0.3, what="the emulator up")
    assert power("off", "far01").returncode == 0
    # the fake system takes 1 to 11 seconds to switch, as hardware does
    wait_for(lambda: power("status", "far01").stdout == "far01 off\n", 30, interval=0.5, what="far01 off")
    assert power("on", "far01").returncode == 0
    wait_for(lambda: power("status", "far01").stdout == "far01 on\n", 30, interval=0.5, what="far01 on")
    secrets.write_text(f"EnergyRedfishUsername=operator\nEnergyRedfishPassword=wrong\nEnergyRedfishCAFile={ca}\n")
    refused = power("status", "far01")
    assert refused.returncode != 0 and "BMC of far01" in refused.stderr and "401" in refused.stderr


def _publications() -> Path:
    """DMTF's Redfish publications (github.com/DMTF/Redfish-Publications: its csdl/ schemas and
    mockups/), which neither PyPI nor Debian carry: named by WATTSCHED_REDFISH_PUBLICATIONS."""
    folder = Path(os.environ.get("WATTSCHED_REDFISH_PUBLICATIONS", "/nonexistent"))
    if not (folder / "csdl").is_dir() or not (folder / "mockups").is_dir():
        pytest.skip("DMTF's Redfish publications are not on this machine (set WATTSCHED_REDFISH_PUBLICATIONS "
                    "to a checkout of DMTF/Redfish-Publications)")
    return folder


def test_dmtf_validator_finds_no_failure_in_the_emulated_bmcs(bmcs, tmp_path: Path) -> None:
    schemas = _publications() / "csdl"
    config, _plugin, _spool, base = bmcs
    validated = subprocess.run([str(BIN / "rf_service_validator"), "--rhost", f"https://127.0.0.1:{base}",
                                "-u", "operator", "-p", "s3cret", "--authtype", "Session", "--skipschema",
                                "--schema_directory", str(schemas), "--logdir", str(tmp_path / "report")],
                               capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, REQUESTS_CA_BUNDLE=bmcauth.emulated_tls(
                                   config.state_save_location)[0]))
    assert validated.returncode == 0, validated.stdout[-3000:]
    assert "Fail: 0" in validated.stdout and "Validating /redfish/v1/Chassis/v1/EnvironmentMetrics" in validated.stdout


@pytest.mark.parametrize(("mockup", "unserved"), [("public-rackmount1", False), ("public-tower", False),
                                                   ("public-tower", True)])
def test_readings_from_dmtf_mockups_served_by_sushy_static(tmp_path: Path, mockup: str, unserved: bool) -> None:
    """DMTF's own example BMCs, served by sushy-tools' static emulator: the reading is the one
    their chassis keeps, whichever resource holds it; a chassis that links EnvironmentMetrics and
    does not serve it (``unserved``: the mockup without that folder) is read through Power."""
    folder = _publications() / "mockups" / mockup
    if unserved:
        folder = Path(shutil.copytree(folder, tmp_path / mockup))
        for gone in folder.glob("Chassis/*/EnvironmentMetrics"):
            shutil.rmtree(gone)
    ca, cert, key = bmcauth.emulated_tls(str(tmp_path / "tls"))
    port = free_port()
    with open(tmp_path / "sushy.log", "w") as log:
        proc = subprocess.Popen([str(BIN / "sushy-static"), "-i", "127.0.0.1", "-p", str(port), "-m", str(folder),
                                 "-c", cert, "-k", key], stdout=log, stderr=log)
    try:
        conf = tmp_path / "slurm.conf"
        conf.write_text(f"ClusterName=m\nStateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                        f"NodeName=far1 CPUs=4 BmcAddr=127.0.0.1:{port}\nPartitionName=p Nodes=ALL Default=YES\n")
        secrets = tmp_path / "acct_gather.conf"
        secrets.write_text(f"EnergyRedfishCAFile={ca}\nEnergyRedfishUsername=u\nEnergyRedfishPassword=p\n")
        secrets.chmod(0o600)
        loaded = config_mod.load(conf)
        plugin = RedfishEnergy(loaded, list(loaded.nodes))
        watts = wait_for(lambda: _reads(plugin, "far1") and plugin.read("far1", 0, []), 20, interval=0.3,
                         what="the static emulator up")
        chassis = next((folder / "Chassis").glob("*/index.json"))
        kept = json.loads((chassis.parent / "EnvironmentMetrics" / "index.json").read_text())["PowerWatts"]["Reading"] \
            if (chassis.parent / "EnvironmentMetrics" / "index.json").exists() else \
            json.loads((chassis.parent / "Power" / "index.json").read_text())["PowerControl"][0]["PowerConsumedWatts"]
        assert watts == float(kept)
        assert plugin._links["far1"].power.endswith("/Power" if unserved else "/EnvironmentMetrics")
        assert plugin.chassis("far1") == "on"
    finally:
        proc.kill()
        proc.wait()


def test_a_bmc_port_taken_by_another_program_leaves_the_other_bmcs_serving(tmp_path: Path) -> None:
    base = free_port_block(2)
    taken = socket.socket()
    taken.bind(("127.0.0.1", base + 1))  # v2's port, held by someone else
    taken.listen(1)
    conf = tmp_path / "bmc.conf"
    conf.write_text(f"ClusterName=t\nSlurmdSpoolDir={tmp_path / 'spool'}\nStateSaveLocation={tmp_path / 'ctld'}\n"
                    f"EmulatedNodes=YES\nEmulatedBMCPort={base}\nAcctGatherEnergyType=acct_gather_energy/redfish\n"
                    f"{NODES}PartitionName=p Nodes=ALL Default=YES\n")
    with open(tmp_path / "bmc.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "wattsched.cli.wattsched", "bmc", str(conf)], stdout=log,
                                stderr=log)
    try:
        config = config_mod.load(conf)
        plugin = RedfishEnergy(config_mod.with_overrides(config, energy_redfish_timeout_s=2), list(config.nodes))
        wait_for(lambda: _reads(plugin, "v1"), 20, interval=0.3, what="v1's BMC answering")
        assert proc.poll() is None
        with pytest.raises(OSError, match="BMC of v2"):
            plugin.read("v2", 0, [])
        assert "emulated BMC cannot listen" in (tmp_path / "bmc.log").read_text()
    finally:
        proc.kill()
        proc.wait()
        taken.close()

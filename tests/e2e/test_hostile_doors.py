"""The hostile suite, round two: the doors a hostile user tried after the first round was closed
(the token service, tokens, BMC secrets, requeued usage, limits at every door, escaping processes,
what listings print), each tried as a real unprivileged account against root's daemons.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.hostile import USERS, WORKER, Account, final, needs_accounts, own_cluster
from wattsched.harness.testing import Cluster, ensure_munge, free_port_block, host_lock, wait_for

pytestmark = needs_accounts

FLOOD = """import socket, sys
path, count = sys.argv[1], int(sys.argv[2])
silent = []
for i in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if i % 50 == 0:
        silent.append(s)  # these never read what they are sent
    else:
        s.close()  # these close at once
print(len(silent), flush=True)
sys.stdin.read()  # the silent ones stay open until the test is done
"""


def test_no_client_can_stop_the_token_service(shared: Cluster, mallory: Account, victim: Account) -> None:
    """Connections closed at once, in a loop, and others that never read: the other user's commands
    still get their tokens, and the service says nothing went wrong with it."""
    socket_path = shared.root / "auth" / "auth.sock"
    script = mallory.home / "flood.py"
    script.write_text(FLOOD)
    flood = subprocess.Popen([sys.executable, str(script), str(socket_path), "3000"], user=mallory.uid,
                             group=mallory.gid, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=mallory.home)
    try:
        assert flood.stdout is not None
        assert int(flood.stdout.readline()) == 60
        for _ in range(3):
            ping = victim.run("scontrol", "ping", timeout=30)
            assert ping.returncode == 0 and b"UP" in ping.stdout, ping.stderr
        assert victim.run("squeue", timeout=30).returncode == 0
    finally:
        flood.kill()
        flood.wait()
    log = (shared.logs / "controller.log").read_text()
    assert "Traceback" not in log and "token service stopped" not in log


def test_tokens_are_bounded_revocable_and_end_with_their_user(shared: Cluster, mallory: Account) -> None:
    """A user's token lives a day at most (AuthAltParameters=max_token_lifespan); root revokes a
    user's tokens; a token whose user was deleted and whose uid went to another user is refused."""
    year = mallory.run("scontrol", "token", "lifespan=31536000")
    assert year.returncode == 1 and b"Requested time limit is invalid" in year.stderr, year.stderr
    assert b"SLURM_JWT" not in year.stdout
    hour = mallory.run("scontrol", "token", "lifespan=3600")
    assert hour.returncode == 0 and hour.stdout.startswith(b"SLURM_JWT=")
    token = hour.stdout.decode().strip().split("=", 1)[1]
    with_token = mallory.env(SLURM_JWT=token)
    assert mallory.run("squeue", env=with_token).returncode == 0
    refused = mallory.run("scontrol", "token", "revoke", f"username={mallory.name}")
    assert refused.returncode != 0 and b"Access/permission denied" in refused.stderr
    assert mallory.run("squeue", env=with_token).returncode == 0
    shared.run("scontrol", "token", "revoke", f"username={mallory.name}")
    revoked = mallory.run("squeue", env=with_token)
    assert revoked.returncode != 0 and b"revoked" in revoked.stderr, revoked.stderr
    # a fresh token from the auth socket is honoured (issued in a later second than the revocation)
    wait_for(lambda: mallory.run("squeue").returncode == 0, 10, what="a fresh token honoured")

    gone, heir = f"wsgone{WORKER}", f"wsheir{WORKER}"
    with host_lock("accounts"):
        subprocess.run(["useradd", "-M", "-N", "-g", "users", "-s", "/bin/sh", gone], check=True)
    try:
        uid = int(subprocess.run(["id", "-u", gone], capture_output=True, check=True).stdout)
        old = shared.run("scontrol", "token", f"username={gone}").stdout.strip().split("=", 1)[1]
        base = f"http://127.0.0.1:{shared.port}"
        headers = {"Authorization": f"Bearer {old}"}
        assert httpx.get(f"{base}/v1/ping", headers=headers).json()["uid"] == uid
        with host_lock("accounts"):  # the uid freed goes to the heir, not to another worker's account
            subprocess.run(["userdel", gone], check=True)
            subprocess.run(["useradd", "-M", "-N", "-g", "users", "-u", str(uid), "-s", "/bin/sh", heir], check=True)
        wait_for(lambda: httpx.get(f"{base}/v1/ping", headers=headers).status_code == 401, 30,
                 what="the dead user's token refused")
        submitted = httpx.post(f"{base}/v1/jobs", headers=headers,
                               json={"script": "#!/bin/sh\nid\n", "hold": True, "work_dir": "/tmp"})
        assert submitted.status_code == 401 and "is not uid" in submitted.text, submitted.text
        assert not [j for j in shared.jobs() if j["uid"] == uid]
    finally:
        with host_lock("accounts"):
            for name in (gone, heir):
                subprocess.run(["userdel", name], capture_output=True, check=False)


def test_a_users_tokens_stay_revoked_across_a_restart(accounts) -> None:
    """Revocations are state: a controller restarted (kill -9) still refuses the revoked token."""
    root = Path(tempfile.mkdtemp(prefix="wattsched-hostile-revoke-"))
    os.chmod(root, 0o755)
    cluster = Cluster(root, nodes=1, cpus=2).start()
    try:
        os.chmod(cluster.conf, 0o644)
        user = Account(USERS[0], cluster)
        token = user.run("scontrol", "token").stdout.decode().strip().split("=", 1)[1]
        cluster.run("scontrol", "token", "revoke", f"username={user.name}")
        cluster.kill_controller()
        cluster.start_controller()
        after = user.run("squeue", env=user.env(SLURM_JWT=token))
        assert after.returncode != 0 and b"revoked" in after.stderr, after.stderr
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- limits at every door ----------------------------------------------------------------------------

def test_a_requeue_brings_back_no_more_than_a_submission_could(accounts) -> None:
    """Held arrays submitted up to MaxSubmitJobsPerUser, cancelled, the cap filled again, then the
    cancelled ones requeued: refused with Slurm's policy error, and never more than the cap pending."""
    with own_cluster("MaxJobCount=1000\nMaxSubmitJobsPerUser=200") as cluster:
        attacker = Account(USERS[0], cluster)
        first = [attacker.sbatch("-H", "--array=0-99", "--wrap", "true") for _ in range(2)]
        assert attacker.run("scancel", *map(str, first)).returncode == 0
        wait_for(lambda: all(j["state"] == "CANCELLED" for j in cluster.jobs()), 30, what="the arrays cancelled")
        for _ in range(2):
            attacker.sbatch("-H", "--array=0-99", "--wrap", "true")
        for array in first:
            requeued = attacker.run("scontrol", "requeue", str(array))
            assert requeued.returncode != 0 and b"Job violates accounting/QOS policy" in requeued.stderr, \
                requeued.stderr
        pending = [j for j in cluster.jobs() if j["state"] == "PENDING"]
        assert len(pending) == 200, len(pending)
        # with room under the cap, a requeue is a submission like any other
        assert attacker.run("scancel", "-u", attacker.name).returncode == 0
        wait_for(lambda: not [j for j in cluster.jobs() if j["state"] == "PENDING"], 30, what="all cancelled")
        assert attacker.run("scontrol", "requeue", str(first[0])).returncode == 0
        assert len([j for j in cluster.jobs() if j["state"] == "PENDING"]) == 100


def test_a_job_moved_to_a_partition_is_checked_as_a_submission_to_it(accounts) -> None:
    """A held job of the QOS normal moved (scontrol update, Slurm's REST API) to a partition whose
    AllowQos is high alone, or to one that is down to new jobs: refused, and it stays where it was."""
    settings = "AccountingStorageEnforce=associations,limits,qos"
    partitions = ("PartitionName=debug Nodes=n01 Default=YES MaxTime=INFINITE\n"
                  "PartitionName=vip Nodes=n01 AllowQos=high\n"
                  "PartitionName=closed Nodes=n01 State=INACTIVE\n"
                  "PartitionName=staff Nodes=n01 AllowGroups=wsstaff\n"
                  "PartitionName=others Nodes=n01 AllowAccounts=other\n"
                  "PartitionName=banned Nodes=n01 DenyAccounts=proj\n"
                  "PartitionName=open Nodes=n01")
    with own_cluster(settings, partitions=partitions) as cluster:
        cluster.run("sacctmgr", "-i", "add", "qos", "high", "Priority=100")
        cluster.run("sacctmgr", "-i", "add", "account", "proj", "QOS=normal,high")
        cluster.run("sacctmgr", "-i", "add", "user", USERS[0], "Account=proj")
        attacker = Account(USERS[0], cluster)
        job = attacker.sbatch("-H", "-D", "/tmp", "-o", "/dev/null", "--wrap", "true")
        for target, why in (("vip", b"Invalid qos specification"), ("closed", b"Required partition not available"),
                            ("nosuch", b"Invalid partition name specified"),
                            ("staff", b"User's group not permitted to use this partition"),
                            ("others", b"Invalid account or account/partition combination specified"),
                            ("banned", b"Invalid account or account/partition combination specified")):
            moved = attacker.run("scontrol", "update", f"jobid={job}", f"partition={target}")
            assert moved.returncode != 0 and why in moved.stderr, (target, moved.stderr)
            assert cluster.job(job)["partition"] == "debug"
        rest = httpx.post(f"http://127.0.0.1:{cluster.port}/slurm/v0.0.40/job/{job}",
                          json={"partition": "vip"}, headers={"X-SLURM-USER-NAME": attacker.name,
                                                              "X-SLURM-USER-TOKEN": attacker.token()})
        assert rest.status_code >= 400 and "Invalid qos specification" in rest.text, rest.text
        assert cluster.job(job)["partition"] == "debug"
        for target, why in (("staff", b"User's group not permitted"), ("others", b"Invalid account"),
                            ("banned", b"Invalid account")):  # and a submission there is refused the same way
            submitted = attacker.run("sbatch", "-H", "-p", target, "-D", "/tmp", "-o", "/dev/null", "--wrap", "true")
            assert submitted.returncode != 0 and why in submitted.stderr, (target, submitted.stderr)
        shown = cluster.run("scontrol", "show", "partition", "banned").stdout
        assert "AllowGroups=ALL DenyAccounts=proj AllowQos=ALL" in shown, shown
        assert attacker.run("scontrol", "update", f"jobid={job}", "partition=open").returncode == 0
        assert cluster.job(job)["partition"] == "open"
        attacker.run("scancel", str(job))


# --- secrets out of users' reach ----------------------------------------------------------------------

# logs in to a BMC as the user running it: "status" asks its chassis state, "off" switches it off
BMC_CLIENT = """import sys
from pyghmi.ipmi import command
port, password, action = int(sys.argv[1]), sys.argv[2], sys.argv[3]
try:
    session = command.Command(bmc="127.0.0.1", port=port, userid="admin", password=password, keepalive=False)
    if action == "off":
        session.set_power("off", wait=False)
        print("SWITCHED OFF")
    else:
        print("POWER", session.get_power()["powerstate"])
except Exception as exc:
    print("refused:", type(exc).__name__, exc)
"""


def test_no_file_a_user_can_read_holds_a_bmc_secret(accounts) -> None:
    """Emulated BMCs metered over IPMI: their password is random, kept where only root reads it; no
    file the user can read holds it, and the factory password switches no node off."""
    port = free_port_block(1)
    extra = (f"EmulatedNodes=YES\nEmulatedBMCPort={port}\nAcctGatherEnergyType=acct_gather_energy/ipmi\n"
             "AcctGatherNodeFreq=1")
    with own_cluster(extra, bmc=True, node_extra="IdleWatts=100 MaxWatts=200") as cluster:
        wait_for(lambda: all(n["metered"] for n in cluster.nodes()), 30, what="nodes metered over IPMI")
        attacker = Account(USERS[0], cluster)
        password = (cluster.root / "ctld" / "bmc_password").read_text().strip()
        assert len(password) >= 20
        found = attacker.run("grep", "-rlF", "--", password, str(cluster.root), "/etc", "/tmp", timeout=120)
        assert found.stdout == b"", found.stdout
        assert password.encode() not in attacker.run("scontrol", "show", "config").stdout
        script = attacker.home / "bmc_client.py"
        script.write_text(BMC_CLIENT)
        # the probe works from the user's account (with the password they cannot read, it logs in)...
        knowing = attacker.run(sys.executable, str(script), str(port), password, "status", timeout=60)
        assert knowing.stdout.strip() == b"POWER on", knowing.stdout + knowing.stderr
        # ...and the factory password, or none, switches nothing off
        for guess in ("admin", ""):
            tried = attacker.run(sys.executable, str(script), str(port), guess, "off", timeout=60)
            assert tried.stdout.startswith(b"refused:"), tried.stdout + tried.stderr
        status = cluster.run("wattsched", "power", "status", "n01").stdout
        assert "on" in status and "off" not in status, status


# asks a Redfish BMC as the user running it, over TLS checked against the given authority (or not at
# all: a user may skip the check); prints each answer's status
REDFISH_CLIENT = """import base64, http.client, socket, ssl, sys
port, password = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
def ask(method, path, body=b"", auth=None, extra=None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=20)
    headers = dict(extra or {})
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    try:
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse().status
    except OSError as exc:
        return type(exc).__name__
reset = "/redfish/v1/Systems/n01/Actions/ComputerSystem.Reset"
print("reset", *(ask("POST", reset, b'{"ResetType": "ForceOff"}', auth=f"admin:{guess}") for guess in (password, "")))
print("login", ask("POST", "/redfish/v1/SessionService/Sessions", b'{"UserName": "admin", "Password": "admin"}'))
print("huge", ask("POST", "/redfish/v1/SessionService/Sessions", b"x" * 10_000_000))
print("lies", ask("POST", "/redfish/v1/SessionService/Sessions", b"{}", extra={"Content-Length": "99999999999"}))
print("token", ask("GET", "/redfish/v1/Systems/n01", extra={"X-Auth-Token": "a" * 100_000}))
silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]  # never say a word
print("still", ask("GET", "/redfish/v1/", auth=None))
"""


def test_a_redfish_bmc_switches_nothing_for_a_user_and_survives_her(accounts) -> None:
    """Emulated BMCs metered over Redfish: their TLS key and password are root's alone; a user who
    guesses, sends absurd requests and holds silent connections switches nothing off, and the
    nodes stay metered."""
    port = free_port_block(1)
    extra = (f"EmulatedNodes=YES\nEmulatedBMCPort={port}\nAcctGatherEnergyType=acct_gather_energy/redfish\n"
             "AcctGatherNodeFreq=1")
    with own_cluster(extra, bmc=True, node_extra="IdleWatts=100 MaxWatts=200") as cluster:
        wait_for(lambda: all(n["metered"] for n in cluster.nodes()), 30, what="nodes metered over Redfish")
        attacker = Account(USERS[0], cluster)
        for secret in ("bmc_password", "bmc_tls_key.pem", "bmc_tls"):
            peeked = attacker.run("cat", str(cluster.root / "ctld" / secret))
            assert peeked.returncode != 0 and b"Permission denied" in peeked.stderr, secret
        script = attacker.home / "redfish_client.py"
        script.write_text(REDFISH_CLIENT)
        tried = attacker.run(sys.executable, str(script), str(port), "admin", timeout=120)
        assert tried.stdout.split(b"\n")[:6] == [b"reset 401 401", b"login 401", b"huge 413", b"lies 413",
                                                  b"token 401", b"still 200"], tried.stdout + tried.stderr
        status = cluster.run("wattsched", "power", "status", "n01").stdout
        assert status == "n01 on\n", status
        before = cluster.run("scontrol", "show", "node", "n01").stdout
        wait_for(lambda: cluster.run("scontrol", "show", "node", "n01").stdout != before, 20,
                 what="n01 read again after her attempts")
        assert "EnergyReason=" not in cluster.run("scontrol", "show", "node", "n01").stdout


# --- what listings print and what a request may hold ------------------------------------------------

def test_listings_escape_what_reorders_or_breaks_a_line(shared: Cluster, mallory: Account) -> None:
    """A right-to-left override and a line separator in a user's submit line and paths reach other
    users' listings escaped, never raw."""
    job = mallory.sbatch("-H", "-o", f"{mallory.home}/out\u202etxt.log", "--wrap", "echo \u202e\u2028done")
    try:
        for args in (("scontrol", "show", "job", str(job)), ("squeue", "-j", str(job), "-o", "%o %Z"),
                     ("scontrol", "show", "job", str(job), "--json")):
            shown = shared.run(*args).stdout
            assert "\u202e" not in shown and "\u2028" not in shown, (args, shown)
        assert "\\u202e" in shared.run("scontrol", "show", "job", str(job)).stdout
    finally:
        mallory.run("scancel", str(job))


def test_a_request_that_cannot_start_is_refused_when_sent(shared: Cluster, mallory: Account) -> None:
    """An environment name holding '=' and a relative working directory, through Slurm's REST API:
    refused at once with the reason, nothing queued (they failed only at launch before)."""
    base = f"http://127.0.0.1:{shared.port}/slurm/v0.0.40/job/submit"
    headers = {"X-SLURM-USER-NAME": mallory.name, "X-SLURM-USER-TOKEN": mallory.token()}
    before = {j["job_id"] for j in shared.jobs()}
    for job, why in (({"environment": ["A=B=C", "=x"], "current_working_directory": "/tmp"}, "environment"),
                     ({"environment": ["PATH=/bin"], "current_working_directory": "tmp"}, "absolute path")):
        reply = httpx.post(base, headers=headers, json={"script": "#!/bin/sh\ntrue\n", "job": job})
        assert 400 <= reply.status_code < 500 and why in reply.text, reply.text
    assert {j["job_id"] for j in shared.jobs()} == before


def test_refusals_say_only_why(shared: Cluster, mallory: Account, victim: Account) -> None:
    """sacctmgr does not announce a change it was refused; sh5util on another user's profiles ends
    with an error, not a traceback."""
    refused = mallory.run("sacctmgr", "-i", "modify", "qos", "normal", "set", "Priority=5")
    assert refused.returncode != 0 and b"Access/permission denied" in refused.stderr
    assert b"Modified" not in refused.stdout, refused.stdout
    job = victim.sbatch("--profile=energy", "--acctg-freq=energy=1", "-o", "/dev/null", "--wrap", "true")
    shared.wait_state(job, "COMPLETED", timeout=60)
    from wattsched import config

    merged = Path(config.load(str(shared.conf)).profile_dir) / victim.name / f"job_{job}.h5"
    for ready in (False, True):  # before the controller merged the job's profiles, and after
        if ready:
            wait_for(merged.exists, 60, what="the job's profiles merged")
        stolen = mallory.run("sh5util", "-j", str(job), "-u", victim.name)
        assert stolen.returncode != 0 and b"Traceback" not in stolen.stderr, stolen.stderr
        assert stolen.stderr.startswith(b"sh5util: error: "), stolen.stderr


# --- every run accounted ----------------------------------------------------------------------------

def test_requeueing_a_job_erases_none_of_its_runs(shared: Cluster, mallory: Account) -> None:
    """A running job requeued twice and then cancelled: three records, two REQUEUED and one
    CANCELLED, each with its own run time (sacct -D); sacct without -D shows the latest, as Slurm's.
    An ended job requeued keeps its record as it ended."""
    job = mallory.sbatch("-o", "/dev/null", "--wrap", "while :; do :; done")
    for run in range(3):
        wait_for(lambda r=run: (j := shared.job(job))["state"] == "RUNNING" and j["restart_count"] == r
                 and time.time() - j["start_time"] >= 2, 60, what=f"run {run} under way for 2 s")
        if run < 2:
            assert mallory.run("scontrol", "requeue", str(job)).returncode == 0
    assert mallory.run("scancel", str(job)).returncode == 0
    shared.wait_state(job, "CANCELLED", timeout=60)

    def records() -> list[list[str]] | None:
        out = mallory.run("sacct", "-D", "-X", "-n", "-P", "-j", str(job), "-o", "JobID,State,ElapsedRaw").stdout
        rows = [line.split("|") for line in out.decode().splitlines() if line]
        states = [r[1] for r in rows]
        return rows if states[:2] == ["REQUEUED", "REQUEUED"] and states[2:3] == [f"CANCELLED by {mallory.uid}"] \
            else None

    rows = wait_for(records, 30, 0.3, what="three records")
    assert all(int(r[2]) >= 2 for r in rows), rows
    latest = mallory.run("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State").stdout.decode().split("\n")
    assert [line for line in latest if line] and "REQUEUED" not in latest[0], latest
    ended = mallory.sbatch("-o", "/dev/null", "--wrap", "exit 3")
    shared.wait_state(ended, "FAILED", timeout=60)
    held = mallory.run("scontrol", "requeue", str(ended))
    assert held.returncode == 0, held.stderr
    mallory.run("scancel", str(ended))
    shared.wait_state(ended, "CANCELLED", timeout=60)

    def failed_kept() -> list[str] | None:
        out = mallory.run("sacct", "-D", "-X", "-n", "-P", "-j", str(ended), "-o", "State,ExitCode").stdout
        states = [line for line in out.decode().splitlines() if line]
        return states if len(states) == 2 else None

    kept = wait_for(failed_kept, 30, 0.3, what="both records of the ended job")
    assert kept[0] == "FAILED|3:0", kept


# --- nothing escapes its job ------------------------------------------------------------------------

ESCAPE = """#!/bin/sh
# a double fork into a session of its own: the burner's parent exits, it is nobody's child
(setsid sh -c 'echo $$ > {pidfile}; while :; do :; done' &)
while [ ! -s {pidfile} ]; do sleep 0.1; done
# until the burner has used 2 s of CPU (a loaded machine gives it less than that in 2 s of wall time)
burner=$(cat {pidfile}); tick=$(getconf CLK_TCK)
while set -- $(cut -d' ' -f14,15 /proc/$burner/stat) && [ $(($1 + $2)) -lt $((2 * tick)) ]; do sleep 0.1; done
"""


def _pids_max(pid: int) -> str:
    """The pids.max of the job a process is in (read by root: a job's groups are root's alone)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    v1 = [line.split(":", 2)[2] for line in lines if line.split(":")[1] == "pids"]
    step = v1[0] if v1 else next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        path = f"{root}{os.path.dirname(step)}/pids.max"
        if os.path.exists(path):
            return Path(path).read_text().strip()
    raise AssertionError(f"no pids.max for {step}")


def test_a_process_that_leaves_its_job_dies_with_it_and_is_charged_to_it(accounts) -> None:
    """The shipped emulated configuration's tracking (proctrack/cgroup): a double-forked setsid burner
    outlives neither its COMPLETED job nor goes unaccounted; the job's pids are bounded."""
    with own_cluster("ProctrackType=proctrack/cgroup") as cluster:
        if "control groups unavailable" in (cluster.logs / "noded0.log").read_text():
            pytest.skip("this host gives the agent no control groups (the emulated fallback is pgid)")
        attacker = Account(USERS[0], cluster)
        pidfile = attacker.home / "burner.pid"
        script = attacker.home / "escape.sh"
        script.write_text(ESCAPE.format(pidfile=pidfile))
        job = attacker.sbatch("-o", "/dev/null", str(script))
        cluster.wait_state(job, "COMPLETED", timeout=60)
        burner = int(pidfile.read_text())
        wait_for(lambda: not os.path.exists(f"/proc/{burner}"), 30, what="the escaped burner killed")
        assert subprocess.run(["pgrep", "-u", attacker.name], capture_output=True).stdout == b""

        def charged() -> float | None:
            out = attacker.run("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "TotalCPU").stdout.decode().strip()
            if not out:
                return None
            minutes, _, seconds = out.rpartition(":")
            return float(seconds) + 60 * float(minutes or 0)

        assert wait_for(charged, 30, what="the job's CPU time") >= 1.5
        flag, go = attacker.home / "probe.pid", attacker.home / "probe.go"
        probe = attacker.sbatch("-o", "/dev/null", "--wrap",
                                f"echo $$ > {flag}; while [ ! -e {go} ]; do sleep 0.1; done")
        wait_for(lambda: flag.exists() and flag.read_text().strip(), 60, what="the probe running")
        assert _pids_max(int(flag.read_text())) == "8192"  # MaxPidsPerJob's default
        go.touch()
        assert final(cluster, probe)["state"] == "COMPLETED"


# --- what other users may see -----------------------------------------------------------------------

def test_private_data_hides_other_users_jobs_usage_and_accounts(accounts) -> None:
    """PrivateData=jobs,usage,users,accounts, as Slurm's: another user's job, with the secret typed
    in its submit line, is in none of the attacker's listings (squeue, scontrol, sacct, sprio,
    slurmrestd's jobs and slurmdb jobs); sshare and sacctmgr show the attacker's own rows only;
    an administrator still sees everything."""
    settings = ("PrivateData=jobs,usage,users,accounts\nAccountingStorageEnforce=associations\n"
                "PriorityType=priority/multifactor\nPriorityWeightAge=100")
    with own_cluster(settings) as cluster:
        cluster.run("sacctmgr", "-i", "add", "account", "red")
        cluster.run("sacctmgr", "-i", "add", "account", "blue")
        cluster.run("sacctmgr", "-i", "add", "user", USERS[0], "Account=red")
        cluster.run("sacctmgr", "-i", "add", "user", USERS[1], "Account=blue")
        attacker, owner = Account(USERS[0], cluster), Account(USERS[1], cluster)
        secret = owner.sbatch("-H", "-D", "/tmp", "-o", "/dev/null", "--wrap", "echo s3cr3t-token")
        ended = owner.sbatch("-D", "/tmp", "-o", "/dev/null", "--wrap", "true")
        mine = attacker.sbatch("-H", "-D", "/tmp", "-o", "/dev/null", "--wrap", "true")
        cluster.wait_state(ended, "COMPLETED", timeout=60)
        cluster.accounted(ended)
        seen = b"".join(attacker.run(*args).stdout + attacker.run(*args).stderr for args in (
            ("squeue", "-a", "-o", "%i %u %o"), ("scontrol", "show", "job"), ("sprio", "-l"),
            ("sacct", "-a", "-X", "-o", "JobID,User,SubmitLine%80"), ("scontrol", "show", "job", str(secret))))
        assert b"s3cr3t" not in seen and owner.name.encode() not in seen, seen
        assert str(mine).encode() in seen
        for args in (("scontrol", "show", "job", str(secret)), ("sacct", "-n", "-X", "-j", str(ended))):
            shown = attacker.run(*args)
            assert owner.name.encode() not in shown.stdout, (args, shown.stdout)
        headers = {"X-SLURM-USER-NAME": attacker.name, "X-SLURM-USER-TOKEN": attacker.token()}
        base = f"http://127.0.0.1:{cluster.port}"
        for path in ("/slurm/v0.0.40/jobs", "/slurmdb/v0.0.40/jobs", f"/slurm/v0.0.40/job/{secret}",
                     "/slurmdb/v0.0.40/users", "/slurmdb/v0.0.40/accounts", "/slurmdb/v0.0.40/associations"):
            body = httpx.get(base + path, headers=headers).text
            assert "s3cr3t" not in body and owner.name not in body and '"blue"' not in body, (path, body[:300])
        shares = attacker.run("sshare", "-a", "-P", "-n").stdout.decode()
        assert owner.name not in shares and "blue" not in shares and attacker.name in shares, shares
        users = attacker.run("sacctmgr", "show", "user", "-P", "-n").stdout.decode()
        assert users.split("|")[0] == attacker.name and owner.name not in users, users
        listed = attacker.run("sacctmgr", "show", "account", "-P", "-n").stdout.decode()
        assert "red" in listed and "blue" not in listed, listed
        admin = cluster.run("squeue", "-a", "-h", "-o", "%i").stdout.split()
        assert str(secret) in admin and str(mine) in admin


def test_an_energy_budget_stops_the_requeue_trick(accounts) -> None:
    """A burner requeued every few seconds: its runs' energy adds up in the account's budget
    (GrpTRESMins=energy, joules), which stops it as it stops the same job left alone; before, each
    requeue erased the run and the budget was never reached."""
    settings = ("EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n"
                "AccountingStorageEnforce=associations,limits\nPriorityType=priority/multifactor\n"
                "PriorityCalcPeriod=0:01")
    with own_cluster(settings, node_extra="IdleWatts=95 MaxWatts=190") as cluster:
        cluster.run("sacctmgr", "-i", "add", "account", "capped", "GrpTRESMins=energy=1500")
        cluster.run("sacctmgr", "-i", "add", "user", USERS[0], "Account=capped")
        attacker = Account(USERS[0], cluster)
        job = attacker.sbatch("-D", "/tmp", "-o", "/dev/null", "--wrap", "while :; do :; done")

        def stopped() -> bool:
            info = cluster.job(job)
            return info["state"] == "TIMEOUT" or (info["state"] == "PENDING"
                                                  and info["reason"] == "AssocGrpEnergyMinutes")

        for run in range(12):
            wait_for(lambda r=run: stopped() or ((j := cluster.job(job))["state"] == "RUNNING"
                                                 and j["restart_count"] == r and time.time() - j["start_time"] >= 3),
                     60, what=f"run {run} under way for 3 s")
            if stopped():
                break
            assert attacker.run("scontrol", "requeue", str(job)).returncode == 0
        wait_for(stopped, 60, what="the budget stopping the job")
        attacker.run("scancel", str(job))
        cluster.wait_state(job, {"CANCELLED", "TIMEOUT"}, timeout=60)

        def records() -> list[list[str]] | None:
            out = attacker.run("sacct", "-D", "-X", "-n", "-P", "-j", str(job), "-o", "State,ConsumedEnergyRaw")
            rows = [line.split("|") for line in out.stdout.decode().splitlines() if line]
            return rows if rows and rows[-1][0] != "RUNNING" and all(r[1] for r in rows if r[0] != "CANCELLED") \
                else None

        rows = wait_for(records, 60, 0.3, what="every run's record with its energy")
        runs = [int(r[1]) for r in rows if r[1]]
        # the budget was met by the runs together, not by the last one alone (each ran about 3 s)
        # (a run's record holds its energy up to its nodes' last reading: a second's worth may be missing)
        assert rows[0][0] == "REQUEUED" and len(runs) >= 2 and sum(runs) >= 1300 and runs[-1] < 1500, rows


def test_another_users_running_step_is_out_of_reach(shared: Cluster, mallory: Account, victim: Account) -> None:
    """A victim's MPI step (srun --mpi=pmi2) while it runs: its PMI server is a socket pair, with no
    path or port anyone could join; the doors srun uses to relay fences and to end the step (srun -K,
    an abort) answer mallory 403 whether she brings no credential or her own job's; the step runs on."""
    ready, go = victim.home / "pmi-ready", victim.home / "pmi-go"
    out = victim.home / "pmi.out"
    task = (f'echo "$$ $PMI_FD" > {ready}.$SLURM_PROCID; while [ ! -e {go} ]; do sleep 0.2; done; '
            'echo "alive $SLURM_PROCID"')
    job = victim.sbatch("-N2", "-n2", "-o", str(out), "--wrap", f"srun --mpi=pmi2 sh -c '{task}'")
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() and Path(f"{ready}.{r}").read_text().strip()
                         for r in (0, 1)), 60, what="the victim's step running")
    for rank in (0, 1):
        pid, fd = Path(f"{ready}.{rank}").read_text().split()
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        assert target.startswith("socket:["), target
        inode = target[len("socket:["):-1]
        named = [line for line in Path("/proc/net/unix").read_text().splitlines()[1:]
                 if line.split()[6] == inode and len(line.split()) > 7]
        assert named == [], named  # unnamed: no path to connect to
    own = mallory.sbatch("--wrap", "sleep 300")
    shared.wait_state(own, "RUNNING")
    headers = {"Authorization": f"Bearer {mallory.token()}"}
    base = f"http://127.0.0.1:{shared.port}"
    mine = httpx.post(f"{base}/v1/jobs/{own}/steps", json={"ntasks": 1}, headers=headers).json()
    placements = {n["name"]: n["agent_url"] for n in shared.nodes()}
    for node, agent in placements.items():
        for credential in ("", mine["credential"]):
            target = {"job_id": job, "step_id": 0, "node": node, "credential": credential}
            for path, extra in (("/v1/steps/terminate", {"reason": "mallory"}),
                                ("/v1/steps/pmi", {"message": {"pmi": "fence", "seq": 0, "kvs": {"k": "poison"}}}),
                                ("/v1/steps/stdin", {"data": "", "eof": True})):
                reply = httpx.post(f"{agent}{path}", json={**target, **extra}, headers=headers, timeout=30)
                assert reply.status_code == 403, (path, reply.status_code, reply.text)
    # sstat's door: the victim's tasks are not read for mallory, with no credential or her own job's
    granted = httpx.get(f"{base}/v1/jobs/{own}/steps/stat", params={"all_steps": "true"}, headers=headers).json()
    for credential in ("", granted["steps"][0]["credential"]):
        for node, agent in placements.items():
            reply = httpx.post(f"{agent}/v1/steps/stat", headers=headers, timeout=30, json={
                "job_id": job, "steps": ["0", "batch"], "nodes": [node], "credential": credential})
            assert reply.status_code == 403, reply.text
    assert httpx.get(f"{base}/v1/jobs/{job}/steps/stat", headers=headers).status_code == 403
    # nor may she run tasks of no job (srun -Z is root's)
    refused = httpx.post(f"{base}/v1/steps/noalloc", json={"nodelist": list(placements)}, headers=headers)
    assert refused.status_code == 403, refused.text
    for args in ([], ["--signal=KILL"], ["--signal=USR1"]):  # nor through the controller
        refused = mallory.run("scancel", *args, f"{job}.0")
        assert refused.returncode == 1 and b"Access/permission denied" in refused.stderr, refused.stderr
    go.touch()
    assert final(shared, job)["state"] == "COMPLETED", out.read_text()
    assert sorted(line for line in out.read_text().splitlines() if line.startswith("alive")) == ["alive 0", "alive 1"]
    assert mallory.run("scancel", str(own)).returncode == 0


def test_sbcast_writes_only_as_the_jobs_user(shared: Cluster, mallory: Account, victim: Account) -> None:
    """sbcast's file is written by the job's user, never by root: mallory cannot broadcast into a
    folder only root may write, nor to the victim's job, nor bring her own job's credential (or a
    step's) to the agent for the victim's; what she does broadcast is hers."""
    source = mallory.home / "payload"
    source.write_text("#!/bin/sh\necho owned\n")
    os.chown(source, mallory.uid, mallory.gid)
    own = mallory.sbatch("--wrap", "sleep 300")
    theirs = victim.sbatch("--wrap", "sleep 300")
    shared.wait_state(own, "RUNNING")
    shared.wait_state(theirs, "RUNNING")
    guarded = Path(tempfile.mkdtemp(prefix="wattsched-root-only-"))
    try:
        done = mallory.run("sbcast", "-j", str(own), str(source), str(guarded / "planted"))
        assert done.returncode == 1 and b"Permission denied" in done.stderr, done.stderr
        assert list(guarded.iterdir()) == []
        done = mallory.run("sbcast", "-j", str(theirs), str(source), str(mallory.home / "x"))
        assert done.returncode == 1 and b"sbcast: error: " in done.stderr
        mine = mallory.home / "mine"
        assert mallory.run("sbcast", "-j", str(own), str(source), str(mine)).returncode == 0
        assert (mine.stat().st_uid, mine.read_text()) == (mallory.uid, source.read_text())
    finally:
        shutil.rmtree(guarded, ignore_errors=True)
    headers = {"Authorization": f"Bearer {mallory.token()}"}
    base = f"http://127.0.0.1:{shared.port}"
    grant = httpx.post(f"{base}/v1/jobs/{own}/bcast", json={}, headers=headers).json()
    step = httpx.post(f"{base}/v1/jobs/{own}/steps", json={"ntasks": 1}, headers=headers).json()
    node = next(iter(shared.job(theirs)["alloc_cpus"]))
    agents = {n["name"]: n["agent_url"] for n in shared.nodes()}
    for credential in (grant["credential"], step["credential"], ""):
        head = {"job_id": theirs, "nodes": [node], "credential": credential, "dest": str(victim.home / "y"),
                "size": 1, "mode": 0o755}
        reply = httpx.post(f"{agents[node]}/v1/bcast", content=json.dumps(head).encode() + b"\nx",
                           headers=headers, timeout=30)
        assert reply.status_code == 403, reply.text
    assert not (victim.home / "y").exists()
    for job in (own, theirs):
        shared.run("scancel", str(job))


PMIX_CLIENT = r"""
#include <pmix.h>
#include <stdio.h>
int main(void) {
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    printf("init %d\n", rc);
    fflush(stdout);
    if (rc == PMIX_SUCCESS)
        PMIx_Finalize(NULL, 0);
    return rc == PMIX_SUCCESS ? 0 : 1;
}
"""


def test_another_user_cannot_join_a_steps_pmix_namespace(shared: Cluster, mallory: Account, victim: Account) -> None:
    """PMIx 4 serves a step's clients over TCP on loopback, where anyone can connect. Knowing the
    server's port (a scan finds it) and the job and step ids, mallory cannot join the victim's step as
    one of its ranks (its namespace's name holds a part derived from the step's credential), and the
    victim's own rank is served after her tries. Even with the victim's whole PMIx environment she is
    refused (MUNGE proves her uid)."""
    why = ensure_munge()
    if why:
        pytest.skip(f"mpi/pmix needs munged: {why}")
    include = Path("/usr/lib/x86_64-linux-gnu/pmix2/include")
    if not (include / "pmix.h").exists() or not shutil.which("gcc"):
        pytest.skip("compiling a PMIx client needs gcc and Debian's libpmix-dev")
    tools = Path(tempfile.mkdtemp(prefix="wattsched-pmix-client-"))
    os.chmod(tools, 0o755)
    try:
        (tools / "client.c").write_text(PMIX_CLIENT)
        subprocess.run(["gcc", "-o", str(tools / "client"), str(tools / "client.c"), f"-I{include}", "-lpmix"],
                       check=True, capture_output=True, timeout=120)
        leak, out = victim.home / "pmix-env", victim.home / "pmix.out"
        first, served, second = victim.home / "go-1", victim.home / "served", victim.home / "go-2"
        task = (f"env | grep ^PMIX_ > {leak}.tmp; chmod 644 {leak}.tmp; mv {leak}.tmp {leak}; "
                f"while [ ! -e {first} ]; do sleep 0.2; done; {tools / 'client'}; touch {served}; "
                f"while [ ! -e {second} ]; do sleep 0.2; done")
        job = victim.sbatch("-n1", "-o", str(out), "--wrap", f"srun --mpi=pmix sh -c '{task}'")
        wait_for(lambda: leak.exists() or shared.job(job)["state"] not in ("PENDING", "RUNNING"), 60,
                 what="the victim's PMIx step running")
        assert leak.exists(), out.read_text()
        stolen = dict(line.split("=", 1) for line in leak.read_text().splitlines() if "=" in line)
        assert "PMIX_SERVER_URI4" in stolen and stolen["PMIX_RANK"] == "0"
        # her client gives up when refused rather than trying for ever (PMIx's default)
        patience = {"PMIX_MCA_ptl_base_max_retries": "1", "PMIX_MCA_ptl_base_handshake_max_retries": "1",
                    "PMIX_MCA_ptl_base_handshake_wait_time": "10"}
        uri = {k: v for k, v in stolen.items() if k.startswith("PMIX_SERVER_URI")}
        for rank in ("0", "1"):
            guess = mallory.run(str(tools / "client"), timeout=120, env=mallory.env(
                **uri, **patience, PMIX_NAMESPACE=f"slurm.pmix.{job}.0", PMIX_RANK=rank, PMIX_SECURITY_MODE="munge"))
            assert guess.returncode != 0 and b"init 0" not in guess.stdout, guess.stdout
        first.touch()
        wait_for(served.exists, 60, what="the victim's rank served after her tries")
        assert "init 0" in out.read_text()
        for mode in ("native", "munge"):
            whole = mallory.run(str(tools / "client"), timeout=120,
                                env=mallory.env(**{**stolen, **patience, "PMIX_SECURITY_MODE": mode}))
            assert whole.returncode != 0 and b"init 0" not in whole.stdout, whole.stdout
        second.touch()
        assert final(shared, job)["state"] == "COMPLETED", out.read_text()
    finally:
        shutil.rmtree(tools, ignore_errors=True)


# --- event triggers ---------------------------------------------------------------------------------

def test_a_trigger_runs_as_its_setter_and_names_only_what_its_setter_may_run(
        shared: Cluster, mallory: Account, victim: Account, tmp_path) -> None:
    """strigger as a user: the program runs as that user with that user's groups (never root's); a
    program the user may not execute is refused, checked as the user (root never looks at the path);
    another user's triggers cannot be cleared; what is sent is bounded, and so is how many one user
    keeps."""
    seen = mallory.home / "trigger-ran"
    program = mallory.home / "on-fini"
    program.write_text(f"#!/bin/sh\necho \"$(id -u) $(id -G) $*\" > {seen}\n")
    os.chown(program, mallory.uid, mallory.gid)
    program.chmod(0o700)
    job = mallory.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
    done = mallory.run("strigger", "--set", f"--jobid={job}", "--fini", f"--program={program} end")
    assert done.returncode == 0, done.stderr
    mine = json.loads(mallory.run("strigger", "--get", "--json").stdout)["triggers"][0]
    assert (mine["user"], mine["uid"]) == (mallory.name, mallory.uid)
    for args in (["--clear", f"--id={mine['trig_id']}"], ["--clear", f"--user={mallory.name}"],
                 ["--clear", f"--jobid={job}"]):
        refused = victim.run("strigger", *args)
        assert refused.returncode == 1 and b"Access/permission denied" in refused.stderr, (args, refused.stderr)
    # victim's own trigger on mallory's program, which victim may not execute (0700): refused
    stolen = victim.run("strigger", "--set", f"--jobid={job}", "--fini", f"--program={program}")
    assert stolen.returncode == 1 and b"slurm_set_trigger: Access/permission denied" in stolen.stderr
    mallory.run("scancel", str(job))
    ran = wait_for(lambda: seen.exists() and seen.read_text(), 20, what="the trigger's program")
    uid, *rest = ran.split()
    assert int(uid) == mallory.uid and rest[-2:] == ["end", str(job)]
    assert sorted(map(int, rest[:-2])) == sorted(mallory.groups)
    secret = tmp_path / "root-only"  # a folder only root may enter
    secret.mkdir(mode=0o700)
    (secret / "tool").write_text("#!/bin/sh\ntrue\n")
    (secret / "tool").chmod(0o755)
    headers = {"Authorization": f"Bearer {mallory.token()}"}
    base = f"http://127.0.0.1:{shared.port}/v1/triggers"
    for body in ({"res_type": "node", "types": ["down"], "program": f"{secret}/tool"},
                 {"res_type": "node", "types": ["down"], "program": "/etc/shadow"}):
        reply = httpx.post(base, headers=headers, json=body)
        assert reply.status_code == 403 and "Access/permission denied" in reply.text, reply.text
    for body in ({"res_type": "node", "types": ["down"], "program": "/" + "x" * 5000},
                 {"res_type": "node", "types": ["down"] * 17, "program": str(program)},
                 {"res_type": "node", "types": ["down"], "res_id": "n" * 9000, "program": str(program)},
                 {"res_type": "node", "types": ["down"], "offset": 40000, "program": str(program)},
                 {"res_type": "node", "types": ["fini"], "program": str(program)},
                 {"res_type": "bogus", "types": ["down"], "program": str(program)}):
        reply = httpx.post(base, headers=headers, json=body)
        assert 400 <= reply.status_code < 500, (body, reply.text)
    # idle for nine hours: none of these fires during the test; one user keeps at most USER_MAX of them
    from wattsched.controller.triggerctl import USER_MAX

    codes = [httpx.post(base, headers=headers, json={"res_type": "node", "types": ["idle"], "offset": 32000 - i,
                                                     "program": str(program)}).status_code for i in range(USER_MAX + 1)]
    assert codes.count(200) == USER_MAX and codes[-1] == 503
    assert victim.run("strigger", "--set", "--idle", "--offset=32000", "--program=/bin/true").returncode == 0
    assert mallory.run("strigger", "--clear", f"--user={mallory.name}").returncode == 0
    assert victim.run("strigger", "--clear", f"--user={victim.name}").returncode == 0
    assert shared.run("strigger", "--get").stdout == ""

"""Slurm's power saving on an emulated cluster, through the real controller, agents, emulated BMCs
(IPMI chassis control over RMCP+, or Redfish's Reset over HTTPS, on loopback) and commands: idle
nodes go to ``idle~``, a job on them is CONFIGURING while they power up, a node that never comes
back goes DOWN and its job is requeued, and the saving is reported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from wattsched.harness.testing import ALICE, BIN, Cluster, free_port, free_port_block, wait_for

pytestmark = pytest.mark.slow

NODE_WATTS = "IdleWatts=95 MaxWatts=190 PowerSaveWatts=10 SwitchOnTime=2 SwitchOffTime=1"


def _cluster(tmp_path, extra: str, bmc: bool, nodes: int = 3, cpus: int = 2) -> Cluster:
    return Cluster(tmp_path, nodes=nodes, cpus=cpus, bmc=bmc, node_extra=NODE_WATTS,
                   extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n"
                         f"EmulatedBMCPort={free_port_block(nodes)}\n{extra}").start()


def _run(cluster: Cluster, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), env=env or cluster.env, cwd=cluster.work, capture_output=True, text=True,
                          timeout=60)


def _out(cluster: Cluster, *args: str) -> str:
    result = _run(cluster, *args)
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def _sinfo(cluster: Cluster) -> dict[str, str]:
    return {n: s for s, n in (line.split() for line in _out(cluster, "sinfo", "-h", "-N", "-o", "%t %N").split("\n")
                              if line)}


def test_idle_nodes_power_down_and_wake_for_a_job_through_their_bmcs(tmp_path) -> None:
    cluster = _cluster(tmp_path, "SuspendTime=2\nSuspendTimeout=2\nResumeTimeout=30\nSuspendExcNodes=n03", bmc=True)
    try:
        wait_for(lambda: _sinfo(cluster) == {"n01": "idle~", "n02": "idle~", "n03": "idle"}, 30,
                 what="idle nodes powered down, the excluded one left on")
        # SuspendTimeout is the admin's promise of how long a switch-off takes, not a wait for the
        # BMCs: on a loaded machine SuspendProgram may still be switching n02 when it expires
        wait_for(lambda: _out(cluster, "wattsched", "power", "status", "n[01-03]").split("\n")[:3] ==
                 ["n01 off", "n02 off", "n03 on"], 15, what="the BMCs reporting the chassis off")
        shown = _out(cluster, "scontrol", "show", "node", "n01")
        assert "State=IDLE+POWERED_DOWN " in shown
        wait_for(lambda: "CurrentWatts=10 " in _out(cluster, "scontrol", "show", "node", "n01"), 15,
                 what="a switched-off node drawing PowerSaveWatts")

        job = _out(cluster, "sbatch", "--parsable", "-N3", "--wrap", "sleep 2").strip()
        wait_for(lambda: _out(cluster, "squeue", "-h", "-j", job, "-o", "%t").strip() == "CF", 10,
                 what="the job CONFIGURING while its nodes power up")
        assert _sinfo(cluster)["n01"].endswith("#")
        assert "JobState=CONFIGURING" in _out(cluster, "scontrol", "show", "job", job)
        wait_for(lambda: _out(cluster, "squeue", "-h", "-j", job, "-o", "%t").strip() in ("R", ""), 30,
                 what="the job running once its nodes are up")
        wait_for(lambda: "COMPLETED" in _out(cluster, "sacct", "-n", "-X", "-j", job, "-o", "State"), 60,
                 what="the job completed")
        wait_for(lambda: set(_sinfo(cluster).values()) == {"idle~", "idle"}, 30, what="powered down again")

        # an administrator switches the excluded node by hand, off then on
        assert _run(cluster, "scontrol", "update", "nodename=n03", "state=power_down").returncode == 0
        wait_for(lambda: _sinfo(cluster)["n03"] == "idle~", 20, what="n03 powered down by hand")
        assert _run(cluster, "scontrol", "update", "nodename=n03", "state=power_up").returncode == 0
        wait_for(lambda: _sinfo(cluster)["n03"] == "idle", 20, what="n03 powered up by hand")

        report = json.loads(_out(cluster, "wattsched", "power", "report", "--json"))
        assert report["switches_off"] >= 3 and report["switches_on"] >= 3
        assert report["jobs_delayed"] == 1 and 1.5 <= report["wait_added_s"] < 30
        assert report["saved_j"] > 0 and report["off_s"] > 0
        # the default period is what the energy samples cover: every figure is measured, none n/a
        assert report["cluster_j"] is not None and report["saved_pct"] is not None
        parsable = _out(cluster, "wattsched", "power", "report", "-P").split("\n")
        assert parsable[0].startswith("Start|End|Nodes|SwitchesOff|SwitchesOn|")
        assert parsable[1].split("|")[2] == "3" and "n/a" not in parsable[1]

        # refused: an unknown node, a state that is not one, a user who is not an administrator
        bad = _run(cluster, "scontrol", "update", "nodename=n99", "state=power_down")
        assert bad.returncode == 1 and "Invalid node name specified: n99" in bad.stderr
        bad = _run(cluster, "scontrol", "update", "nodename=n01", "state=power_sideways")
        assert bad.returncode == 1 and "Invalid node state specified" in bad.stderr
        user = dict(cluster.env, SLURM_JWT=_user_token(cluster))
        bad = _run(cluster, "scontrol", "update", "nodename=n01", "state=power_up", env=user)
        assert bad.returncode == 1 and "Access/permission denied" in bad.stderr
        bad = _run(cluster, "wattsched", "power", "off", "n77")
        assert bad.returncode == 1 and "Invalid node name specified: n77" in bad.stderr
        assert set(_sinfo(cluster).values()) <= {"idle~", "idle"}  # nothing changed by the refusals
    finally:
        cluster.stop()


def test_a_job_goes_to_nodes_that_are_on_before_switched_off_ones(tmp_path) -> None:
    # n01-n04 never power down, n05-n08 do. A job on n05-n07 wakes those three; then a one-node
    # job finds n01-n04 on and idle, and n08 off, alone between busy nodes (the tightest fit): it
    # runs on n01, and n08 stays off. (The simulator makes the same choice: test_simulator.py.)
    # The BMCs are switched over Redfish here (over IPMI in the test above).
    cluster = _cluster(tmp_path, "SuspendTime=2\nSuspendTimeout=2\nResumeTimeout=30\nSuspendExcNodes=n[01-04]\n"
                       "BmcProtocol=Redfish", bmc=True, nodes=8, cpus=1)
    try:
        wait_for(lambda: _sinfo(cluster) == {**{f"n0{i}": "idle" for i in range(1, 5)},
                                             **{f"n0{i}": "idle~" for i in range(5, 9)}}, 30,
                 what="n05-n08 powered down")
        woken = _out(cluster, "sbatch", "--parsable", "-w", "n[05-07]", "--wrap", "sleep 300").strip()
        wait_for(lambda: _out(cluster, "squeue", "-h", "-j", woken, "-o", "%t").strip() == "R", 30,
                 what="the job on n05-n07 running once they are up")
        job = _out(cluster, "sbatch", "--parsable", "--wrap", "sleep 300").strip()
        wait_for(lambda: _out(cluster, "squeue", "-h", "-j", job, "-o", "%t").strip() == "R", 30,
                 what="the one-node job running")
        assert _out(cluster, "squeue", "-h", "-j", job, "-o", "%N").strip() == "n01"
        assert _sinfo(cluster)["n08"] == "idle~"
        report = json.loads(_out(cluster, "wattsched", "power", "report", "--json"))
        assert report["switches_on"] == 3
    finally:
        cluster.stop()


def test_a_failing_suspend_program_leaves_the_node_on(tmp_path) -> None:
    # SuspendTimeout is long: only the program's failure can bring n01 back before it
    cluster = _cluster(tmp_path, "SuspendTime=2\nSuspendTimeout=300\nSuspendProgram=/bin/false\n"
                                 "ResumeProgram=/bin/true\nSuspendExcNodes=n[02-03]", bmc=False)
    try:
        log = cluster.logs / "controller.log"
        wait_for(lambda: "power program failed" in log.read_text(), 30, what="the failure logged")
        line = next(x for x in log.read_text().splitlines() if "power program failed" in x)
        assert "kind='suspend'" in line and "nodes='n01'" in line and "program='/bin/false'" in line
        wait_for(lambda: _sinfo(cluster)["n01"] == "idle", 20, what="n01 on and idle again")
        job = _out(cluster, "sbatch", "--parsable", "-w", "n01", "--wrap", "true").strip()
        wait_for(lambda: "COMPLETED" in _out(cluster, "sacct", "-n", "-X", "-j", job, "-o", "State"), 30,
                 what="a job on n01, which never went off")
    finally:
        cluster.stop()


def test_a_failing_resume_program_downs_the_node_and_requeues_its_job(tmp_path) -> None:
    # ResumeTimeout is long: only the program's failure can end the resume before it
    cluster = _cluster(tmp_path, "SuspendTime=1\nSuspendTimeout=1\nResumeTimeout=300\nSuspendProgram=/bin/true\n"
                                 "ResumeProgram=/bin/false\nSuspendExcNodes=n[02-03]", bmc=False)
    try:
        wait_for(lambda: _sinfo(cluster)["n01"] == "idle~", 30, what="n01 powered down")
        job = _out(cluster, "sbatch", "--parsable", "-w", "n01", "--wrap", "true").strip()
        wait_for(lambda: "Reason=ResumeProgram failed" in _out(cluster, "scontrol", "show", "node", "n01"), 30,
                 what="n01 DOWN for its failed resume")
        assert _sinfo(cluster)["n01"].startswith("down")
        shown = _out(cluster, "scontrol", "show", "job", job)
        assert "JobState=PENDING" in shown and "Restarts=1" in shown  # requeued, to wait for n01
    finally:
        cluster.stop()


def test_a_node_that_never_comes_back_goes_down_and_its_job_is_requeued(tmp_path) -> None:
    # programs that do nothing: the nodes are flagged off, but nothing ever switches them back on
    cluster = _cluster(tmp_path, "SuspendTime=1\nSuspendTimeout=1\nResumeTimeout=3\n"
                                 "SuspendProgram=/bin/true\nResumeProgram=/bin/true", bmc=False)
    try:
        wait_for(lambda: set(_sinfo(cluster).values()) == {"idle~"}, 30, what="nodes powered down")
        job = _out(cluster, "sbatch", "--parsable", "-N1", "--wrap", "sleep 1").strip()
        wait_for(lambda: _out(cluster, "squeue", "-h", "-j", job, "-o", "%t").strip() == "CF", 10,
                 what="the job CONFIGURING")
        node = _out(cluster, "squeue", "-h", "-j", job, "-o", "%N").strip()
        wait_for(lambda: "Reason=ResumeTimeout reached" in _out(cluster, "scontrol", "show", "node", node), 15,
                 what="the node DOWN after ResumeTimeout")
        assert _sinfo(cluster)[node].startswith("down")
        shown = _out(cluster, "scontrol", "show", "job", job)
        assert "Restarts=1" in shown and "JobState=RUNNING" not in shown
    finally:
        cluster.stop()


def _user_token(cluster: Cluster) -> str:
    from wattsched import auth, config

    conf = config.load(str(cluster.conf))
    return auth.user_token(auth.read_key(conf.key_file), *ALICE)


def test_the_shipped_leaf257_config_with_an_idle_timeout_suspends_and_resumes(tmp_path) -> None:
    # etc/leaf257.conf as shipped (257 virtual nodes, 4 agents, no BMC settings), its state moved
    # here and its ports free, with an idle timeout: `wattsched emulate` starts the emulated BMCs
    # the default Suspend/ResumeProgram switch, nodes go idle~, and a job wakes four of them.
    text = (Path(__file__).resolve().parents[2] / "etc" / "leaf257.conf").read_text()
    text = text.replace("../wattsched-state/leaf257", str(tmp_path / "state"))
    text = re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", text)
    text = text.replace("NodeName=DEFAULT ", "NodeName=DEFAULT SwitchOnTime=2 SwitchOffTime=2 ")
    conf = tmp_path / "leaf.conf"
    # ResumeTimeout well above the ~10 s a wake takes here: on a loaded 2-core machine 257 virtual
    # nodes, 4 agents and the controller share the CPUs, and a wake past it would requeue the job
    conf.write_text(f"{text}\nEmulatedBMCPort={free_port_block(257)}\nSuspendTime=3\nSuspendTimeout=2\n"
                    "ResumeTimeout=600\nSuspendRate=0\n")
    env = dict(os.environ, WATTSCHED_CONF=str(conf), SLURM_CONF=str(conf),
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("SLURM_JOB_ID", None)

    def out(*args: str) -> str:
        done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    # the report from before the cluster's start: by default it begins where every node's energy
    # samples do, which on a loaded machine may come after the nodes were switched off
    began = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    out("wattsched", "emulate", "--daemon", str(conf))
    try:
        wait_for(lambda: out("sinfo", "-h", "-o", "%T %D").split() == ["idle~", "1", "idle~", "256"], 120,
                 what="all 257 nodes powered down")
        job = out("sbatch", "--parsable", "-N4", "--wrap", "true").strip()
        try:
            wait_for(lambda: "COMPLETED" in out("sacct", "-n", "-X", "-j", job, "-o", "State"), 300, 0.5,
                     what="the job run on four woken nodes")
        except AssertionError as exc:  # say where it stands
            raise AssertionError(f"{exc}\n{out('scontrol', 'show', 'job', job)}\n{out('sinfo', '-N', '-h')[:3000]}\n"
                                 f"{out('sacct', '-j', job)}") from None
        report = json.loads(out("wattsched", "power", "report", "--json", "--starttime", began))
        assert report["switches_off"] >= 257 and report["switches_on"] >= 4 and report["jobs_delayed"] == 1
        assert "power program failed" not in (tmp_path / "state" / "ctld" / "log" / "controller.log").read_text()
    finally:
        subprocess.run(["wattsched", "emulate", "--stop", str(conf)], env=env, capture_output=True, timeout=120)

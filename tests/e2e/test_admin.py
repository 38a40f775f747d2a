"""Administration through scontrol and sinfo: node states, requeue, config, machine-readable views."""

from __future__ import annotations

import json
import re
import time

from wattsched.harness.testing import Cluster, wait_for


def test_drain_resume_and_reasons(cluster: Cluster) -> None:
    cluster.run("scontrol", "update", "nodename=n[03-04]", "state=drain", "reason=maintenance window")
    nodes = {n["name"]: n for n in cluster.nodes()}
    assert nodes["n03"]["drain"] and nodes["n04"]["reason"] == "maintenance window"
    reasons = cluster.run("sinfo", "-R", "-h").stdout
    assert "maintenance window" in reasons and "n[03-04]" in reasons
    assert "State=IDLE+DRAIN" in cluster.run("scontrol", "show", "node", "n03").stdout
    # sinfo -t as Slurm's: a base state whatever the flags (idle is idle+drain too), drain the flag,
    # a,b either, a&b both; StateComplete every flag
    cluster.run("scontrol", "update", "nodename=n02", "state=down", "reason=cable")

    def listed(states: str) -> dict[str, str]:
        out = cluster.run("sinfo", "-Nh", "-O", "NodeList,StateComplete", f"--states={states}").stdout
        return dict(line.split() for line in out.splitlines())

    assert listed("idle") == {"n01": "idle", "n03": "idle+drain", "n04": "idle+drain"}
    assert listed("drain") == {"n03": "idle+drain", "n04": "idle+drain"}
    assert listed("down,drain") == {"n02": "down", "n03": "idle+drain", "n04": "idle+drain"}
    assert listed("idle&drain") == {"n03": "idle+drain", "n04": "idle+drain"}
    assert listed("down&drain") == {}
    assert len(listed("all")) == 4 and listed("reboot,boot") == {}
    bad = cluster.run("sinfo", "-t", "sideways", check=False)
    assert bad.returncode == 1 and 'Bad state string: "sideways"' in bad.stderr
    cluster.run("scontrol", "update", "nodename=n02", "state=resume")
    job_id = cluster.sbatch("-w", "n03", "--wrap", "true")
    wait_for(lambda: cluster.job(job_id)["reason"] == "ReqNodeNotAvail", 10, what="ReqNodeNotAvail")
    cluster.run("scontrol", "update", "nodename=n[03-04]", "state=resume")
    cluster.wait_state(job_id, "COMPLETED")
    assert "drain" not in cluster.run("sinfo", "-h", "-o", "%t").stdout
    # NodeName=ALL: every node, as Slurm's
    cluster.run("scontrol", "update", "NodeName=ALL", "State=DRAIN", "Reason=all of them")
    assert all(n["drain"] and n["reason"] == "all of them" for n in cluster.nodes())
    cluster.run("scontrol", "update", "nodename=all", "state=resume")
    assert not any(n["drain"] for n in cluster.nodes())
    # a cloud node's instance: set on each node named, shown by scontrol (and its JSON), cleared by ""
    cluster.run("scontrol", "update", "NodeName=n[01-02]", "InstanceId=i-0abc", "InstanceType=c5.large")
    shown = cluster.run("scontrol", "show", "node", "n02").stdout
    assert "\n   InstanceId=i-0abc InstanceType=c5.large\n" in shown
    listed = {n["name"]: n for n in json.loads(cluster.run("scontrol", "show", "nodes", "--json").stdout)["nodes"]}
    assert (listed["n01"]["instance_id"], listed["n01"]["instance_type"], listed["n03"]["instance_id"]) == \
        ("i-0abc", "c5.large", "")
    cluster.run("scontrol", "update", "NodeName=n01", "InstanceId=")
    assert "InstanceId" not in cluster.run("scontrol", "show", "node", "n01").stdout.replace("InstanceType", "")


def test_requeue_running_job(cluster: Cluster, tmp_path) -> None:
    runs = tmp_path / "runs"
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", f"echo $SLURM_RESTART_COUNT >> {runs}; sleep 30")
    cluster.wait_state(job_id, "RUNNING")
    wait_for(lambda: runs.exists(), 10, what="first run")
    cluster.run("scontrol", "requeue", str(job_id))
    job = wait_for(lambda: (j := cluster.job(job_id))["restart_count"] == 1 and j, 10, what="requeued")
    assert job["state"] in ("PENDING", "RUNNING")
    # the second run really runs, and the first run's end (it was killed) does not end it
    wait_for(lambda: runs.read_text().split() == ["0", "1"], 20, what="second run")
    time.sleep(1)
    assert cluster.job(job_id)["state"] == "RUNNING"
    cluster.run("scancel", str(job_id))


def test_immediate_fails_when_resources_are_busy(cluster: Cluster) -> None:
    blocker = cluster.sbatch("-N", "4", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 30")
    cluster.wait_state(blocker, "RUNNING")
    result = cluster.run("srun", "--immediate", "-n", "1", "true", check=False)
    assert result.returncode != 0
    assert "srun: error: Unable to allocate resources" in result.stderr
    # --immediate=N: the job waits N seconds, then is cancelled, as Slurm's
    waited = cluster.run("srun", "--immediate=2", "-n", "1", "true", check=False)
    queued = re.search(r"srun: job (\d+) queued and waiting for resources", waited.stderr)
    assert waited.returncode == 1 and queued, waited.stderr
    assert waited.stderr.endswith("srun: error: Unable to allocate resources: Requested nodes are busy\n")
    job = cluster.wait_state(int(queued.group(1)), "CANCELLED")
    assert job["end_time"] - job["submit_time"] >= 2
    cluster.run("scancel", str(blocker))


def test_show_config_partition_and_json(cluster: Cluster) -> None:
    config = cluster.run("scontrol", "show", "config").stdout
    assert config.startswith("Configuration data as of ")
    assert f"ClusterName             = {cluster.name}" in config
    assert "SchedulerType           = sched/backfill" in config
    from wattsched import SLURM_RELEASE, __version__

    # Slurm's version line, and ours (the commands' -V is Slurm's alone)
    assert f"SLURM_VERSION           = {'.'.join(SLURM_RELEASE)}\n" in config
    assert f"WATTSCHED_VERSION       = {__version__}\n" in config
    part = cluster.run("scontrol", "show", "partition", "debug").stdout
    assert part.startswith("PartitionName=debug") and "TotalCPUs=16 TotalNodes=4" in part
    # Slurm 23.11's data_parser/v0.0.40 layout
    sinfo = json.loads(cluster.run("sinfo", "--json").stdout)
    assert sinfo["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.40" and sinfo["errors"] == []
    assert sum(g["nodes"]["total"] for g in sinfo["sinfo"]) == 4
    assert {g["partition"]["name"] for g in sinfo["sinfo"]} == {"debug"}
    shown = json.loads(cluster.run("scontrol", "--json", "show", "node", "n01").stdout)
    assert shown["nodes"][0]["cpus"] == 4 and shown["nodes"][0]["name"] == "n01"
    assert isinstance(shown["nodes"][0]["state"], list)
    wrong = cluster.run("sinfo", "--json=v0.0.38", check=False)
    assert wrong.returncode == 1 and "data_parser/v0.0.40" in wrong.stderr
    one_line = cluster.run("scontrol", "-o", "show", "node", "n01").stdout
    assert one_line.count("\n") == 1 and "NodeName=n01 " in one_line


def test_openapi_schema_is_served(cluster: Cluster) -> None:
    schema = cluster.api("GET", "/openapi.json", token=None).json()
    assert "/v1/jobs" in schema["paths"] and "JobSubmit" in schema["components"]["schemas"]


def test_scancel_signal_and_srun_task_output_files(cluster: Cluster) -> None:
    script = cluster.work / "usr1.sh"
    script.write_text("#!/bin/bash\ntrap 'echo caught USR1; exit 0' USR1\nwhile true; do sleep 0.2; done\n")
    job_id = cluster.sbatch("-o", "usr1-%j.out", str(script))
    cluster.wait_state(job_id, "RUNNING")
    wait_for(lambda: (cluster.root / "spool").exists(), 5)
    import time

    time.sleep(0.5)  # let bash install its trap
    cluster.run("scancel", "--signal=USR1", "--batch", str(job_id))
    cluster.wait_state(job_id, "COMPLETED")
    assert "caught USR1" in (cluster.work / f"usr1-{job_id}.out").read_text()
    cluster.run("srun", "-n", "3", "-o", "task-%t.out", "sh", "-c", "echo I am $SLURM_PROCID")
    assert [(cluster.work / f"task-{t}.out").read_text() for t in range(3)] == [f"I am {t}\n" for t in range(3)]
    # in an array's task, a step's %A and %a are its array's id and its index
    array = cluster.sbatch("-o", "/dev/null", "--array=1-2", "--wrap",
                           "srun -o step-%A.%a.out echo $SLURM_ARRAY_TASK_ID")
    for task in (1, 2):
        out = cluster.work / f"step-{array}.{task}.out"
        wait_for(lambda out=out, task=task: out.exists() and out.read_text() == f"{task}\n", 30,
                 what=f"task {task}'s step file")


def test_emulate_starts_and_stops_a_cluster(tmp_path) -> None:
    import os
    import subprocess

    from wattsched.harness.testing import BIN, free_port

    conf = tmp_path / "emu.conf"
    conf.write_text(f"ClusterName=emu\nSlurmctldPort={free_port()}\nStateSaveLocation=state/ctld\n"
                    "SlurmdSpoolDir=state/spool\nEmulatedAgents=2\nNodeName=v[1-6] CPUs=2 RealMemory=1000\n"
                    "PartitionName=p Nodes=v[1-6] Default=YES\n")
    env = dict(os.environ, WATTSCHED_CONF=str(conf))
    up = subprocess.run([str(BIN / "wattsched"), "emulate", "--daemon", str(conf)], env=env, capture_output=True,
                        text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith(f"export WATTSCHED_CONF={conf}")
        assert "6/6 nodes registered" in up.stderr
        again = subprocess.run([str(BIN / "wattsched"), "emulate", "--daemon", str(conf)], env=env,
                               capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "already running" in again.stderr
        sinfo = subprocess.run([str(BIN / "sinfo"), "-h", "-o", "%D %t"], env=env, capture_output=True, text=True)
        assert sinfo.stdout.split() == ["6", "idle"]
    finally:
        down = subprocess.run([str(BIN / "wattsched"), "emulate", "--stop", str(conf)], env=env,
                              capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "stopped" in down.stderr
    assert subprocess.run([str(BIN / "sinfo")], env=env, capture_output=True).returncode != 0


def test_emulate_stop_signals_only_the_processes_it_started(tmp_path) -> None:
    """A pid in emulate.json that now names another process (the cluster was killed -9, the number
    reused) is left alone: --stop checks each process's start time before signalling its group."""
    import json
    import os
    import subprocess

    from wattsched.harness.testing import BIN, free_port
    from wattsched.noded.procs import alive, start_time

    conf = tmp_path / "emu.conf"
    conf.write_text(f"ClusterName=emu\nSlurmctldPort={free_port()}\nStateSaveLocation={tmp_path}/ctld\n"
                    "NodeName=v1 CPUs=2\nPartitionName=p Nodes=v1 Default=YES\n")
    stranger = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        (tmp_path / "ctld").mkdir()
        (tmp_path / "ctld" / "emulate.json").write_text(json.dumps(
            {"controller": stranger.pid, "agents": [], "bmc": [], "config": str(conf),
             "started": {str(stranger.pid): start_time(stranger.pid) - 1}}))
        down = subprocess.run([str(BIN / "wattsched"), "emulate", "--stop", str(conf)],
                              env=dict(os.environ, WATTSCHED_CONF=str(conf)), capture_output=True, text=True,
                              timeout=60)
        assert down.returncode == 0 and "Traceback" not in down.stderr, down.stderr
        assert alive(stranger.pid) and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_accounting_reaches_the_database_by_itself(cluster: Cluster) -> None:
    """The accounting thread writes ended jobs without anyone asking (sacct flushes, but must not have to)."""
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(job_id, "COMPLETED")
    wait_for(lambda: cluster.api("GET", "/v1/diag").json()["accounting_backlog"] == 0, 30,
             what="the accounting outbox written by the accounting thread")


def test_sacctmgr_lists_the_tres_and_the_wckeys_jobs_used(cluster: Cluster) -> None:
    listed = cluster.run("sacctmgr", "show", "tres").stdout.splitlines()
    assert listed[0].split() == ["Type", "Name", "ID"] and listed[2].split() == ["cpu", "1"]
    assert ["gres", "gpu", "1001"] in [line.split() for line in listed]
    as_json = json.loads(cluster.run("sacctmgr", "--json", "show", "tres").stdout)
    assert {"type": "energy", "name": "", "id": 3, "count": 0} in as_json["TRES"]
    job_id = cluster.sbatch("--wckey=physics-run", "-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(job_id, "COMPLETED")
    wait_for(lambda: "physics-run" in cluster.run("sacctmgr", "-n", "-P", "show", "wckeys").stdout, 30,
             what="the job's wckey in accounting")
    assert cluster.run("sacctmgr", "-n", "-P", "show", "wckeys", "format=WCKey,User").stdout.split() == \
        ["physics-run|root"]
    assert json.loads(cluster.run("sacctmgr", "--json", "show", "wckeys").stdout)["wckeys"][0]["name"] == "physics-run"
    refused = cluster.run("sacctmgr", "-i", "add", "wckey", "x", check=False)
    assert refused.returncode == 1 and "No valid entity in add command" in refused.stderr


def test_scontrol_show_licenses_says_there_are_none(cluster: Cluster) -> None:
    assert cluster.run("scontrol", "show", "licenses").stdout == "No licenses configured in Slurm.\n"
    shown = json.loads(cluster.run("scontrol", "--json", "show", "licenses").stdout)
    assert shown["licenses"] == [] and shown["errors"] == []


def test_strigger_runs_programs_on_node_job_and_config_events(cluster: Cluster, tmp_path) -> None:
    """strigger as Slurm's: each program runs once its event happens, with the nodes or the job as its
    last argument; a PERM trigger waits again and outlives a controller killed -9; --clear removes."""
    out = tmp_path / "fired"
    program = tmp_path / "notify"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {out}\n')
    program.chmod(0o755)

    def fired() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    cluster.run("strigger", "--set", "--node=n02", "--down", "--flags=PERM", f"--program={program} down")
    cluster.run("strigger", "--set", "-D", f"--program={program} drained")
    cluster.run("strigger", "--set", "--reconfig", f"--program={program}")
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
    cluster.run("strigger", "--set", f"--jobid={job_id}", "--fini", f"--program={program} fini")
    listed = cluster.run("strigger", "--get").stdout.splitlines()
    assert listed[0] == "TRIG_ID RES_TYPE   RES_ID TYPE                                OFFSET USER     FLAGS PROGRAM"
    assert re.fullmatch(rf" +1 node +n02 down +0 root +PERM +{program} down", listed[1])
    assert re.fullmatch(rf" +4 job +{job_id} fini +0 root +{program} fini", listed[4])
    assert len(cluster.run("strigger", "--get", "--down", "-N").stdout.splitlines()) == 1
    for args, message in [
        (["--set", "--jobid=99999", "--fini", f"--program={program}"], "slurm_set_trigger: Invalid job id specified"),
        (["--set", "--node=n02", "--down", "--flags=PERM", f"--program={program} down"],
         "slurm_set_trigger: Duplicate event trigger"),
        (["--set", "--down", "--program=notify"], 'The --program value must start with "/"'),
        (["--set", "--down", f"--program={tmp_path}/none"], "Invalid --program value, file not found"),
        (["--set", "--node=n99", "--down", f"--program={program}"], "slurm_set_trigger: Invalid node name specified"),
        (["--set", "--fail", f"--program={program}"], "nodes have no FAIL state here"),
        (["--get", "--clear", "--id=1"], "You must use exactly one of the following options"),
        (["--clear", "--id=77"], "slurm_clear_trigger: No such process"),
    ]:
        refused = cluster.run("strigger", *args, check=False)
        assert refused.returncode != 0 and message in refused.stderr, (args, refused.stderr)
    assert cluster.run("strigger", "--clear", "--id=77", "-Q", check=False).returncode == 0

    cluster.run("scontrol", "update", "nodename=n02", "state=down", "reason=trigger test")
    cluster.run("scontrol", "update", "nodename=n03", "state=drain", "reason=trigger test")
    wait_for(lambda: {f"{program} down n02", f"{program} drained n03"} <= set(fired()), 20,
             what=f"node triggers ({fired()})")
    cluster.run("scancel", str(job_id))
    wait_for(lambda: f"{program} fini {job_id}" in fired(), 20, what="the job's fini trigger")
    cluster.run("scontrol", "reconfigure")
    wait_for(lambda: f"{program} reconfig" in fired(), 20, what="the reconfig trigger")
    cluster.run("scontrol", "update", "nodename=n[02-03]", "state=resume")
    # fired once each: only the PERM one is still there, and it outlives a controller killed -9
    assert [line.split()[0] for line in cluster.run("strigger", "--get", "-N").stdout.splitlines()] == ["1"]
    cluster.kill_controller()
    cluster.start_controller()
    kept = json.loads(cluster.run("strigger", "--get", "--json").stdout)["triggers"]
    assert [(t["trig_id"], t["flags"], t["res_id"]) for t in kept] == [(1, "PERM", "n02")]
    cluster.run("scontrol", "update", "nodename=n02", "state=down", "reason=again")
    wait_for(lambda: fired().count(f"{program} down n02") == 2, 20, what="the PERM trigger again")
    cluster.run("scontrol", "update", "nodename=n02", "state=resume")
    cluster.run("strigger", "--clear", "--id=1")
    assert cluster.run("strigger", "--get").stdout == ""
    cluster.wait_nodes_up()

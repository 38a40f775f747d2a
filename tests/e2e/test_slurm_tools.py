"""What tools written for Slurm ask of its commands, exactly as they ask it (parsl, snakemake's executor,
reportseff, job scripts), and Slurm's answers: sacct's fields and step accounting, squeue's codes, sinfo -s,
scontrol's listpids/steps/hostnames/relative time limits, sbatch --parsable -M, sreport's defaults."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from wattsched.harness.testing import Cluster, wait_for

BURN = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"


def test_parsl_and_snakemake_queries(cluster: Cluster) -> None:
    first = cluster.sbatch("-J", "uuid-1234", "--wrap", "true")
    second = cluster.sbatch("-J", "other", "--wrap", "sleep 30")
    cluster.wait_state(first, "COMPLETED")
    cluster.accounted(first)
    # parsl's SlurmProvider: a unique prefix (--job) of --jobs
    out = cluster.run("sacct", "-X", "--noheader", "--format=jobid,state%20", "--job", f"{first},{second}").stdout
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == [str(first), "COMPLETED"] and rows[1][0] == str(second)
    # snakemake-executor-plugin-slurm: by name, on all clusters, parsable
    out = cluster.run("sacct", "-X", "--parsable2", "--clusters", "all", "--noheader", "--format=JobIdRaw,State",
                      "--starttime", "now-1hour", "--endtime", "now", "--name", "uuid-1234").stdout
    assert out.strip() == f"{first}|COMPLETED"
    assert cluster.run("squeue", "--name", "other", "-h", "-o", "%i %j").stdout.split() == [str(second), "other"]
    assert cluster.run("squeue", "-n", "nope", "-h").stdout == ""
    refused = cluster.run("sacct", "-M", "elsewhere", "-X", check=False)
    assert refused.returncode == 1 and "No cluster 'elsewhere'" in refused.stderr
    cluster.run("scancel", "--name", "other")
    cluster.wait_state(second, "CANCELLED")


def test_reportseff_style_sacct_with_every_field(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-n", "2", "--wrap", f"srun -n 2 sh -c '{BURN}; head -c 3000000 /dev/zero > /dev/null'")
    cluster.wait_state(job_id, "COMPLETED", timeout=60)
    cluster.accounted(job_id)
    fields = cluster.run("sacct", "--helpformat").stdout.split()
    assert {"AdminComment", "ReqTRES", "AllocTRES", "TRESUsageOutAve", "UserCPU", "SystemCPU", "MinCPU",
            "MaxRSSNode", "MaxDiskRead", "QOS", "Reason", "Flags", "Planned", "WCKeyID"} <= set(fields)
    out = cluster.run("sacct", "--parsable", "-n", "--delimiter=^|^", f"--format={','.join(fields)}",
                      f"--jobs={job_id}").stdout
    lines = [line for line in re.split(r"\^\|\^\n", out) if line]
    rows = [dict(zip(fields, line.split("^|^"), strict=True)) for line in lines]
    by_id = {r["JobID"]: r for r in rows}
    assert set(by_id) == {str(job_id), f"{job_id}.batch", f"{job_id}.0"}
    step = by_id[f"{job_id}.0"]
    assert step["State"] == "COMPLETED" and step["NTasks"] == "2"
    assert float(step["TotalCPU"].split(":")[-1]) > 0 or step["TotalCPU"].count(":") > 1
    assert step["MaxRSSNode"].startswith("n") and step["MaxRSS"].endswith(("K", "M"))
    assert step["TRESUsageInTot"].startswith("cpu=") and "fs/disk=" in step["TRESUsageOutTot"]
    job = by_id[str(job_id)]
    assert job["ReqTRES"] == "billing=2,cpu=2,node=1" and job["AllocTRES"].startswith("billing=2,cpu=2")
    assert job["QOS"] == "normal" and job["AdminComment"] == "" and job["Flags"] == "SchedMain"


def test_cancelled_and_timed_out_steps_keep_their_accounting(cluster: Cluster) -> None:
    cancelled = cluster.sbatch("--wrap", "srun sh -c 'while :; do :; done'")
    cluster.wait_state(cancelled, "RUNNING")
    wait_for(lambda: len(cluster.job(cancelled)["steps"]) >= 2, 15, what="step 0 started")
    wait_for(lambda: _cpu_ticks(cluster, f"{cancelled}.0") > 50, 30, what="the step burning CPU")
    cluster.run("scancel", str(cancelled))
    timed = cluster.sbatch("-t", "1", "--wrap", "srun sh -c 'while :; do :; done'")
    rows = {}
    for job_id in (cancelled, timed):
        cluster.wait_state(job_id, {"CANCELLED", "TIMEOUT"}, timeout=150)
        try:
            wait_for(lambda j=job_id: (s := {x["step_id"]: x for x in cluster.accounted(j)[0]["steps"]}).get("0")
                     and s["0"]["total_cpu_s"] > 0 and s, 30, what=f"job {job_id}'s step usage")
        except AssertionError:
            raise AssertionError(f"{cluster.job(job_id)}\n{cluster.accounted(job_id)}") from None
        out = cluster.run("sacct", "-P", "-n", "-j", str(job_id), "-o", "JobID,State,TotalCPU").stdout
        rows[job_id] = {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}
    assert rows[cancelled][str(cancelled)][0].startswith("CANCELLED by ")
    assert rows[cancelled][f"{cancelled}.batch"][0] == "CANCELLED"
    assert rows[cancelled][f"{cancelled}.0"][0] == "CANCELLED" and rows[cancelled][f"{cancelled}.0"][1] != "00:00:00"
    assert rows[timed][str(timed)][0] == "TIMEOUT"
    assert rows[timed][f"{timed}.batch"][0] == "CANCELLED" and rows[timed][f"{timed}.0"][0] == "CANCELLED"


def _cpu_ticks(cluster: Cluster, step: str) -> int:
    """CPU time (clock ticks) of a step's processes on this machine, found with scontrol listpids."""
    listed = cluster.run("scontrol", "listpids", step, check=False).stdout.splitlines()[1:]
    total = 0
    for line in listed:
        try:
            with open(f"/proc/{line.split()[0]}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total


def test_squeue_codes_sinfo_summary_and_scontrol_extras(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--mem=100", "-c", "2", "-t", "10", "-J", "codes", "--wrap", "sleep 60")
    cluster.wait_state(job_id, "RUNNING")
    out = cluster.run("squeue", "-j", str(job_id), "-h", "-o", "%m|%b|%c|%d|%f|%h|%p|%z").stdout.strip()
    assert "%" not in out
    mem, tres, cpus, disk, features, share, prio, sct = out.split("|")
    assert (mem, tres, cpus, disk, features, share, sct) == ("100M", "N/A", "2", "0", "(null)", "OK", "*:*:*")
    assert 0 < float(prio) <= 1
    assert cluster.run("squeue", "-j", str(job_id), "-h", "-O", "JobID:10,MinMemory:8,Name:6").stdout.split() == \
        [str(job_id), "100M", "codes"]
    summary = cluster.run("sinfo", "-s").stdout.splitlines()
    assert summary[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES(A/I/O/T)", "NODELIST"]
    assert re.fullmatch(r"debug\*\s+up\s+infinite\s+\d+/\d+/0/4\s+n\[01-04\]", summary[1].strip())
    pids = cluster.run("scontrol", "listpids", str(job_id)).stdout.splitlines()
    assert pids[0].split() == ["PID", "JOBID", "STEPID", "LOCALID", "GLOBALID"]
    assert any(line.split()[1:3] == [str(job_id), "batch"] for line in pids[1:])
    node = cluster.job(job_id)["node_list"]
    missing = cluster.run("scontrol", "listpids", f"{job_id}.10", node, check=False)
    assert (missing.returncode, missing.stdout.split(), missing.stderr) == (
        1, ["PID", "JOBID", "STEPID", "LOCALID", "GLOBALID"], f"StepId={job_id}.10 does not exist on node {node}.\n")
    steps = cluster.run("scontrol", "show", "steps", str(job_id)).stdout
    assert f"StepId={job_id}.batch" in steps
    assert cluster.run("scontrol", "show", "hostnames", "n[01-03]").stdout.split() == ["n01", "n02", "n03"]
    assert cluster.run("scontrol", "show", "hostlist", "n01,n02,n03").stdout.strip() == "n[01-03]"
    cluster.run("scontrol", "update", f"JobId={job_id}", "TimeLimit=-5")
    assert cluster.job(job_id)["time_limit_min"] == 5
    raised = cluster.run("scontrol", "update", f"JobId={job_id}", "TimeLimit=+10")  # root may raise it
    assert raised.returncode == 0 and cluster.job(job_id)["time_limit_min"] == 15
    cluster.run("scancel", str(job_id))


TASK = """import os, sys, time
rank = int(os.environ["SLURM_PROCID"])
held = bytearray((40 + 60 * rank) << 20)  # rank 1 holds the most
held[::4096] = b"1" * len(held[::4096])
with open(sys.argv[1] + str(rank), "wb") as out:
    out.write(os.urandom(3 << 20)); out.flush(); os.fsync(out.fileno())
open(sys.argv[1] + str(rank) + ".ready", "w").close()
time.sleep(300)
"""


def test_sstat_reads_each_running_task(cluster: Cluster) -> None:
    """sstat as Slurm's: -j JOB is the job's first srun step, -a every step (the batch script's too),
    JOB.STEP that one; each task's figures as its node reads them now (memory resident and virtual,
    disk written, pids), the largest with its node and task; -i the pids; -e Slurm's 51 fields."""
    script = cluster.work / "sstat_task.py"
    script.write_text(TASK)
    out = cluster.work / "sstat_out"
    job_id = cluster.sbatch("-N2", "-n2", "-o", "/dev/null", "--wrap", f"srun {sys.executable} {script} {out}")
    wait_for(lambda: all(Path(f"{out}{rank}.ready").exists() for rank in (0, 1)), 30, what="tasks ready")
    fields = "JobID,NTasks,Nodelist,MaxRSS,MaxRSSTask,MaxVMSizeTask,AveVMSize,MaxDiskWrite"
    first = cluster.run("sstat", "-j", str(job_id), "-P", "-n", "--noconvert", "-o", fields).stdout.strip().split("|")
    step, ntasks, nodes, max_rss, rss_task, vsize_task, ave_vsize, disk_write = first
    assert (step, ntasks, nodes, rss_task, vsize_task) == (f"{job_id}.0", "2", "n[01-02]", "1", "1")
    assert int(max_rss.rstrip("K")) >= 100 << 10 and int(ave_vsize.rstrip("K")) > int(max_rss.rstrip("K")) // 2
    assert int(disk_write) >= 3 << 20
    every = cluster.run("sstat", "-a", "-j", str(job_id), "-P", "-n", "-o", "JobID,NTasks").stdout.split()
    assert every == [f"{job_id}.batch|1", f"{job_id}.0|2"]
    pids = cluster.run("sstat", "-i", "-j", f"{job_id}.0", "-P", "-n").stdout.strip().split("|")
    assert pids[0] == f"{job_id}.0" and all(Path(f"/proc/{pid}").exists() for pid in pids[2].split(","))
    missing = cluster.run("sstat", "-j", f"{job_id}.7", "-n")
    assert missing.stdout == "" and missing.stderr == f"sstat: error: StepId={job_id}.7 not found running.\n"
    listed = cluster.run("sstat", "-e").stdout
    assert re.fullmatch(r"(?:\w+\s+){51}", listed) and "MaxVMSizeTask" in listed
    other = cluster.run("sstat", "-j", str(job_id), env=cluster.user_env(), check=False)
    assert other.returncode == 1 and "Access/permission denied" in other.stderr
    cluster.run("scancel", str(job_id))


def test_sbatch_parsable_with_cluster_and_sreport_defaults(cluster: Cluster) -> None:
    out = cluster.run("sbatch", "--parsable", "-M", cluster.name, "--wrap", "true", check=False)
    job_id, _, name = out.stdout.strip().partition(";")
    assert out.returncode == 0 and job_id.isdigit() and name == cluster.name
    cluster.wait_state(int(job_id), "COMPLETED")
    report = cluster.run("sreport", "user", "TopUsage", "start=today", "-P", "-n")
    assert report.returncode == 0 and report.stdout.startswith(f"{cluster.name}|")
    yesterday = cluster.run("sreport", "cluster", "AccountUtilizationByUser", "-n", "-P")
    assert yesterday.returncode == 0


def test_sbatch_test_only_plans_without_submitting(cluster: Cluster) -> None:
    before = len(cluster.jobs())
    now_run = cluster.run("sbatch", "--test-only", "-N", "2", "--wrap", "true")
    assert re.search(r"^sbatch: Job \d+ to start at \S+ using 2 processors on nodes n\S+ in partition debug$",
                     now_run.stderr.strip()), now_run.stderr
    assert len(cluster.jobs()) == before and now_run.stdout == ""
    for prog, command in (("srun", ["hostname"]), ("salloc", [])):  # the same plan for a new allocation
        planned = cluster.run(prog, "--test-only", "-N", "3", *command)
        assert re.search(rf"^{prog}: Job \d+ to start at \S+ using 3 processors on nodes n\S+ in partition debug$",
                         planned.stderr.strip()), planned.stderr
        assert planned.stdout == ""
    assert len(cluster.jobs()) == before
    busy = cluster.sbatch("-N", "4", "--exclusive", "-t", "10", "--wrap", "sleep 300")
    cluster.wait_state(busy, "RUNNING")
    later = cluster.run("sbatch", "--test-only", "-N", "1", "-t", "5", "--wrap", "true").stderr.strip()
    start = re.search(r"to start at (\S+) using 1 processors in partition debug", later)
    assert start, later
    ends = cluster.job(busy)["start_time"] + 600
    from wattsched import timefmt

    assert abs(timefmt.parse_time(start.group(1), ends) - ends) <= 120  # when the exclusive job's limit ends
    bad = cluster.run("sbatch", "--test-only", "-N", "9", "--wrap", "true", check=False)
    assert bad.returncode == 1 and "error" in bad.stderr
    cluster.run("scancel", str(busy))
    assert len(cluster.jobs()) == before + 1


def test_the_listing_commands_import_nothing_heavy_on_a_whole_call(cluster: Cluster) -> None:
    """squeue, sinfo, scontrol show, sbatch and scancel, as root (who signs with the key) and as a user
    (with a token), each a whole call answered by the controller: none imports a module the commands
    were freed from (tests/cli/test_lean.py), as ``-X importtime`` lists what a process imports."""
    from tests.cli.test_lean import HEAVY

    job = cluster.sbatch("-H", "--wrap", "true")
    calls = [("squeue",), ("squeue", "-j", str(job)), ("sinfo",), ("scontrol", "show", "job", str(job)),
             ("sbatch", "-H", "--wrap", "true"), ("scancel", str(job))]
    for env in (cluster.env, cluster.user_env(0, "root")):
        for call in calls:
            done = cluster.run(*call, env=dict(env, PYTHONPROFILEIMPORTTIME="1"))
            loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
                      if line.startswith("import time:") and "|" in line}
            assert "wattsched.cli.common" in loaded and not loaded & HEAVY, (call, sorted(loaded & HEAVY))

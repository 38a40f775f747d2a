"""Jobs on a real cluster, through the real CLI: the walk-through a new user would do."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import httpx

from wattsched.cli.jobfields import FIELDS
from wattsched.harness.testing import Cluster, wait_for

TIMED: dict[str, int] = {}


def test_submit_job_that_will_time_out(cluster: Cluster) -> None:
    """Limits are whole minutes, as in Slurm: submitted first, checked by the module's last test."""
    TIMED["job"] = cluster.sbatch("-t", "0:02", "-o", "timed-%j.out", "--wrap", "echo start; sleep 300")
    assert cluster.job(TIMED["job"])["time_limit_min"] == 1


def test_wrap_job_runs_and_is_accounted(cluster: Cluster) -> None:
    out = cluster.run("sbatch", "--wrap", "hostname; echo node=$SLURMD_NODENAME; sleep 2").stdout
    assert out.startswith("Submitted batch job ")
    job_id = int(out.split()[-1])
    cluster.wait_state(job_id, "RUNNING")
    queue = cluster.run("squeue").stdout.splitlines()
    assert queue[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    line = next(line for line in queue if line.split()[0] == str(job_id))
    assert line.split()[4] == "R" and line.split()[2] == "wrap"
    rows = cluster.accounted(job_id)
    sacct = cluster.run("sacct", "-j", str(job_id)).stdout.splitlines()
    assert sacct[0].split() == ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"]
    assert sacct[2].split()[0] == str(job_id) and "COMPLETED" in sacct[2] and sacct[2].split()[-1] == "0:0"
    assert sacct[3].split()[0] == f"{job_id}.batch" and "COMPLETED" in sacct[3]
    assert rows[0]["state"] == "COMPLETED"
    output = (cluster.work / f"slurm-{job_id}.out").read_text()
    assert f"node={rows[0]['node_list']}" in output


def test_multi_node_step_environment(cluster: Cluster) -> None:
    script = cluster.work / "env.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 4\n#SBATCH -n 8\n#SBATCH -o env-%j.out\n"
                      "srun env | grep -E '^SLURM_(PROCID|NODEID|JOB_NODELIST|STEP_ID)=' | sort\n")
    job_id = cluster.sbatch(str(script))
    cluster.wait_state(job_id, "COMPLETED")
    lines = (cluster.work / f"env-{job_id}.out").read_text().splitlines()
    procids = sorted(int(line.split("=")[1]) for line in lines if line.startswith("SLURM_PROCID="))
    nodeids = {int(line.split("=")[1]) for line in lines if line.startswith("SLURM_NODEID=")}
    nodelists = {line.split("=")[1] for line in lines if line.startswith("SLURM_JOB_NODELIST=")}
    assert procids == list(range(8))
    assert nodeids == {0, 1, 2, 3}
    assert nodelists == {"n[01-04]"}
    steps = {s["step_id"]: s for s in cluster.accounted(job_id)[0]["steps"]}
    assert steps["0"]["ntasks"] == 8 and steps["0"]["state"] == "COMPLETED"


def test_a_tasks_environment_names_its_pid_its_node_and_where_srun_runs(cluster: Cluster) -> None:
    """SLURM_TASK_PID is the task's own pid (the batch script's too), SLURM_TOPOLOGY_ADDR its node
    (pattern "node", Slurm's without a topology plugin), SLURM_LAUNCH_NODE_IPADDR and
    SLURM_SRUN_COMM_HOST srun's host address."""
    show = 'echo "$$ $SLURM_TASK_PID $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN $SLURM_LAUNCH_NODE_IPADDR"'
    line = cluster.run("srun", "-w", "n02", "sh", "-c", show).stdout.split()
    assert line[0] == line[1] and line[2:] == ["n02", "node", "127.0.0.1"], line
    job_id = cluster.sbatch("-o", "task-pid-%j.out", "--wrap", 'echo "$$ $SLURM_TASK_PID"')
    cluster.wait_state(job_id, "COMPLETED")
    pid, task_pid = (cluster.work / f"task-pid-{job_id}.out").read_text().split()
    assert pid == task_pid


def test_array_throttle_never_exceeded(cluster: Cluster) -> None:
    log = cluster.work / "array-times"
    log.mkdir()
    job_id = cluster.sbatch("--array=0-5%2", "-o", "/dev/null", "--wrap",
                            f"echo $(date +%s.%N) > {log}/$SLURM_ARRAY_TASK_ID.start; sleep 1; "
                            f"echo $(date +%s.%N) > {log}/$SLURM_ARRAY_TASK_ID.end")
    squeue = cluster.run("squeue", "-j", str(job_id)).stdout
    assert f"{job_id}_[" in squeue or "JobArrayTaskLimit" in squeue or f"{job_id}_" in squeue
    wait_for(lambda: len(list(log.glob("*.end"))) == 6, 60, what="all array tasks")
    spans = [(float((log / f"{i}.start").read_text()), float((log / f"{i}.end").read_text())) for i in range(6)]
    for start, _end in spans:
        running = sum(1 for s, e in spans if s <= start < e)
        assert running <= 2, spans
    ids = {r["array_task_id"] for r in cluster.accounted(*range(job_id, job_id + 6))}
    assert ids == set(range(6))


def test_afterok_dependency_holds_and_releases(cluster: Cluster) -> None:
    first = cluster.sbatch("--wrap", "sleep 2")
    second = cluster.sbatch(f"--dependency=afterok:{first}", "--wrap", "true")
    failing = cluster.sbatch("--wrap", "exit 3")
    never = cluster.sbatch(f"--dependency=afterok:{failing}", "--wrap", "true")
    assert cluster.wait_state(second, "PENDING")["reason"] in ("Dependency", "None")
    wait_for(lambda: cluster.job(second)["reason"] == "Dependency", 5, what="Dependency reason")
    cluster.wait_state(first, "COMPLETED")
    cluster.wait_state(second, {"RUNNING", "COMPLETED"})
    cluster.wait_state(failing, "FAILED")
    assert cluster.job(failing)["exit_code"] == 3
    wait_for(lambda: cluster.job(never)["reason"] == "DependencyNeverSatisfied", 10, what="never satisfied")
    squeue = cluster.run("squeue", "-j", str(never)).stdout
    assert "(DependencyNeverSatisfied)" in squeue
    cluster.run("scancel", str(never))


def test_cancel_running_and_pending(cluster: Cluster) -> None:
    cancelled = cluster.sbatch("--wrap", "sleep 60")
    held = cluster.sbatch("-H", "--wrap", "sleep 60")
    cluster.wait_state(cancelled, "RUNNING")
    cluster.run("scancel", str(cancelled), str(held))
    assert cluster.wait_state(cancelled, "CANCELLED")["term_signal"] in (0, 15)
    cluster.wait_state(held, "CANCELLED")
    rows = {r["job_id"]: r for r in cluster.accounted(cancelled, held)}
    assert rows[cancelled]["state"] == "CANCELLED" and rows[held]["state"] == "CANCELLED"
    sacct = cluster.run("sacct", "-j", str(cancelled), "-P", "-o", "JobID,State").stdout
    assert f"{cancelled}|CANCELLED by 0" in sacct


def test_scancel_of_one_step_leaves_the_job_and_its_other_steps(cluster: Cluster) -> None:
    log = cluster.work / "one-step-cancelled.out"
    started = cluster.work / "usr1-trap-ready"
    script = cluster.work / "two-steps.sh"
    script.write_text("#!/bin/bash\n"  # step 0 traps USR1; step 1, on both nodes, sleeps
                      f"srun -n1 bash -c 'trap \"echo step 0 got USR1\" USR1; touch {started}; "
                      "for i in $(seq 600); do sleep 0.2; done' & first=$!\n"
                      f"while [ ! -e {started} ]; do sleep 0.1; done\n"
                      "srun -N2 -n2 sleep 600 & second=$!\n"
                      "wait $second; echo step 1 ended $?\nwait $first\n")
    job_id = cluster.sbatch("-N2", "-n4", "-o", str(log), str(script))
    wait_for(lambda: len([s for s in cluster.job(job_id)["steps"] if s["step_id"] in ("0", "1")]) == 2, 30,
             what="both steps running")
    bad = cluster.run("scancel", f"{job_id}.7", check=False)
    assert (bad.returncode, bad.stderr) == (1, f"scancel: error: Kill job error on job id {job_id}.7: "
                                               "Invalid job id specified\n")
    told = cluster.run("scancel", "-v", "--signal=USR1", f"{job_id}.0")
    assert told.stderr == f"scancel: Signal 10 to step {job_id}.0\n"  # Slurm's -v words
    wait_for(lambda: "step 0 got USR1" in log.read_text(), 30, what="step 0 signalled")
    assert cluster.run("scancel", "--verbose", f"{job_id}.1").stderr == f"scancel: Terminating step {job_id}.1\n"
    wait_for(lambda: "step 1 ended" in log.read_text(), 30, what="step 1 cancelled")
    assert cluster.job(job_id)["state"] == "RUNNING"  # the job and step 0 go on
    text = log.read_text()
    assert f"slurmstepd: error: *** STEP {job_id}.1 ON n01 CANCELLED AT " in text
    assert text.count("CANCELLED AT") == 1 and "USR1" not in text.replace("step 0 got USR1", "")
    wait_for(lambda: {s["step_id"]: s["state"] for s in cluster.job(job_id)["steps"]}.get("1") == "CANCELLED", 30,
             what="step 1 recorded CANCELLED")
    assert {s["step_id"]: s["state"] for s in cluster.job(job_id)["steps"]}["0"] == "RUNNING"
    late = cluster.run("scancel", f"{job_id}.1", check=False)
    assert late.stderr == (f"scancel: error: Kill job error on job id {job_id}.1: "
                           "Job/step already completing or completed\n")
    assert cluster.run("scancel", "-v", str(job_id)).stderr == f"scancel: Terminating job {job_id}\n"
    cluster.wait_state(job_id, "CANCELLED")
    rows = cluster.run("sacct", "-j", f"{job_id}.1", "-P", "-n", "-o", "JobID,State").stdout.splitlines()
    assert rows == [f"{job_id}.1|CANCELLED"]  # the step alone, as Slurm's sacct shows JOB.STEP


def test_srun_wait_ends_the_step_a_while_after_its_first_task(cluster: Cluster) -> None:
    task = 'if [ "$SLURM_PROCID" = 0 ]; then exit 0; fi; sleep 600'
    for how in (["-W", "1"], ["--wait=1"]):
        done = cluster.run("srun", "-n3", *how, "sh", "-c", task, check=False, timeout=60)
        found = re.search(r"Terminating StepId=(\d+\.0)", done.stderr)
        assert found, done.stderr
        step = found.group(1)
        lines = done.stderr.splitlines()
        assert lines[:4] == ["srun: First task exited 1s ago", f"srun: StepId={step} tasks 1-2: running",
                             f"srun: StepId={step} task 0: exited", f"srun: Terminating StepId={step}"], lines
        # killed at once, as Slurm's srun ends the step; a node's tasks that ended alike on one line
        assert lines[5:] == ["srun: error: n01: tasks 1-2: Killed"], lines
        assert done.returncode == 128 + 9
    env = dict(cluster.env, SLURM_WAIT="1")
    assert "First task exited 1s ago" in cluster.run("srun", "-n2", "sh", "-c", task, env=env, check=False).stderr


def test_srun_reads_its_input_environment_variables(cluster: Cluster) -> None:
    """Outside an allocation srun takes SLURM_NPROCS, SLURM_ACCOUNT, SLURM_JOB_NAME, SLURM_LABELIO and
    SLURM_STDOUTMODE as its options, the command line winning; inside one, the job's own variables
    (SLURM_NTASKS...) do not resize its steps."""
    out = cluster.work / "env-vars.out"
    env = dict(cluster.env, SLURM_NPROCS="3", SLURM_ACCOUNT="physics", SLURM_JOB_NAME="from-env",
               SLURM_STDOUTMODE=str(out))
    cluster.run("srun", "sh", "-c", "echo $SLURM_JOB_ACCOUNT $SLURM_JOB_NAME", env=env)
    assert out.read_text().splitlines() == ["physics from-env"] * 3
    env = dict(cluster.env, SLURM_NPROCS="3", SLURM_JOB_NAME="from-env", SLURM_LABELIO="1")
    shown = cluster.run("srun", "-n1", "-J", "given", "sh", "-c", "echo $SLURM_JOB_NAME", env=env).stdout
    assert shown == "0: given\n"
    bad = cluster.run("srun", "true", env=dict(cluster.env, SLURM_NPROCS="many"), check=False)
    assert bad.returncode == 1 and 'Invalid numeric value "many" for --ntasks.' in bad.stderr
    inside = cluster.run("salloc", "-n2", "sh", "-c", "SLURM_NTASKS=2 srun -n1 hostname | wc -l").stdout
    assert inside.split()[-1] == "1"


def test_a_job_sent_sigstop_is_stopped_until_sigcont(cluster: Cluster) -> None:
    """Slurm's STOPPED: scancel -s STOP freezes the job's processes and squeue shows it STOPPED (ST),
    in its default listing; -s CONT makes it RUNNING again."""
    ticks = cluster.work / "stop-ticks"
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", f"exec sh -c 'while :; do echo x >> {ticks}; sleep 0.1; done'")
    wait_for(lambda: ticks.exists(), 30, what="the job ticking")
    cluster.run("scancel", "--full", "-s", "STOP", str(job_id))  # the batch shell too: else only the steps
    cluster.wait_state(job_id, "STOPPED")
    assert cluster.run("squeue", "-h", "-o", "%i %t %T").stdout.split("\n").count(f"{job_id} ST STOPPED") == 1
    wait_for(lambda: _states_of(str(ticks)) == {"T"}, 30, what="the job's shell stopped (T)")
    size = ticks.stat().st_size
    cluster.run("scancel", "--full", "-s", "CONT", str(job_id))
    cluster.wait_state(job_id, "RUNNING")
    wait_for(lambda: ticks.stat().st_size > size, 30, what="the job ticking again")
    cluster.run("scancel", str(job_id))
    cluster.wait_state(job_id, "CANCELLED")


def test_scancel_signal_reaches_the_steps_or_the_batch_shell_as_slurms(cluster: Cluster) -> None:
    """scancel --signal sends to the job's steps alone, -b to the batch shell alone (-f to both: see
    the SIGSTOP test), as Slurm's scancel (its KILL_STEPS_ONLY default)."""
    trap = "trap 'echo {who} got USR1' USR1; touch {who}.$SLURM_JOB_ID; while :; do sleep 0.1; done"
    script = f"srun sh -c \"{trap.format(who='task')}\" & {trap.format(who='batch')}"
    job_id = cluster.sbatch("-o", "sig-%j.out", "--wrap", script)
    for who in ("task", "batch"):
        wait_for(lambda w=who: (cluster.work / f"{w}.{job_id}").exists(), 30, what=f"the {who} trapping")
    out = cluster.work / f"sig-{job_id}.out"

    def got() -> list[str]:
        return sorted(line for line in out.read_text().splitlines() if line.endswith("got USR1"))

    cluster.run("scancel", "--signal=USR1", str(job_id))
    wait_for(lambda: got() == ["task got USR1"], 30, what="the step's task alone signalled")
    cluster.run("scancel", "--signal=USR1", "--batch", str(job_id))
    wait_for(lambda: got() == ["batch got USR1", "task got USR1"], 30, what="the batch shell signalled")
    cluster.run("scancel", str(job_id))


def _states_of(text: str) -> set[str]:
    """The process states (/proc/PID/stat) of the processes whose command line holds ``text``."""
    from pathlib import Path

    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.add((entry / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue
    return found


def test_signal_before_time_limit(cluster: Cluster) -> None:
    script = cluster.work / "sig.sh"
    script.write_text("#!/bin/bash\ntrap 'echo got USR1; exit 0' USR1\nfor i in $(seq 120); do sleep 0.5; done\n")
    job_id = cluster.sbatch("-t", "1", "--signal=B:USR1@55", "-o", "sig-%j.out", str(script))
    cluster.wait_state(job_id, "COMPLETED", timeout=40)
    assert "got USR1" in (cluster.work / f"sig-{job_id}.out").read_text()


def test_srun_outside_allocation_and_exit_codes(cluster: Cluster) -> None:
    result = cluster.run("srun", "-N", "2", "-n", "3", "-l", "sh", "-c", "echo task $SLURM_PROCID", check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["0: task 0", "1: task 1", "2: task 2"]
    failed = cluster.run("srun", "-n", "1", "sh", "-c", "exit 7", check=False)
    assert failed.returncode == 7
    assert "Exited with exit code 7" in failed.stderr
    # a task a signal ended: strsignal's word, 128 + the signal; nothing more (a SIGKILL too)
    for sig, word in ((9, "Killed"), (15, "Terminated")):
        killed = cluster.run("srun", "-n", "1", "sh", "-c", f"kill -{sig} $$", check=False)
        assert (killed.returncode, killed.stderr) == (128 + sig, f"srun: error: n01: task 0: {word}\n")


def test_srun_verbose_says_its_options_allocation_and_launches_as_slurms(cluster: Cluster) -> None:
    """srun -v: the options set (Slurm's order, ``verbose : N``), the allocation's nodes and CPU
    counts (the job id where tools read it), and a launching line per node."""
    done = cluster.run("srun", "-vv", "-N2", "-n3", "-l", "true")
    lines = done.stderr.splitlines()
    job_id = int(re.search(r"jobid (\d+): ", done.stderr).group(1))  # type: ignore[union-attr]
    assert lines[:7] == ["srun: defined options", "srun: -------------------- --------------------",
                         "srun: label               : set", "srun: nodes               : 2",
                         "srun: ntasks              : 3", "srun: verbose             : 2",
                         "srun: -------------------- --------------------"], lines
    assert lines[7:] == ["srun: end of defined options",
                         f"srun: jobid {job_id}: nodes(2):`n[01-02]', cpu counts: 2(x1),1(x1)",
                         f"srun: launching StepId={job_id}.0 on host n01, 2 tasks: 0-1",
                         f"srun: launching StepId={job_id}.0 on host n02, 1 tasks: 2"], lines
    batch = cluster.run("sbatch", "-v", "-J", "talk", "--wrap", "true")
    assert batch.stderr.splitlines()[2:4] == ["sbatch: job-name            : talk",
                                              "sbatch: verbose             : 1"], batch.stderr


def test_srun_task_prolog_and_epilog_run_around_each_task(cluster: Cluster) -> None:
    """srun --task-prolog (its export, unset and print lines, as TaskProlog's) and --task-epilog,
    each run once per task, with the task's environment (the epilog's context epilog_task)."""
    prolog, epilog = cluster.work / "user-prolog.sh", cluster.work / "user-epilog.sh"
    ran = cluster.work / "user-epilog.ran"
    prolog.write_text("#!/bin/sh\necho print HEADER\necho export MINE=from_prolog\necho unset DROP\n")
    epilog.write_text(f"#!/bin/sh\necho \"$SLURM_PROCID $SLURM_SCRIPT_CONTEXT $MINE\" >> {ran}\n")
    for script in (prolog, epilog):
        script.chmod(0o755)
    done = cluster.run("srun", "-n3", "--task-prolog=user-prolog.sh", f"--task-epilog={epilog}", "sh", "-c",
                       'echo "MINE=$MINE DROP=${DROP:-gone}"', env=dict(cluster.env, DROP="here"))
    assert sorted(done.stdout.splitlines()) == ["HEADER"] * 3 + ["MINE=from_prolog DROP=gone"] * 3
    wait_for(lambda: ran.exists() and len(ran.read_text().splitlines()) == 3, 30, what="three epilogs")
    assert sorted(ran.read_text().splitlines()) == [f"{t} epilog_task from_prolog" for t in range(3)]
    # what a prolog or an epilog leaves in the background is killed with it, as Slurm's slurmstepd
    # does: it neither holds the step open nor outlives it
    sleeper = cluster.work / f"background-sleep-{os.getpid()}"
    sleeper.symlink_to(shutil.which("sleep") or "/bin/sleep")
    marker = str(sleeper)
    for script in (prolog, epilog):
        script.write_text(f"#!/bin/sh\n{sleeper} 300 &\nexit 0\n")
    done = cluster.run("srun", "-n2", "--task-prolog=user-prolog.sh", f"--task-epilog={epilog}", "echo", "ran",
                       timeout=30)
    assert done.stdout.split() == ["ran", "ran"]
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1


def test_a_steps_counts_are_its_own_unless_preserve_env(cluster: Cluster) -> None:
    """A step sees its own SLURM_NNODES and SLURM_NTASKS; with srun -E, the allocation's, as Slurm's."""
    script = ("srun -n1 -N1 printenv SLURM_NNODES SLURM_NTASKS; "
              "srun -E -n1 -N1 printenv SLURM_NNODES SLURM_NTASKS")
    job_id = cluster.sbatch("-N3", "-n6", "-o", "counts-%j.out", "--wrap", script)
    cluster.wait_state(job_id, "COMPLETED")
    assert (cluster.work / f"counts-{job_id}.out").read_text().split() == ["1", "1", "3", "6"]


def test_a_node_range_takes_as_many_nodes_as_are_free(cluster: Cluster) -> None:
    """-N MIN-MAX: as many nodes as possible within the range without waiting (a task on each where
    -n is not given, no more nodes than tasks where it is); -N-2: at most two."""
    hosts = cluster.run("srun", "-N1-64", "printenv", "SLURMD_NODENAME").stdout.split()
    assert sorted(hosts) == ["n01", "n02", "n03", "n04"]
    assert sorted(cluster.run("srun", "-N-2", "-l", "hostname").stdout.split()) == ["0:", "1:", "n01", "n02"]
    job_id = cluster.sbatch("-N2-4", "-n3", "-o", "/dev/null", "--wrap",
                            "srun -N1-9 printenv SLURMD_NODENAME > range-$SLURM_JOB_ID.out")
    job = cluster.wait_state(job_id, "COMPLETED")
    assert job["num_nodes"] == 3
    assert sorted((cluster.work / f"range-{job_id}.out").read_text().split()) == ["n01", "n02", "n03"]


def test_mincpus_and_tmp_ask_nodes_for_cpus_and_temporary_disk(cluster: Cluster) -> None:
    """--mincpus: a node gives the job that many CPUs at least; --tmp: only a node with that much
    TmpDisk (none here, TmpDisk=0) will do, else the request is refused, as Slurm's."""
    for option in ("--mincpus=999999", "--tmp=999999"):
        refused = cluster.run("srun", option, "true", check=False)
        assert refused.returncode == 1 and "Requested node configuration is not available" in refused.stderr
    job_id = cluster.sbatch("--mincpus=3", "--tmp=0", "-n1", "-o", "/dev/null", "--wrap", "true")
    job = cluster.wait_state(job_id, "COMPLETED")
    assert job["num_cpus"] == 3 and job["min_cpus_per_node"] == 3
    shown = cluster.run("scontrol", "show", "job", str(job_id)).stdout
    assert "MinCPUsNode=3 " in shown and "MinTmpDiskNode=0" in shown
    assert cluster.run("srun", "--mincpus=1", "true").returncode == 0


def test_the_submitting_shells_limits_go_with_its_jobs_and_steps(cluster: Cluster) -> None:
    """PropagateResourceLimits=ALL (Slurm's default): the soft limits srun and sbatch ran under are
    the tasks' and the script's (never above the node's hard limits)."""
    import subprocess

    from wattsched.harness.testing import BIN

    def under_limits(command: str) -> str:
        shell = f"ulimit -S -n 300; ulimit -S -c 0; ulimit -S -s 4096; exec {BIN}/{command}"
        return subprocess.run(["sh", "-c", shell], env=cluster.env, cwd=cluster.work, capture_output=True,
                              text=True, timeout=60, check=True).stdout
    assert under_limits("srun -n2 sh -c 'echo $(ulimit -n) $(ulimit -c) $(ulimit -s)'").split("\n")[:2] == \
        ["300 0 4096"] * 2
    job_id = int(under_limits("sbatch --parsable -o limits-%j.out --wrap 'echo $(ulimit -n) $(ulimit -s)'"))
    cluster.wait_state(job_id, "COMPLETED")
    assert (cluster.work / f"limits-{job_id}.out").read_text() == "300 4096\n"


def test_output_patterns_and_open_mode(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-J", "pat", "-o", "out-%x-%j-%u.txt", "-e", "err-%j.txt", "--wrap",
                            "echo to-out; echo to-err >&2")
    cluster.wait_state(job_id, "COMPLETED")
    assert (cluster.work / f"out-pat-{job_id}-root.txt").read_text() == "to-out\n"
    assert (cluster.work / f"err-{job_id}.txt").read_text() == "to-err\n"
    for _ in range(2):
        appended = cluster.sbatch("-o", "append.txt", "--open-mode=append", "--wrap", "echo line")
        cluster.wait_state(appended, "COMPLETED")
    assert (cluster.work / "append.txt").read_text() == "line\nline\n"


def test_input_environment_variables_sit_between_directives_and_the_command_line(cluster: Cluster) -> None:
    """Slurm's order: #SBATCH lines, then SBATCH_* variables, then the command line; salloc's
    SALLOC_* under its command line; a bad value is refused as the option's would be."""
    script = cluster.work / "envvars.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J from-script -t 10 --wckey=fromscript\necho ran\n")
    env = dict(cluster.env, SBATCH_JOB_NAME="from-env", SBATCH_TIMELIMIT="20", SBATCH_OUTPUT="envvar-%x.out",
               SBATCH_WCKEY="fromenv")
    job_id = int(cluster.run("sbatch", "--parsable", "-t", "30", str(script), env=env).stdout)
    job = cluster.wait_state(job_id, "COMPLETED")
    assert (job["name"], job["time_limit_min"], job["wckey"]) == ("from-env", 30, "fromenv")
    assert (cluster.work / "envvar-from-env.out").read_text() == "ran\n"
    bad = cluster.run("sbatch", "--wrap", "true", env=dict(cluster.env, SBATCH_TIMELIMIT="soon"), check=False)
    given = cluster.run("sbatch", "-t", "soon", "--wrap", "true", check=False)
    assert bad.returncode == given.returncode == 1 and bad.stderr == given.stderr, given.stderr
    refused = cluster.run("salloc", "true", check=False, env=dict(cluster.env, SALLOC_PARTITION="nosuch"))
    assert (refused.returncode, refused.stderr) == (1, "salloc: error: Unable to allocate resources: Invalid partition "
                                                       "name specified\n")
    chosen = cluster.run("salloc", "-p", "debug", "true", env=dict(cluster.env, SALLOC_PARTITION="nosuch"))
    assert chosen.returncode == 0


def test_hold_release_and_update(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-H", "--wrap", "true")
    assert cluster.wait_state(job_id, "PENDING")["reason"] == "JobHeldUser"
    cluster.run("scontrol", "update", f"jobid={job_id}", "TimeLimit=5")
    assert cluster.job(job_id)["time_limit_min"] == 5
    show = cluster.run("scontrol", "show", "job", str(job_id)).stdout
    assert f"JobId={job_id} JobName=wrap" in show and "JobState=PENDING Reason=JobHeldUser" in show
    cluster.run("scontrol", "release", str(job_id))
    cluster.wait_state(job_id, "COMPLETED")


def test_squeue_formats(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-J", "fmt", "-t", "10", "--wrap", "sleep 5")
    cluster.wait_state(job_id, "RUNNING")
    line = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%i|%j|%T|%l|%D|%P").stdout.strip()
    assert line == f"{job_id}|fmt|RUNNING|10:00|1|debug"
    fields = cluster.run("squeue", "-j", str(job_id), "-O", "JobID:10,Name:8,State:.10").stdout.splitlines()
    assert fields[0] == "JOBID     NAME         STATE"
    data = cluster.run("squeue", "--json", "-j", str(job_id)).stdout
    assert f'"job_id": {job_id}' in data
    # squeue asks for the keys its format reads: every code at once, then the listing's key filter
    every = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "|".join(f"%{code}" for code in FIELDS))
    assert every.returncode == 0 and every.stdout.strip().count("|") == len(FIELDS) - 1, every.stderr
    reply = httpx.get(f"http://127.0.0.1:{cluster.port}/v1/jobs", timeout=30,
                      params={"job": job_id, "columns": "true", "key": ["state", "job_id", "no_such_key"]},
                      headers={"Authorization": f"Bearer {cluster.token()}"}).json()
    assert reply["columns"] == ["job_id", "state"] and reply["rows"] == [[job_id, "RUNNING"]]
    cluster.run("scancel", str(job_id))


def test_squeue_steps_lists_the_running_steps_as_slurms(cluster: Cluster) -> None:
    go = cluster.work / "steps-go"
    job_id = cluster.sbatch("-J", "stp", "-N2", "-t", "10", "--wrap",
                            f"srun -N2 -J inner sh -c 'while [ ! -e {go} ]; do sleep 0.1; done'")
    wait_for(lambda: len(cluster.run("squeue", "-h", "-s", str(job_id), "-o", "%i").stdout.split()) == 2, 30,
             what="the batch step and step 0 running")
    listing = cluster.run("squeue", "-s", str(job_id)).stdout.splitlines()
    assert listing[0] == "         STEPID     NAME PARTITION     USER      TIME NODELIST"
    assert [line.split()[:4] for line in listing[1:]] == [[f"{job_id}.0", "inner", "debug", "root"],
                                                          [f"{job_id}.batch", "batch", "debug", "root"]]
    assert listing[1].endswith(" n[01-02]") and listing[2].endswith(" n01")
    assert cluster.run("squeue", "-h", "--steps", f"{job_id}.0", "-O", "StepId:12,NumTasks:.6,stepstate").stdout \
        == f"{job_id}.0".ljust(12) + "     2" + "RUNNING".ljust(20) + "\n"
    both = cluster.run("squeue", "-s", "-j", str(job_id), check=False)
    assert (both.returncode, both.stderr) == (1, "squeue: error: Incompatible options --jobs and --steps\n")
    go.touch()
    cluster.wait_state(job_id, "COMPLETED")


def test_sinfo_views(cluster: Cluster) -> None:
    out = cluster.run("sinfo").stdout.splitlines()
    assert out[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert any(line.startswith("debug*") and "infinite" in line for line in out[1:])
    nodes = cluster.run("sinfo", "-N", "-h", "-o", "%N %t").stdout.split("\n")
    assert len([n for n in nodes if n]) == 4
    assert "NODELIST" in cluster.run("sinfo", "-N", "-l").stdout


def test_sacct_formats(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-J", "acct", "--wrap", "exit 2")
    cluster.accounted(job_id)
    parsable = cluster.run("sacct", "-j", str(job_id), "-p", "-o", "JobID,JobName,State,ExitCode").stdout
    lines = parsable.splitlines()
    assert lines[0] == "JobID|JobName|State|ExitCode|"
    assert lines[1] == f"{job_id}|acct|FAILED|2:0|"
    two = cluster.run("sacct", "-j", str(job_id), "-P", "-X", "-n", "-o", "JobIDRaw,NNodes,ElapsedRaw").stdout
    assert two.strip().split("|")[:2] == [str(job_id), "1"]
    assert "AllocCPUS" in cluster.run("sacct", "--helpformat").stdout
    bad = cluster.run("sacct", "-o", "NoSuchField", check=False)
    assert bad.returncode != 0 and "Invalid field requested" in bad.stderr


def test_end_to_end_latency_is_low(cluster: Cluster) -> None:
    started = time.time()
    job_id = cluster.sbatch("--wrap", "true")
    cluster.wait_state(job_id, "COMPLETED", timeout=10)
    assert time.time() - started < 10


def test_zz_time_limit_enforced(cluster: Cluster) -> None:
    job_id = TIMED["job"]
    job = cluster.wait_state(job_id, "TIMEOUT", timeout=90)
    assert 60 <= job["end_time"] - job["start_time"] < 70
    assert cluster.accounted(job_id)[0]["state"] == "TIMEOUT"
    assert "TIMEOUT" in cluster.run("sacct", "-j", str(job_id), "-X", "-n").stdout


def test_the_controllers_folding_of_arrays_is_squeues(cluster: Cluster) -> None:
    """Default squeue asks the controller to fold each array's pending tasks; with a filter only
    squeue applies (--name), squeue folds what it fetched: both print the same lines."""
    held = [cluster.sbatch("-H", "--array=1-5,7,9-12%3", "-J", "folded", "--wrap", "true"),
            cluster.sbatch("-H", "--array=4", "-J", "folded", "--wrap", "true"),
            cluster.sbatch("-H", "-J", "folded", "--wrap", "true")]
    cluster.run("scontrol", "update", f"jobid={held[0] + 2}", "Nice=-10")  # a higher priority stands for its array
    try:
        fmt = ["-h", "-o", "%i %P %j %t %r", "-j", ",".join(map(str, held))]
        by_controller = cluster.run("squeue", *fmt).stdout.splitlines()
        by_squeue = cluster.run("squeue", "--name=folded", *fmt).stdout.splitlines()
        assert by_controller == by_squeue
        assert [line.split()[0] for line in by_controller] == \
            [f"{held[0]}_[1-5,7,9-12%3]", f"{held[1]}_4", str(held[2])]
        everything = cluster.run("squeue", "-r", "-h", "-o", "%i", "-j", str(held[0])).stdout.split()
        assert len(everything) == 10
        # scontrol shows an array's pending tasks as Slurm keeps them: one record, the array's id
        shown = cluster.run("scontrol", "-o", "show", "job", str(held[0])).stdout.splitlines()
        assert len(shown) == 1 and shown[0].startswith(
            f"JobId={held[0]} ArrayJobId={held[0]} ArrayTaskId=1-5,7,9-12 ArrayTaskThrottle=3 JobName=folded ")
        one = cluster.run("scontrol", "-o", "show", "job", f"{held[0]}_7").stdout
        assert one.startswith(f"JobId={held[0] + 5} ArrayJobId={held[0]} ArrayTaskId=7 ")
        assert cluster.run("scontrol", "-o", "show", "job", str(held[0] + 5)).stdout == one  # by its own id
        # a task released on its own is a record of its own, as Slurm splits it out of the array's
        later = cluster.sbatch("-H", "--begin=now+1hour", "--array=1-4", "-J", "folded", "--wrap", "true")
        held.append(later)
        cluster.run("scontrol", "release", f"{later}_2")
        split = sorted(cluster.run("squeue", "-h", "-o", "%i", "-j", str(later)).stdout.split())
        assert split == [f"{later}_2", f"{later}_[1,3-4]"], split
        by_squeue = sorted(cluster.run("squeue", "-h", "-o", "%i", "--name=folded", "-j", str(later)).stdout.split())
        assert by_squeue == split  # folded by squeue itself alike
        records = cluster.run("scontrol", "-o", "show", "job", str(later)).stdout.splitlines()
        assert sorted(line.split()[0] for line in records) == [f"JobId={later}", f"JobId={later + 1}"], records
        cluster.run("scontrol", "release", f"{later}_[3,4]")  # an array's index list, commas and all
        assert sorted(cluster.run("squeue", "-h", "-o", "%i", "-j", f"{later}_[1-4]").stdout.split()) == \
            [f"{later}_1", f"{later}_[2-4]"]
        assert cluster.run("squeue", "-h", "-j", "0").stdout == ""  # no job 0, not every job out of an array
    finally:
        cluster.run("scancel", *map(str, held), check=False)


def test_a_pending_task_cancelled_by_its_index_leaves_the_array(cluster: Cluster) -> None:
    """As Slurm's (its test_122_1): scancel J_7 of a pending array takes task 7 out of it, so no job
    J_7 is left to show, while its record, CANCELLED, goes to accounting; the whole array cancelled
    then is CANCELLED, its first task included, and scancel J still finds it once that one is gone."""
    array = cluster.sbatch("-H", "--array=0-3", "-o", "/dev/null", "--wrap", "true")
    cluster.run("scancel", f"{array}_3")
    gone = cluster.run("scontrol", "show", "job", f"{array}_3", check=False)
    assert gone.returncode == 1 and "Invalid job id specified" in gone.stderr
    assert cluster.run("squeue", "-r", "-h", "-o", "%i", "-j", str(array)).stdout.split() == \
        [f"{array}_{i}" for i in range(3)]
    cluster.run("scancel", f"{array}_0")
    assert cluster.run("scontrol", "show", "job", f"{array}_0", check=False).returncode == 1
    cluster.run("scancel", str(array))  # the array by its id: its first task is gone already
    assert {t["state"] for t in cluster.jobs(str(array))} == {"CANCELLED"}
    records = cluster.accounted(array + 3)
    assert records[0]["state"] == "CANCELLED"


def test_srun_no_allocate_runs_roots_tasks_on_the_nodes_named_without_a_job(cluster: Cluster) -> None:
    """srun -Z, as Slurm's (its test_116_23): root's tasks on the nodes -w names, one per node by
    default, with no job in the queue and nothing accounted; the nodes' jobs go on beside them; a
    user is refused, and -Z without -w or with -x is refused as Slurm's srun refuses it."""
    before = {j["job_id"] for j in cluster.jobs()}
    ran = cluster.run("srun", "-N2", "--nodelist=n01,n03", "--no-allocate", "printenv", "SLURMD_NODENAME")
    assert sorted(ran.stdout.split()) == ["n01", "n03"] and "do not allocate resources" in ran.stderr
    labelled = cluster.run("srun", "-Z", "-w", "n02", "-n3", "-l", "sh", "-c", "echo $SLURM_JOB_ID $SLURM_PROCID")
    lines = sorted(labelled.stdout.splitlines())
    assert [line.split()[-1] for line in lines] == ["0", "1", "2"]
    assert all(0xFFFF0000 <= int(line.split()[1]) <= 0xFFFFFFFD for line in lines)  # Slurm's ids for these
    assert {j["job_id"] for j in cluster.jobs()} == before
    for args, message in [(["-Z", "true"], "must specify a node list with -Z, --no-allocate."),
                          (["-Z", "-w", "n01", "-x", "n02", "true"], "can not specify --exclude list with -Z"),
                          (["-Z", "-w", "n09", "true"], "Invalid node name specified")]:
        refused = cluster.run("srun", *args, check=False)
        assert refused.returncode == 1 and message in refused.stderr, (args, refused.stderr)
    user = cluster.run("srun", "-Z", "-w", "n01", "true", env=cluster.user_env(), check=False)
    assert user.returncode == 1 and "Access/permission denied" in user.stderr


def test_squeue_only_job_state_keeps_the_state_filter_with_jobs(cluster: Cluster) -> None:
    """squeue -j lists its jobs in every state; --only-job-state (Slurm 24.05's) keeps the default
    filter (pending, running...) unless --state says otherwise."""
    job_id = cluster.sbatch("-H", "--wrap", "true")
    listing = ["squeue", "--noheader", "--format=%i=%T", "-j", str(job_id)]
    assert cluster.run(*listing, "--only-job-state").stdout.strip() == f"{job_id}=PENDING"
    cluster.run("scancel", str(job_id))
    assert cluster.run(*listing).stdout.strip() == f"{job_id}=CANCELLED"
    assert cluster.run(*listing, "--only-job-state").stdout.strip() == ""
    assert cluster.run(*listing, "--only-job-state", "--state=all").stdout.strip() == f"{job_id}=CANCELLED"


def test_arbitrary_distribution_puts_each_task_where_the_hostfile_says(cluster: Cluster) -> None:
    """-m arbitrary with SLURM_HOSTFILE, as Slurm's: task i on the file's i-th host, for a new
    allocation and for a step in one; a host outside the allocation is refused."""
    hostfile = cluster.work / "arbitrary.hosts"
    hostfile.write_text("n02\nn03\nn01\nn02\n")
    env = dict(cluster.env, SLURM_HOSTFILE=str(hostfile))

    def placed(out: str) -> list[str]:
        return [host for _task, host in sorted(line.split(": ") for line in out.splitlines())]

    shown = cluster.run("srun", "-l", "-m", "arbitrary", "printenv", "SLURMD_NODENAME", env=env).stdout
    assert placed(shown) == ["n02", "n03", "n01", "n02"]
    job_id = cluster.sbatch("-N3", "-w", "n[01-03]", "-o", "arbitrary-%j.out", "--wrap",
                            "srun -l -n3 --distribution=arbitrary printenv SLURMD_NODENAME", env=env)
    cluster.wait_state(job_id, "COMPLETED")
    assert placed((cluster.work / f"arbitrary-{job_id}.out").read_text()) == ["n02", "n03", "n01"]
    hostfile.write_text("n04\n")
    outside = cluster.sbatch("-w", "n01", "-o", "outside-%j.out", "--wrap",
                             "srun -m arbitrary true; echo rc=$?", env=env)
    cluster.wait_state(outside, "COMPLETED")
    said = (cluster.work / f"outside-{outside}.out").read_text()
    assert "Requested node configuration is not available" in said and "rc=1" in said
    bad = cluster.run("srun", "-m", "sideways", "true", check=False)
    assert bad.returncode == 1 and "Invalid --distribution specification" in bad.stderr


def test_steps_running_at_once_do_not_share_cpus(cluster: Cluster) -> None:
    """As Slurm's: steps of a job running at once hold their tasks' CPUs, so background sruns spread
    over the job's nodes, and one that finds them all busy waits for a step to end; --overlap
    shares them."""
    hold = "until [ -e go.$SLURM_JOB_ID ]; do sleep 0.1; done"
    script = (f"for i in 1 2 3 4; do srun -n1 --exclusive sh -c 'echo $SLURMD_NODENAME > at.$SLURM_STEP_ID; {hold}' & "
              "done; until [ $(ls at.* 2>/dev/null | wc -l) = 4 ]; do sleep 0.1; done; "
              "srun -n1 --overlap hostname > /dev/null && echo overlap-ok; touch go.$SLURM_JOB_ID; wait; cat at.*")
    (cluster.work / "spread").mkdir()
    job_id = cluster.sbatch("-N4", "-D", str(cluster.work / "spread"), "-o", "out", "--wrap", script)
    cluster.wait_state(job_id, "COMPLETED", timeout=60)
    lines = (cluster.work / "spread" / "out").read_text().splitlines()
    assert lines[0] == "overlap-ok" and sorted(lines[1:]) == ["n01", "n02", "n03", "n04"], lines
    (cluster.work / "waits").mkdir()
    waiter = (f"srun -n1 sh -c 'touch started; {hold}' & until [ -e started ]; do sleep 0.1; done; "
              "srun -v -n1 echo second 2> err & "
              "until grep -q 'temporarily disabled' err 2>/dev/null; do sleep 0.1; done; touch go.$SLURM_JOB_ID; wait")
    job_id = cluster.sbatch("-n1", "-D", str(cluster.work / "waits"), "-o", "out", "--wrap", waiter)
    cluster.wait_state(job_id, "COMPLETED", timeout=60)
    said = (cluster.work / "waits" / "err").read_text()
    assert "step creation temporarily disabled, retrying (Requested nodes are busy)" in said
    assert f"srun: Step created for StepId={job_id}.1" in said
    assert (cluster.work / "waits" / "out").read_text() == "second\n"


def test_srun_slurmd_debug_shows_the_step_daemons_log(cluster: Cluster) -> None:
    """srun --slurmd-debug=LEVEL (root's, as Slurm's: the hostile suite checks a user is refused): the
    step daemon's own lines on the step's standard error, from verbose on (its levels, then each
    task's start and end)."""
    assert "debug levels" not in cluster.run("srun", "--slurmd-debug=info", "true").stderr
    said = cluster.run("srun", "-n2", "--slurmd-debug=verbose", "true").stderr
    assert "slurmstepd: debug levels are stderr='verbose'" in said and "slurmstepd: starting 2 tasks" in said
    assert re.search(r"slurmstepd: task 1 \(\d+\) exited with exit code 0\.", said), said
    assert "debug:" not in said
    assert "slurmstepd: debug:  step " in cluster.run("srun", "--slurmd-debug=debug", "true").stderr
    bad = cluster.run("srun", "--slurmd-debug=loud", "true", check=False)
    assert bad.returncode == 1 and "Invalid --slurmd-debug level: loud" in bad.stderr


def test_overcommit_allocates_a_cpu_a_node_and_runs_every_task(cluster: Cluster) -> None:
    """srun/sbatch -O, as Slurm's: the CPUs of one task per node (one CPU for 6 tasks), the tasks
    sharing them, SLURM_OVERCOMMIT=1 and the tasks per node counted in the batch environment."""
    out = cluster.run("srun", "-N1", "-n6", "-O", "-l", "printenv", "SLURM_OVERCOMMIT").stdout
    assert sorted(out.splitlines()) == [f"{task}: 1" for task in range(6)]
    job = cluster.sbatch("-N1", "-n6", "-O", "-o", "/dev/null", "--wrap",
                         "echo $SLURM_OVERCOMMIT $SLURM_TASKS_PER_NODE $SLURM_JOB_CPUS_PER_NODE > out")
    cluster.wait_state(job, "COMPLETED")
    assert (cluster.work / "out").read_text() == "1 6 1\n"

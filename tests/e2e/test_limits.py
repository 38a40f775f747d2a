"""QOS and association limits on a real cluster, through the real commands: sacctmgr sets them,
sbatch --qos asks for a QOS, squeue shows Slurm's pending reasons, sacct and scontrol the QOS."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.accounting.store import AccountingStore
from wattsched.harness.testing import Cluster, wait_for
from wattsched.model import Allocation, EnergyRecord, Job

SETTINGS = """PriorityType=priority/multifactor
PriorityWeightQOS=10000
PriorityWeightAge=1
PriorityCalcPeriod=0:01
AccountingStorageEnforce=associations,limits,qos
MetricsType=metrics/openmetrics"""
ALICE, BOB, CAROL, DAVE, ERIN = (3001, "alice"), (3002, "bob"), (3003, "carol"), (3004, "dave"), (3005, "erin")
FRANK = (3006, "frank")
RUN = ("-o", "/dev/null", "-D", "/tmp")  # the users' jobs write nowhere of the test's


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # in a folder every user can pass through: the users' batch scripts are in its spool
    root = Path(tempfile.mkdtemp(prefix="wattsched-limits-"))
    os.chmod(root, 0o755)
    running = Cluster(root, extra=SETTINGS, node_extra="MaxWatts=400 IdleWatts=100",
                      partitions="PartitionName=debug Nodes=n[01-04] Default=YES MaxTime=INFINITE\n"
                                 "PartitionName=small Nodes=n[01-02] QOS=capped AllowQos=normal,capped").start()
    c = running
    c.run("sacctmgr", "-i", "add", "qos", "capped", "MaxJobsPerUser=2", "Priority=10")
    c.run("sacctmgr", "-i", "add", "qos", "high", "Priority=100")
    c.run("sacctmgr", "-i", "add", "qos", "short", "MaxWall=10", "MaxSubmitJobsPerUser=2")
    c.run("sacctmgr", "-i", "add", "qos", "strict", "MaxWall=10", "Flags=DenyOnLimit")
    c.run("sacctmgr", "-i", "add", "account", "proj", "QOS=normal,capped,short,strict")
    c.run("sacctmgr", "-i", "add", "account", "green")
    c.run("sacctmgr", "-i", "add", "account", "small", "GrpTRES=cpu=4")
    c.run("sacctmgr", "-i", "add", "user", "alice", "Account=proj")
    c.run("sacctmgr", "-i", "add", "user", "bob", "Account=green", "QOS=normal,high")
    c.run("sacctmgr", "-i", "add", "user", "carol", "Account=small")
    yield running
    running.stop()
    shutil.rmtree(root, ignore_errors=True)


def _as(user: tuple[int, str], c: Cluster) -> dict:
    return c.user_env(*user)


def _reasons(c: Cluster, job_ids: list[int]) -> dict[int, tuple[str, str, str]]:
    """squeue's %i %T %q %r of the jobs."""
    out = c.run("squeue", "-h", "-j", ",".join(map(str, job_ids)), "-o", "%i %T %q %r").stdout
    return {int(f[0]): (f[1], f[2], f[3]) for f in (line.split() for line in out.splitlines())}


def test_a_qos_runs_two_jobs_per_user_and_pends_the_rest_with_slurms_reason(cluster: Cluster) -> None:
    c = cluster
    ids = [c.sbatch(*RUN, "--qos=capped", "-n", "1", "-t", "5", "--wrap", "sleep 300", env=_as(ALICE, c))
           for _ in range(5)]
    try:
        def settled():
            rows = _reasons(c, ids)
            running = [i for i, r in rows.items() if r[0] == "RUNNING"]
            limited = [i for i, r in rows.items() if r[2] == "QOSMaxJobsPerUserLimit"]
            return rows if len(running) == 2 and len(limited) == 3 else None

        rows = wait_for(settled, 30, 0.2, what="2 running, 3 pending on QOSMaxJobsPerUserLimit")
        assert {r[1] for r in rows.values()} == {"capped"}
        assert "QOS=capped" in c.run("scontrol", "show", "job", str(ids[0])).stdout
        # the cluster has room (16 CPUs): the limit alone holds them; one ends, the next starts
        first = next(i for i, r in rows.items() if r[0] == "RUNNING")
        c.run("scancel", str(first), env=_as(ALICE, c))
        wait_for(lambda: sum(r[0] == "RUNNING" for r in _reasons(c, ids).values()) == 2
                 and sum(r[2] == "QOSMaxJobsPerUserLimit" for r in _reasons(c, ids).values()) == 2, 30, 0.2,
                 what="the next job started in the freed place")
    finally:
        c.run("scancel", *map(str, ids))
    [record] = c.accounted(ids[0])
    sacct = c.run("sacct", "-j", str(ids[0]), "-X", "-n", "-P", "-o", "JobID,QOS,QOSRAW").stdout.split()
    assert sacct[0].split("|")[1] == "capped" and sacct[0].split("|")[2] != "0"
    assert record["qos"] == "capped"


def test_a_qos_the_association_may_not_use_is_refused(cluster: Cluster) -> None:
    c = cluster
    refused = c.run("sbatch", "--qos=high", "--wrap", "true", env=_as(ALICE, c), check=False)
    assert refused.returncode != 0 and "Invalid qos specification" in refused.stderr
    unknown = c.run("sbatch", "--qos=nosuch", "--wrap", "true", env=_as(ALICE, c), check=False)
    assert unknown.returncode != 0 and "Invalid qos specification" in unknown.stderr
    # no --qos: the association's default, normal
    job = c.sbatch("-t", "1", "--hold", "--wrap", "true", env=_as(ALICE, c))
    assert c.job(job)["qos"] == "normal"
    c.run("scancel", str(job))


def test_max_wall_pends_or_refuses_and_gives_a_time_limit(cluster: Cluster) -> None:
    c = cluster
    long = c.sbatch("--qos=short", "-t", "30", "--wrap", "true", env=_as(ALICE, c))
    wait_for(lambda: _reasons(c, [long])[long][2] == "QOSMaxWallDurationPerJobLimit", 20, 0.2,
             what="the over-long job pends on MaxWall")
    # no time limit given: the QOS's MaxWall is the job's
    fitted = c.sbatch("--qos=short", "--hold", "--wrap", "true", env=_as(ALICE, c))
    assert c.job(fitted)["time_limit_min"] == 10
    # MaxSubmitJobsPerUser=2: a third job is refused with Slurm's words, nothing else is lost
    third = c.run("sbatch", "--qos=short", "--wrap", "true", env=_as(ALICE, c), check=False)
    assert third.returncode != 0
    assert "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)" in third.stderr
    assert {c.job(long)["state"], c.job(fitted)["state"]} == {"PENDING"}
    # DenyOnLimit: over MaxWall is refused at once
    denied = c.run("sbatch", "--qos=strict", "-t", "30", "--wrap", "true", env=_as(ALICE, c), check=False)
    assert denied.returncode != 0 and "accounting/QOS policy" in denied.stderr
    c.run("scancel", str(long), str(fitted))


def test_a_group_cpu_limit_holds_an_account_to_its_share(cluster: Cluster) -> None:
    c = cluster
    first = c.sbatch(*RUN, "-n", "4", "-t", "5", "--wrap", "sleep 300", env=_as(CAROL, c))
    second = c.sbatch(*RUN, "-n", "2", "-t", "5", "--wrap", "sleep 300", env=_as(CAROL, c))
    try:
        c.wait_state(first, "RUNNING")
        wait_for(lambda: _reasons(c, [second])[second][2] == "AssocGrpCpuLimit", 20, 0.2,
                 what="the second job pends on the account's GrpTRES=cpu=4")
        # the administrator raises the limit: it runs
        c.run("sacctmgr", "-i", "modify", "account", "small", "set", "GrpTRES=cpu=8")
        c.wait_state(second, "RUNNING")
        shown = c.run("sacctmgr", "show", "assoc", "where", "account=small", "format=Account,User,GrpTRES", "-P",
                      "-n").stdout.splitlines()
        assert "small||cpu=8" in shown
    finally:
        c.run("scancel", str(first), str(second))


def test_an_energy_budget_used_up_pends_the_next_job_until_raised(cluster: Cluster) -> None:
    c = cluster
    c.run("sacctmgr", "-i", "modify", "account", "green", "set", "GrpTRESMins=energy=1000000")
    now = time.time()
    store = AccountingStore(f"sqlite:///{c.root / 'ctld' / 'accounting.db'}")
    spent = Job(job_id=9901, name="spent", uid=BOB[0], user=BOB[1], account="green", qos="normal", partition="debug",
                state="COMPLETED", submit_time=now - 700, eligible_time=now - 700, start_time=now - 650,
                end_time=now - 50, alloc=Allocation(alloc_cpus={"n01": 4}),
                energy=EnergyRecord(consumed_energy_j=3.0e6))
    store.upsert_jobs(c.name, [spent.to_dict()])
    # use is read from the history every PriorityCalcPeriod (1 s here), as in Slurm
    wait_for(lambda: any(line.startswith("green||") and float(line.split("|")[7] or 0) > 1e6 for line in
                         c.run("sshare", "-a", "-P", "-n").stdout.replace(" ", "").splitlines()), 20, 0.2,
             what="the account's recorded energy counted")
    # 3 MJ used of a 1 MJ budget: the next job waits, with Slurm's reason for an energy budget
    job = c.sbatch(*RUN, "-t", "1", "--wrap", "true", env=_as(BOB, c))
    wait_for(lambda: _reasons(c, [job]).get(job, ("", "", ""))[2] == "AssocGrpEnergyMinutes", 30, 0.2,
             what="the job pends on the account's energy budget")
    shown = c.run("sacctmgr", "show", "assoc", "where", "account=green", "user=", "format=Account,GrpTRESMins",
                  "-P", "-n").stdout
    assert "green|energy=1000000" in shown
    # scontrol show assoc_mgr: the budget and what is used of it, in Slurm's layout
    manager = c.run("scontrol", "show", "assoc_mgr", "accounts=green", "flags=assoc").stdout
    budget = next(line for line in manager.splitlines() if line.strip().startswith("GrpTRESMins="))
    used = int(budget.split("energy=1000000(")[1].split(")")[0])
    assert 2_500_000 < used <= 3_000_000  # 3 MJ, decayed a little (PriorityDecayHalfLife)
    assert "Account=green UserName= " in manager
    share = c.run("sshare", "-a", "-A", "green", "-P", "-n", "-o", "Account,User,GrpTRESMins,GrpTRESRaw").stdout
    rows = [line.split("|") for line in share.splitlines()]
    account_row = next(f for f in rows if [f[0].strip(), f[1]] == ["green", ""])
    assert account_row[2] == "energy=1000000" and int(account_row[3].split("energy=")[1].split(",")[0]) > 2_500_000
    # sreport cluster Budgets (ours): the budget, its use, what remains
    report = c.run("sreport", "cluster", "Budgets", "accounts=green", "-P", "-n").stdout.splitlines()
    assert len(report) == 1
    _cluster, account, login, qos, tres, budget_j, used_j, _running, left, share_used = report[0].split("|")
    assert (account, login, qos, tres, budget_j, left) == ("green", "", "", "energy", "1000000", "0")
    assert 2_500_000 < int(used_j) <= 3_000_000 and share_used.endswith("%") and float(share_used[:-1]) > 250
    assert "Budget" in c.run("sreport", "cluster", "Budgets").stdout
    metrics = c.api("GET", "/metrics/limits").text
    assert 'wattsched_limit{account="green",limit="GrpTRESMins",owner="assoc",qos="",tres="energy",user=""} 1e+06' \
        in metrics
    assert 'wattsched_limit_used{account="green",limit="GrpTRESMins",owner="assoc",qos="",tres="energy",user=""}' \
        in metrics
    c.run("sacctmgr", "-i", "modify", "account", "green", "set", "GrpTRESMins=energy=100000000")
    c.wait_state(job, {"RUNNING", "COMPLETED"})


def test_a_running_job_ends_timeout_when_its_account_uses_up_its_budget(cluster: Cluster) -> None:
    """Slurm's limits end running jobs whose group has used up its TRES-minutes (without safe)."""
    c = cluster
    c.run("sacctmgr", "-i", "add", "account", "metered", "GrpTRESMins=cpu=1")
    c.run("sacctmgr", "-i", "add", "user", "frank", "Account=metered")
    job = c.sbatch(*RUN, "-n", "4", "-t", "10", "--wrap", "sleep 300", env=_as(FRANK, c))
    c.wait_state(job, "RUNNING")
    # 4 CPUs use the account's one CPU-minute in 15 s: its use so far is read every PriorityCalcPeriod
    c.wait_state(job, "TIMEOUT", timeout=90)
    assert c.run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State").stdout.split() == ["TIMEOUT"]
    following = c.sbatch(*RUN, "-t", "1", "--wrap", "true", env=_as(FRANK, c))
    wait_for(lambda: _reasons(c, [following]).get(following, ("", "", ""))[2] == "AssocGrpCPUMinutesLimit", 30,
             0.2, what="the next job pends on the used-up budget")
    c.run("scancel", str(following))


def test_qos_priority_weighs_in_the_multifactor_priority(cluster: Cluster) -> None:
    c = cluster
    normal = c.sbatch("--begin=now+1hour", "-t", "1", "--wrap", "true", env=_as(BOB, c))
    high = c.sbatch("--begin=now+1hour", "--qos=high", "-t", "1", "--wrap", "true", env=_as(BOB, c))
    try:
        rows = {int(line.split()[0]): line.split() for line in
                c.run("sprio", "-h", "-o", "%i %Y %q %n").stdout.splitlines()}
        assert int(rows[high][1]) > int(rows[normal][1])
        assert int(rows[high][1]) - int(rows[normal][1]) >= 9000  # the top QOS: the whole weight (10000)
        assert float(rows[high][2]) == 1.0 and rows[high][3] == "high"
    finally:
        c.run("scancel", str(normal), str(high))


def test_sacctmgr_shows_qos_as_slurm(cluster: Cluster) -> None:
    c = cluster
    header = c.run("sacctmgr", "show", "qos").stdout.splitlines()[0].split()
    assert header[:9] == ["Name", "Priority", "GraceTime", "Preempt", "PreemptExemptTime", "PreemptMode", "Flags",
                          "UsageThres", "UsageFactor"]
    rows = c.run("sacctmgr", "show", "qos", "-P", "-n", "format=Name,Prio,MaxJobsPU,MaxWall,Flags").stdout
    assert "capped|10|2||" in rows.splitlines()
    assert "strict|0||00:10:00|DenyOnLimit" in rows.splitlines()
    assert rows.splitlines()[0].startswith("normal|0|")
    as_json = c.run("sacctmgr", "show", "qos", "--json").stdout
    assert '"max_jobs": 2' in as_json
    # bad settings: a clear error, nothing changed
    bad = c.run("sacctmgr", "-i", "modify", "qos", "capped", "set", "GrpTRES=bogus=1", check=False)
    assert bad.returncode != 0 and "Invalid TRES" in bad.stderr
    bad = c.run("sacctmgr", "-i", "modify", "qos", "capped", "set", "GrpTRES=energy=5", check=False)
    assert bad.returncode != 0 and "energy is counted over time" in bad.stderr
    assert "capped|10|2||" in c.run("sacctmgr", "show", "qos", "-P", "-n",
                                    "format=Name,Prio,MaxJobsPU,MaxWall,Flags").stdout.splitlines()
    # only administrators change them
    denied = c.run("sacctmgr", "-i", "add", "qos", "mine", env=_as(ALICE, c), check=False)
    assert denied.returncode != 0


def test_a_deleted_qos_leaves_the_associations_that_listed_it(cluster: Cluster) -> None:
    """As Slurm's: a QOS removed goes from every association's list (and default), not refused;
    sacctmgr -s (or WithAssoc) lists accounts and users with their associations."""
    c = cluster
    c.run("sacctmgr", "-i", "add", "qos", "gone1,gone2,gone3")
    c.run("sacctmgr", "-i", "add", "account", "qacct")
    c.run("sacctmgr", "-i", "modify", "account", "qacct", "set", "qos=gone1,gone2,gone3", "DefaultQOS=gone2")
    assert c.run("sacctmgr", "-ns", "show", "account", "qacct", "format=qos").stdout.split() == ["gone1,gone2,gone3"]
    c.run("sacctmgr", "-i", "remove", "qos", "gone2")
    assert c.run("sacctmgr", "-nP", "show", "account", "qacct", "withassoc", "format=account,qos,defaultqos") \
        .stdout.split() == ["qacct|gone1,gone3|"]
    assert "gone2" not in c.run("sacctmgr", "-nP", "show", "qos", "format=name").stdout.split()
    listed = c.run("sacctmgr", "-s", "show", "user", "alice").stdout.splitlines()
    assert listed[0].split()[:5] == ["User", "Def", "Acct", "Admin", "Cluster"] and "proj" in listed[2]
    c.run("sacctmgr", "-i", "remove", "account", "qacct")
    c.run("sacctmgr", "-i", "remove", "qos", "gone1,gone3")


def test_a_partition_qos_holds_every_job_of_the_partition(cluster: Cluster) -> None:
    c = cluster
    # QOS=capped on the partition: its MaxJobsPerUser=2 holds jobs of any QOS there
    ids = [c.sbatch(*RUN, "-p", "small", "-t", "5", "--wrap", "sleep 300", env=_as(BOB, c)) for _ in range(3)]
    try:
        wait_for(lambda: sorted(r[0] for r in _reasons(c, ids).values()) == ["PENDING", "RUNNING", "RUNNING"]
                 and any(r[2] == "QOSMaxJobsPerUserLimit" for r in _reasons(c, ids).values()), 30, 0.2,
                 what="two running, the third held by the partition's QOS")
        assert {r[1] for r in _reasons(c, ids).values()} == {"normal"}  # the jobs' own QOS
        # AllowQos: high may not run there, whoever asks
        refused = c.run("sbatch", "-p", "small", "--qos=high", "--wrap", "true", env=_as(BOB, c), check=False)
        assert refused.returncode != 0 and "Invalid qos specification" in refused.stderr
        shown = c.run("scontrol", "show", "partition", "small").stdout
        assert "AllowQos=normal,capped" in shown and "QoS=capped" in shown
    finally:
        c.run("scancel", *map(str, ids))


def test_a_power_share_keeps_an_account_under_its_watts_while_another_fills_the_rest(cluster: Cluster) -> None:
    c = cluster
    # 400 W nodes of 4 CPUs: a CPU draws 100 W at most; the account may hold 800 W at a time
    c.run("sacctmgr", "-i", "add", "account", "watt", "GrpTRES=power=800")
    c.run("sacctmgr", "-i", "add", "account", "fill")
    c.run("sacctmgr", "-i", "add", "user", "dave", "Account=watt")
    c.run("sacctmgr", "-i", "add", "user", "erin", "Account=fill")
    mine = [c.sbatch(*RUN, "-n", "2", "-t", "5", "--wrap", "sleep 300", env=_as(DAVE, c)) for _ in range(6)]
    try:
        def held():
            rows = _reasons(c, mine)
            running = [i for i, r in rows.items() if r[0] == "RUNNING"]
            waiting = [i for i, r in rows.items() if r[2] == "AssocGrpPower"]
            return (running, waiting) if len(running) == 4 and len(waiting) == 2 else None

        wait_for(held, 30, 0.2, what="4 jobs (800 W) running, 2 held by the account's power share")
        others = [c.sbatch(*RUN, "-n", "2", "-t", "5", "--wrap", "sleep 300", env=_as(ERIN, c)) for _ in range(4)]
        try:
            for job in others:  # the rest of the machine goes to the other account
                c.wait_state(job, "RUNNING")
            assert held() is not None
            manager = c.run("scontrol", "show", "assoc_mgr", "accounts=watt", "flags=assoc").stdout
            line = next(x for x in manager.splitlines() if x.strip().startswith("GrpTRES=") and "Account" not in x)
            assert "power=800(800)" in line
        finally:
            c.run("scancel", *map(str, others))
    finally:
        c.run("scancel", *map(str, mine))

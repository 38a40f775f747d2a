"""Multifactor priority, FairShare and EnergyFairShare on a real cluster: sacctmgr, sshare, sprio."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from wattsched.accounting.store import AccountingStore
from wattsched.harness.testing import Cluster, wait_for
from wattsched.model import Allocation, EnergyRecord, Job

SETTINGS = """PriorityType=priority/multifactor
PriorityWeightFairshare=1000
PriorityWeightEnergy=1000
PriorityWeightAge=10
PriorityWeightJobSize=5
PriorityCalcPeriod=0:01
AccountingStorageEnforce=associations"""
USERS = {"green": (2001, 0.7), "normal": (2002, 1.0), "glutton": (2003, 1.3)}


@pytest.fixture(scope="module")
def fs_cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("fs"), extra=SETTINGS).start()
    yield running
    running.stop()


def _sprio(c: Cluster) -> dict[str, list[str]]:
    # job, partition, user, priority, site, then AGE FAIRSHARE JOBSIZE PARTITION QOS and ours, ENERGY
    lines = c.run("sprio", "-h", "-o", "%i %r %u %Y %S %A %F %J %P %Q %E").stdout.splitlines()
    return {line.split()[2]: line.split() for line in lines}


def test_energy_fairshare_ranks_the_green_user_first(fs_cluster: Cluster) -> None:
    c = fs_cluster
    c.run("sacctmgr", "-i", "add", "account", "phys", "Fairshare=10", "Description=physics")
    for user in USERS:
        c.run("sacctmgr", "-i", "add", "user", user, "Account=phys")
    # a burst of identical jobs, already accounted, whose energy differs by user (0.7x, 1x, 1.3x)
    now = time.time()
    store = AccountingStore(f"sqlite:///{c.root / 'ctld' / 'accounting.db'}")
    history = []
    for n, (user, (uid, factor)) in enumerate(USERS.items()):
        for k in range(3):
            job = Job(job_id=9000 + 10 * n + k, name="burst", uid=uid, user=user, account="phys", partition="debug",
                      state="COMPLETED", submit_time=now - 4000, eligible_time=now - 4000, start_time=now - 3600,
                      end_time=now - 600, alloc=Allocation(alloc_cpus={"n01": 4}),
                      energy=EnergyRecord(consumed_energy_j=factor * 1.2e6))
            history.append(job.to_dict())
    store.upsert_jobs(c.name, history)
    pending = {user: c.sbatch("--begin=now+1hour", "-t", "5", "--wrap", "true", env=c.user_env(uid, user))
               for user, (uid, _f) in USERS.items()}

    def ranked():
        rows = _sprio(c)
        return rows if len({rows[u][10] for u in USERS}) == 3 else None

    rows = wait_for(ranked, 20, 0.5, what="energy factors computed")
    # FAIRSHARE (CPU-seconds) alike for all three, ENERGY highest for the greenest
    assert len({rows[u][6] for u in USERS}) == 1
    assert int(rows["green"][10]) > int(rows["normal"][10]) > int(rows["glutton"][10])
    assert int(rows["green"][3]) > int(rows["normal"][3]) > int(rows["glutton"][3])
    order = c.run("sprio", "-h", "-o", "%u").stdout.split()
    assert order[:3] == ["green", "normal", "glutton"]
    # sprio computes at once; a job's own priority is set by the next scheduling pass
    # (SchedulerInterval at most), as in Slurm, where sprio and squeue's %Q may differ until then
    wait_for(lambda: c.job(pending["green"])["priority"] > c.job(pending["glutton"])["priority"], 20, 0.2,
             what="the green user's job ranked above the glutton's")
    # sshare explains it: same RawUsage, different RawEnergy and EnergyFairShare
    share = c.run("sshare", "-a", "-P", "-o", "Account,User,RawUsage,RawEnergy,EnergyFairShare").stdout.splitlines()
    assert share[0] == "Account|User|RawUsage|RawEnergy|EnergyFairShare"
    by_user = {line.split("|")[1]: line.split("|") for line in share[1:] if line.split("|")[1] in USERS}
    assert len({by_user[u][2] for u in USERS}) == 1
    energies = [float(by_user[u][3]) for u in USERS]
    assert energies[0] < energies[1] < energies[2]
    assert float(by_user["green"][4]) > float(by_user["glutton"][4])
    weights = c.run("sprio", "-w").stdout.splitlines()[1].split()
    assert weights[0] == "Weights" and "1000" in weights
    assert weights[1] == "1"  # SITE's, as Slurm's sprio -w prints it: the site factor counts once
    # Slurm's layouts: by default a column for each weighted factor (ENERGY ours), USER with -u;
    # -l the fixed long one
    assert c.run("sprio").stdout.split("\n")[0].split() == ["JOBID", "PARTITION", "PRIORITY", "SITE", "AGE",
                                                             "FAIRSHARE", "JOBSIZE", "ENERGY"]
    assert c.run("sprio", "-u", "green").stdout.split("\n")[0].split()[:4] == ["JOBID", "PARTITION", "USER",
                                                                               "PRIORITY"]
    assert c.run("sprio", "-l").stdout.split("\n")[0].split() == [
        "JOBID", "PARTITION", "USER", "ACCOUNT", "PRIORITY", "SITE", "AGE", "ASSOC", "FAIRSHARE", "JOBSIZE",
        "PARTITION", "QOSNAME", "QOS", "NICE", "TRES"]
    # every code of Slurm's, the normalized ones of factors without a weight too; -v first says how it was asked
    every = c.run("sprio", "-h", "-o", "%.15i %.10y %.10Y %.10S %.10a %.10A %.10b %.10B %.10f %.10F %.10j %.10J "
                  "%.10p %.10P %.10q %.10Q %.6N", "-j", str(pending["green"])).stdout.split()
    assert every[0] == str(pending["green"]) and every[6] == "0.0000000" and every[7] == "0"  # the ASSOC factor
    verbose = c.run("sprio", "-v", "-j", str(pending["green"])).stdout.splitlines()
    assert verbose[:8] == ["-----------------------------", "format     = (null)", "job_flag   = 1",
                           f"jobs       = {pending['green']}", "partition  = (null)", "users      = (null)",
                           "verbose    = 1", "-----------------------------"]
    json_rows = c.api("GET", "/v1/shares").json()["rows"]
    assert {r["user"] for r in json_rows} >= set(USERS)
    c.run("scancel", *map(str, pending.values()))


def test_accounts_are_enforced_and_defaulted(fs_cluster: Cluster) -> None:
    c = fs_cluster
    stranger = c.run("sbatch", "-H", "--wrap", "true", env=c.user_env(3001, "mallory"), check=False)
    assert stranger.returncode == 1
    assert "Invalid account or account/partition combination specified" in stranger.stderr
    wrong = c.run("sbatch", "-H", "-A", "chem", "--wrap", "true", env=c.user_env(2001, "green"), check=False)
    assert wrong.returncode == 1 and "Invalid account" in wrong.stderr
    held = c.sbatch("-H", "--wrap", "true", env=c.user_env(2001, "green"))
    assert "Priority=0 " in c.run("scontrol", "show", "job", str(held)).stdout
    job = c.sbatch("--begin=now+1hour", "--wrap", "true", env=c.user_env(2001, "green"))
    assert c.job(job)["account"] == "phys"  # the default account
    # accounts (and wckeys) are kept in lower case, as Slurm keeps them: -A PHYS is phys
    upper = c.sbatch("-H", "-A", "PHYS", "--wckey=Night", "--wrap", "true", env=c.user_env(2001, "green"))
    assert (c.job(upper)["account"], c.job(upper)["wckey"]) == ("phys", "night")
    c.run("scancel", str(upper))
    c.run("sacctmgr", "-i", "add", "account", "MixedCase")
    c.run("sacctmgr", "-i", "add", "user", "green", "Account=MIXEDCASE")
    shown = c.run("sacctmgr", "show", "assoc", "-P", "-n", "format=Account,User").stdout.splitlines()
    assert "mixedcase|" in shown and "mixedcase|green" in shown and not any("MixedCase" in s for s in shown), shown
    c.run("sacctmgr", "-i", "delete", "user", "green", "where", "Account=MixedCase")
    c.run("sacctmgr", "-i", "delete", "account", "MIXEDCASE")
    # its priority comes with the first scheduling pass after the submission (a held job's stays 0)
    wait_for(lambda: "Priority=0 " not in c.run("scontrol", "show", "job", str(job)).stdout, 30,
             what="the job's priority set by a pass")
    assert "Account=phys" in c.run("scontrol", "show", "job", str(job)).stdout
    c.run("scontrol", "update", f"jobid={job}", "Priority=777")
    assert "Priority=777 " in c.run("scontrol", "show", "job", str(job)).stdout
    c.run("scancel", str(job), str(held))


def test_sacctmgr_refusals_and_confirmation(fs_cluster: Cluster) -> None:
    c = fs_cluster
    before = c.run("sacctmgr", "show", "assoc", "-P").stdout
    cases = [
        (["add", "account", "chem", "Parent=nowhere"], "Parent account nowhere doesn't exist"),
        (["add", "account", "chem", "Fairshare=-3"], "Invalid Fairshare value"),
        (["add", "user", "green", "Account=phys"], "Nothing new added"),
        (["add", "user", "zoe", "Account=phys", "Colour=red"], "Unknown option: colour"),
        (["modify", "account", "phys", "set", "Parent=phys"], "loop"),
        (["delete", "account", "phys"], "still has users"),
        (["frobnicate", "account", "x"], "Invalid command"),
    ]
    for args, message in cases:
        result = c.run("sacctmgr", "-i", *args, check=False)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    denied = c.run("sacctmgr", "-i", "add", "account", "mine", env=c.user_env(2001, "green"), check=False)
    assert denied.returncode == 1 and "Access/permission denied" in denied.stderr
    declined = c.run("sacctmgr", "add", "account", "chem", input="n\n")
    assert "Changes Discarded" in declined.stdout
    assert c.run("sacctmgr", "show", "assoc", "-P").stdout == before
    accepted = c.run("sacctmgr", "add", "account", "chem", "Fairshare=5", input="y\n")
    assert "Would you like to commit changes?" in accepted.stdout
    rows = c.run("sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,Share,ParentName").stdout.splitlines()
    assert "chem||5|root" in rows
    c.run("sacctmgr", "-i", "modify", "account", "chem", "set", "Fairshare=7")
    c.run("sacctmgr", "-i", "delete", "account", "chem")
    assert c.run("sacctmgr", "show", "assoc", "-P").stdout == before
    users = c.run("sacctmgr", "show", "user", "green", "-P", "-n").stdout.strip()
    assert users == "green|phys|None"
    # AdminLevel=Administrator makes a user an administrator of the cluster
    c.run("sacctmgr", "-i", "modify", "user", "green", "set", "AdminLevel=Administrator")
    c.run("sacctmgr", "-i", "add", "account", "byadmin", env=c.user_env(2001, "green"))
    c.run("sacctmgr", "-i", "delete", "account", "byadmin", env=c.user_env(2001, "green"))
    c.run("sacctmgr", "-i", "modify", "user", "green", "set", "AdminLevel=None")
    refused = c.run("sacctmgr", "-i", "add", "account", "byadmin", env=c.user_env(2001, "green"), check=False)
    assert refused.returncode == 1


def test_sprio_needs_multifactor(tmp_path) -> None:
    c = Cluster(tmp_path).start()
    try:
        refused = c.run("sprio", check=False)
        assert refused.returncode == 1 and "not running a supported priority plugin" in refused.stderr
    finally:
        c.stop()


def test_a_running_jobs_energy_counts_for_energy_fairshare_while_it_runs(tmp_path) -> None:
    """As its CPU time counts for FairShare: EnergyFairShare sees a long job's joules so far, not
    only once it has ended (read off its nodes' counters)."""
    c = Cluster(tmp_path, extra=f"{SETTINGS}\nEmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\n"
                "AcctGatherNodeFreq=1", node_extra="IdleWatts=100 MaxWatts=200").start()
    try:
        job_id = c.sbatch("-w", "n01", "--wrap", "sleep 300")  # root's: a user this machine has
        c.wait_state(job_id, "RUNNING")

        def raw(column: str) -> float:
            rows = c.run("sshare", "-a", "-P", "-n", "-o", f"User,{column}").stdout.splitlines()
            return next((float(r.split("|")[1]) for r in rows if r.strip().startswith("root|")), 0.0)

        wait_for(lambda: raw("RawUsage") > 0 and raw("RawEnergy") > 0, 60, 0.5,
                 what="the running job's CPU time and energy both counted")
        assert c.job(job_id)["state"] == "RUNNING"
        c.run("scancel", str(job_id))
    finally:
        c.stop()

"""The power-capping prototype's Examples 1, 2 and 3 (Hautreux 2013, section 5) on etc/leaf257.conf,
emulated, through the real commands: the same command sequences and the seed's figures."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import ALICE, BIN, free_port, wait_for

ETC = Path(__file__).resolve().parents[2] / "etc"


class Leaf:
    """The 257-node cluster started with `wattsched emulate`, and its commands."""

    def __init__(self, root: Path, extra: str = "", node_default: str = ""):
        self.conf = root / "leaf257.conf"
        text = (ETC / "leaf257.conf").read_text() + extra
        text = text.replace("IdleWatts=450 MaxWatts=950", f"IdleWatts=450 MaxWatts=950 {node_default}".rstrip())
        text = text.replace("../wattsched-state/leaf257", str(root / "state"))
        text = text.replace("SlurmctldPort=6827", f"SlurmctldPort={free_port()}")
        self.conf.write_text(text)
        self.env = dict(os.environ, WATTSCHED_CONF=str(self.conf), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        self.env.pop("SLURM_JOB_ID", None)
        self.work = root

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([str(BIN / args[0]), *args[1:]], env=self.env, cwd=self.work, capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode:
            raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
        return result

    def srun_background(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "srun"), *args], env=self.env, cwd=self.work, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    def powercap(self) -> str:
        return self.run("scontrol", "show", "powercap").stdout.strip()

    def reason(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%r").stdout.strip()


def _started(cluster: Leaf) -> Iterator[Leaf]:
    cluster.run("wattsched", "emulate", "--daemon", str(cluster.conf), timeout=180)
    yield cluster
    cluster.run("wattsched", "emulate", "--stop", str(cluster.conf), check=False)


@pytest.fixture
def leaf(tmp_path) -> Iterator[Leaf]:
    yield from _started(Leaf(tmp_path))


@pytest.fixture
def leaf_powersave(tmp_path) -> Iterator[Leaf]:
    """Example 2's configuration: PowerSaveWatts=5, and power saving that reclaims idle nodes' watts
    for jobs blocked by the cap. Its programs only flag the nodes (the seed's emulated nodes had
    no hardware to switch); switching through BMCs is tested in tests/e2e/test_powersave.py."""
    extra = "PowerSaveType=power_save/reclaim\nSuspendTimeout=2\nSuspendProgram=/bin/true\nResumeProgram=/bin/true\n"
    yield from _started(Leaf(tmp_path, extra=extra, node_default="PowerSaveWatts=5"))


def _read_until(stream, pattern: str) -> list[str]:
    lines = []
    while True:
        line = stream.readline()
        assert line, f"srun ended before printing {pattern!r}: {lines}"
        lines.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return lines


def test_example_1_power_counters_and_cap(leaf: Leaf) -> None:
    assert leaf.powercap() == "MinWatts=116150 CurrentWatts=116150 PowerCap=INFINITE AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    first = leaf.srun_background("-n", "10", "-N", "10", "sleep", "100")
    wait_for(lambda: "CurrentWatts=121150 " in leaf.powercap(), 30, what="10-node job counted")
    _interrupt(first)
    wait_for(lambda: "CurrentWatts=116150 " in leaf.powercap(), 30, what="nodes idle again")

    leaf.run("scontrol", "update", "powercap=121000")
    assert leaf.powercap() == "MinWatts=116150 CurrentWatts=116150 PowerCap=121000 AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    blocked, job_id = _blocked_by_power(leaf)
    assert leaf.reason(job_id) == "PowerNotAvail"
    smaller = leaf.srun_background("-n", "10", "-N", "9", "sleep", "100")
    wait_for(lambda: "CurrentWatts=120650 " in leaf.powercap(), 30, what="9-node job counted")
    assert leaf.powercap() == "MinWatts=116150 CurrentWatts=120650 PowerCap=121000 AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    assert leaf.reason(job_id) == "PowerNotAvail"
    leaf.run("scontrol", "update", "powercap=INFINITE")
    assert _read_until(blocked.stderr, r"has been allocated")[-1] == f"srun: job {job_id} has been allocated resources"
    for proc in (blocked, smaller):
        _interrupt(proc)
    # the cap survives a controller restart, and only an administrator may change it
    leaf.run("scontrol", "update", "powercap=200000")
    refused = subprocess.run([str(BIN / "scontrol"), "update", "powercap=1"], capture_output=True, text=True,
                             env=dict(leaf.env, SLURM_JWT=_user_token(leaf)))
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr
    bad = leaf.run("scontrol", "update", "powercap=lots", check=False)
    assert bad.returncode == 1 and "Invalid power cap" in bad.stderr
    assert "PowerCap=200000 " in leaf.powercap()
    assert leaf.run("scontrol", "show", "powercap", "--json").returncode == 0


def test_example_2_power_saving_reclaims_watts_for_a_blocked_job(leaf_powersave: Leaf) -> None:
    leaf = leaf_powersave
    assert leaf.powercap() == "MinWatts=2230 CurrentWatts=116150 PowerCap=INFINITE AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    leaf.run("scontrol", "update", "powercap=121000")
    assert leaf.powercap() == "MinWatts=2230 CurrentWatts=116150 PowerCap=121000 AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    job, job_id = _blocked_by_power(leaf)
    # power saving switches off just enough idle nodes (one: 445 W back for 150 W missing), and once
    # it is powered down the job starts on the first ten nodes
    assert _read_until(job.stderr, r"has been allocated")[-1] == f"srun: job {job_id} has been allocated resources"
    assert leaf.run("squeue", "-h", "-j", job_id, "-o", "%N").stdout.strip() == "leaf[1000-1009]"
    assert leaf.run("sinfo", "-h", "-n", "leaf1255", "-o", "%t").stdout.strip() == "idle~"
    # the seed's node states when it printed its figures: 10 busy, 107 off, the rest idle
    leaf.run("scontrol", "update", "nodename=leaf[1010-1115]", "state=power_down")
    wait_for(lambda: leaf.run("sinfo", "-h", "-p", "virtual", "-o", "%t %D").stdout.split("\n")
             .count("idle~ 107") == 1, 30, what="107 nodes powered down")
    assert leaf.powercap() == "MinWatts=2230 CurrentWatts=73535 PowerCap=121000 AdjustedMaxWatts=143035 " \
                              "MaxWatts=244150"
    states = sorted(leaf.run("sinfo", "-h", "-p", "virtual", "-o", "%t %D %N").stdout.split("\n"))
    assert states == ["", "idle 139 leaf[1116-1254]", "idle~ 107 leaf[1010-1115,1255]", "mix 10 leaf[1000-1009]"]
    _interrupt(job)


@pytest.fixture
def leaf_idle_timeout(tmp_path) -> Iterator[Leaf]:
    """Example 2 as the prototype ran it: Slurm's own power saving (an idle timeout, at most
    SuspendRate switch-offs a minute, the physical partition never), PowerSaveWatts=5."""
    extra = ("SuspendTime=45\nSuspendRate=107\nSuspendExcParts=physical\nSuspendTimeout=2\n"
             "SuspendProgram=/bin/true\nResumeProgram=/bin/true\n")
    yield from _started(Leaf(tmp_path, extra=extra, node_default="PowerSaveWatts=5"))


def test_example_2_exactly_as_the_prototype_with_the_idle_timeout(leaf_idle_timeout: Leaf) -> None:
    # The seed's sequence: Example 1's job has just run on leaf[1000-1009]; the cap is set; a
    # 10-node job is blocked. When the other nodes have been idle for SuspendTime, the first
    # minute's SuspendRate=107 switch-offs take the longest idle in name order, leaf[1010-1116];
    # once they are down the job starts on leaf[1000-1009], and the seed's figures are printed.
    leaf = leaf_idle_timeout
    leaf.run("srun", "-n", "10", "-N", "10", "sleep", "1")  # Example 1's job, on the first ten nodes
    leaf.run("scontrol", "update", "powercap=121000")
    job, job_id = _blocked_by_power(leaf)
    assert _read_until(job.stderr, r"has been allocated")[-1] == f"srun: job {job_id} has been allocated resources"
    assert leaf.run("squeue", "-h", "-j", job_id, "-o", "%N").stdout.strip() == "leaf[1000-1009]"
    states = sorted(leaf.run("sinfo", "-h", "-p", "virtual", "-o", "%t %D %N").stdout.split("\n"))
    assert states == ["", "idle 139 leaf[1117-1255]", "idle~ 107 leaf[1010-1116]", "mix 10 leaf[1000-1009]"]
    assert leaf.powercap() == "MinWatts=2230 CurrentWatts=73535 PowerCap=121000 AdjustedMaxWatts=143035 " \
                              "MaxWatts=244150"
    _interrupt(job)


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C twice within a second, as a user would end a step (one prints the tasks' states, as
    Slurm's srun): srun ends its step and gives its allocation back."""
    for _ in range(100):
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(0.3)
            return
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError("srun did not end on Ctrl-C")


def _user_token(leaf: Leaf) -> str:
    from wattsched import auth, config

    conf = config.load(str(leaf.conf))
    return auth.user_token(auth.read_key(conf.key_file), *ALICE)


def test_example_3_power_reservation(leaf: Leaf) -> None:
    created = leaf.run("scontrol", "create", "res", "FLAG=LICENSE_ONLY", "starttime=now+20minutes", "duration=3",
                       "Watts=123150", "Users=root").stdout.strip()
    assert created == "Reservation created: root_1"
    shown = leaf.run("scontrol", "show", "res").stdout
    assert re.search(r"^ReservationName=root_1 StartTime=\S+ EndTime=\S+ Duration=00:03:00$", shown, re.M)
    assert "   Nodes= NodeCnt=0 CoreCnt=0 Features=(null) PartitionName=virtual Flags=LICENSE_ONLY" in shown
    assert "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) " \
           "Watts=123150" in shown
    assert leaf.powercap() == "MinWatts=116150 CurrentWatts=116150 PowerCap=INFINITE AdjustedMaxWatts=244150 " \
                              "MaxWatts=244150"
    long = leaf.run("srun", "--immediate", "-t", "40", "-n", "10", "-N", "10", "sleep", "100", check=False)
    assert long.returncode == 1
    assert "srun: error: Unable to allocate resources: Required power at least partially reserved" in long.stderr
    short = leaf.run("srun", "--immediate", "-t", "15", "-n", "10", "-N", "10", "true", check=False)
    assert short.returncode == 0, short.stderr
    # its nodes count at MaxWatts until they are clean (COMPLETING): only then is the draw idle again
    wait_for(lambda: leaf.powercap().startswith("MinWatts=116150 CurrentWatts=116150 "), 30,
             what="the short job's nodes clean and idle")
    nine = leaf.run("srun", "--immediate", "-t", "30", "-n", "10", "-N", "9", "true", check=False)
    assert nine.returncode == 0, nine.stderr
    waiting = leaf.srun_background("-t", "20", "-n", "10", "-N", "10", "true")
    said = _read_until(waiting.stderr, r"queued and waiting")
    assert said[0] == "srun: Required power at least partially reserved"
    leaf.run("scontrol", "delete", "ReservationName=root_1")
    assert _read_until(waiting.stderr, r"has been allocated")[-1].endswith("has been allocated resources")
    assert waiting.wait(60) == 0


def test_power_fit_runs_a_job_at_a_lower_frequency(tmp_path) -> None:
    from wattsched.harness.testing import Cluster

    c = Cluster(tmp_path, extra="PowerCap=550",
                node_extra="IdleWatts=100 MaxWatts=300 CpuFreqWatts=2000000:300,1500000:220,1000000:160").start()
    try:
        assert c.run("scontrol", "show", "powercap").stdout.strip() == \
            "MinWatts=400 CurrentWatts=400 PowerCap=550 AdjustedMaxWatts=1200 MaxWatts=1200"
        fitted = c.sbatch("--power-fit", "--exclusive", "-t", "5", "-o", "fit-%j.out",
                          "--wrap", 'echo "freq=$SLURM_CPU_FREQ_REQ"; sleep 4')
        assert c.wait_state(fitted, "RUNNING")["cpu_freq_khz"] == 1_500_000
        assert "CurrentWatts=520 " in c.run("scontrol", "show", "powercap").stdout
        plain = c.sbatch("--exclusive", "-t", "5", "--wrap", "true")
        wait_for(lambda: c.job(plain)["reason"] == "PowerNotAvail", 15, what="plain job held by the cap")
        c.wait_state(fitted, "COMPLETED")
        assert (c.work / f"fit-{fitted}.out").read_text().strip() == "freq=1500000"
        assert c.job(plain)["reason"] == "PowerNotAvail"  # 400 + 200 W never fits under 550 W at full speed
        c.run("scontrol", "update", "powercap=INFINITE")
        assert c.wait_state(plain, "COMPLETED")["cpu_freq_khz"] is None
        c.accounted(fitted)
        sacct = c.run("sacct", "-X", "-n", "-P", "-j", str(fitted), "-o", "JobID,ReqCPUFreq").stdout.strip()
        assert sacct == f"{fitted}|1.50G"  # ReqCPUFreq is ReqCPUFreqMax in Slurm (vestigial)
        both = c.run("sbatch", "--power-fit", "--cpu-freq=high", "--wrap", "true", check=False)
        assert both.returncode == 1 and "mutually exclusive" in both.stderr
        bogus = c.run("sbatch", "--cpu-freq=fast", "--wrap", "true", check=False)
        assert bogus.returncode == 1 and "Invalid --cpu-freq argument: fast" in bogus.stderr
    finally:
        c.stop()


def _blocked_by_power(leaf: Leaf) -> tuple[subprocess.Popen, str]:
    """A 10-node srun that the cap keeps waiting: srun says why, then that it is queued."""
    job = leaf.srun_background("-n", "10", "-N", "10", "sleep", "100")
    said = _read_until(job.stderr, r"queued and waiting")
    assert said[0] == "srun: Required power not available now"
    return job, re.search(r"srun: job (\d+) queued and waiting for resources", said[1]).group(1)


def test_jobs_admitted_at_their_predicted_power_run_more_under_the_same_cap(tmp_path) -> None:
    """PowerCapAdmission=predicted: a job whose earlier runs drew little is counted at that (plus
    PowerCapMargin) instead of MaxWatts, so more such jobs run under the same cap, and the
    metered draw stays under it; a job with no history is still counted at MaxWatts."""
    from wattsched.harness.testing import Cluster

    c = Cluster(tmp_path, extra="\n".join(["AcctGatherEnergyType=acct_gather_energy/emulated",
                                           "AcctGatherNodeFreq=1", "PowerCap=INFINITE", "PriorityCalcPeriod=0:01",
                                           "PowerCapAdmission=predicted", "PowerCapMargin=0.2"]),
                node_extra="IdleWatts=100 MaxWatts=300").start()
    light = ("--exclusive", "-N", "1", "-J", "light", "-o", "/dev/null", "--wrap", "sleep 8")
    try:
        first = c.sbatch(*light)
        c.wait_state(first, "COMPLETED", timeout=60)
        c.accounted(first)

        def expected() -> float | None:  # the history is read every PriorityCalcPeriod (1 s here)
            said = c.run("sbatch", "--test-only", *light).stderr
            found = re.search(r"use [\d.]+ kJ at (\d+) W \(as its last run\)", said)
            return float(found.group(1)) if found else None

        watts = wait_for(expected, 30, what="the light job's prediction")
        assert 100 <= watts < 150  # a sleeping node draws about its idle watts
        # four idle nodes, 400 W: at MaxWatts one job fits under 650 W (600), two would not (800)
        c.run("scontrol", "update", "powercap=650")
        jobs = [c.sbatch(*light) for _ in range(3)]
        for job in jobs:
            c.wait_state(job, "RUNNING", timeout=30)
        modelled = int(re.search(r"CurrentWatts=(\d+)", c.run("scontrol", "show", "powercap").stdout).group(1))
        assert modelled <= 400 + 3 * (watts * 1.2 - 100) + 3  # each node counted at its prediction and margin
        heavy = c.sbatch("--exclusive", "-N", "1", "-J", "heavy", "-o", "/dev/null", "--wrap", "true")
        wait_for(lambda: c.job(heavy)["reason"] == "PowerNotAvail", 15, 0.2, what="the unknown job held at MaxWatts")
        draws = []

        def all_done() -> bool:
            draws.append(c.api("GET", "/v1/dashboard/power").json()["measured_watts"])
            return all(c.job(j)["state"] == "COMPLETED" for j in jobs)

        wait_for(all_done, 60, 0.5, what="the light jobs done")
        assert max(draws) <= 650, draws
        c.wait_state(heavy, "COMPLETED", timeout=30)
    finally:
        c.stop()

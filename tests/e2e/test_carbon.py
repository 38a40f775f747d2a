"""The grid's carbon intensity on an emulated cluster, through the real commands: a job's emissions
in sacct and sreport, --deadline as Slurm's, and the priority factor that puts flexible work
(a deadline with slack) ahead in a green hour."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster, wait_for

GREEN = 1000.0  # gCO2e/kWh now, the greenest of the day around it (high: a test job's few joules show)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("carbon")
    now = time.time()
    (root / "intensity.csv").write_text(
        "time,gco2_per_kwh\n" + "\n".join(f"{now + h * 3600:.0f},{v}" for h, v in ((-12, 4000), (-1, GREEN),
                                                                                    (6, 3000))) + "\n")
    c = Cluster(root, nodes=2, cpus=1, extra="\n".join([
        "AcctGatherEnergyType=acct_gather_energy/emulated", "AcctGatherNodeFreq=1",
        f"CarbonIntensity={root / 'intensity.csv'}", "PriorityType=priority/multifactor",
        "PriorityWeightAge=100", "PriorityWeightCarbon=10000"]), node_extra="IdleWatts=95 MaxWatts=190").start()
    yield c
    c.stop()


def test_a_jobs_emissions_are_its_energy_at_the_grids_intensity(cluster: Cluster) -> None:
    c = cluster
    job = c.sbatch("-o", "/dev/null", "--wrap", "python3 -c 'for i in range(60000000): pass'")
    c.wait_state(job, "COMPLETED", timeout=60)

    def accounted() -> list[str] | None:
        row = c.run("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "ConsumedEnergyRaw,CO2eRaw,CO2e").stdout.strip()
        fields = row.split("|")
        return fields if len(fields) == 3 and fields[0] not in ("", "0") and fields[1] else None

    joules, grams, shown = wait_for(accounted, 60, what="the job's energy and emissions accounted")
    assert float(grams) == pytest.approx(int(joules) / 3.6e6 * GREEN, abs=0.002)
    assert shown == str(round(float(grams)))  # as ConsumedEnergy prints: grams under 1000
    report = c.run("sreport", "-n", "-P", "user", "TopUsage", "start=now-1hours", "end=now+1hours",
                   "--tres=energy,co2e").stdout.strip().splitlines()
    used = {line.split("|")[4]: float(line.split("|")[5]) for line in report}
    assert used["co2e"] == pytest.approx(float(grams), abs=1) and used["energy"] >= int(joules)
    bad = c.run("sreport", "user", "TopUsage", "--tres=carbon", check=False)
    assert bad.returncode == 1 and "Invalid TRES: carbon (cpu, energy, co2e)" in bad.stderr


def test_deadline_as_slurm_refused_or_removed_when_it_cannot_be_met(cluster: Cluster) -> None:
    c = cluster
    too_close = c.run("sbatch", "-t", "5", "--deadline=now+120", "--wrap", "true", check=False)
    assert too_close.returncode == 1
    assert "Requested time limit is invalid (missing or exceeds some limit)" in too_close.stderr
    crossed = c.run("sbatch", "--begin=now+1hour", "--deadline=now+10minutes", "--wrap", "true", check=False)
    assert crossed.returncode == 1 and "Incompatible begin and deadline time specification" in crossed.stderr
    # held, so it cannot start: two seconds later it could no longer end before its deadline
    held = c.sbatch("-H", "-t", "1", "--deadline=now+62", "--wrap", "true")
    shown = c.run("scontrol", "show", "job", str(held)).stdout
    assert re.search(r"Deadline=\d{4}-\d\d-\d\dT", shown)
    done = c.wait_state(held, "DEADLINE", timeout=30)
    assert done["reason"] == "DeadLine" and done["exit_code"] == 1
    sacct = c.accounted(held)
    assert sacct and c.run("sacct", "-X", "-n", "-P", "-j", str(held), "-o", "State,ExitCode").stdout.strip() == \
        "DEADLINE|1:0"
    assert c.run("squeue", "-h", "-t", "DL", "-j", str(held)).returncode == 0


def test_flexible_work_is_ahead_in_a_green_hour(cluster: Cluster) -> None:
    c = cluster
    blockers = [c.sbatch("-o", "/dev/null", "--wrap", "sleep 60") for _ in range(2)]
    try:
        for job in blockers:
            c.wait_state(job, "RUNNING")
        rigid = c.sbatch("-t", "10", "-o", "/dev/null", "--wrap", "true")
        flexible = c.sbatch("-t", "10", "--deadline=now+2days", "-o", "/dev/null", "--wrap", "true")
        rows = c.run("sprio", "-h", "-o", "%i %Y %G", "-j", f"{rigid},{flexible}").stdout.split("\n")
        found = {int(r.split()[0]): (int(r.split()[1]), int(r.split()[2])) for r in rows if r.strip()}
        assert found[flexible][1] == 10000 and found[rigid][1] == 0  # a full day of slack, the greenest hour
        assert found[flexible][0] > found[rigid][0]
        factor = c.run("sprio", "-h", "-n", "-o", "%i %g", "-j", str(flexible)).stdout.split()
        assert factor == [str(flexible), "1.0000000"]
    finally:
        c.run("scancel", *map(str, blockers), check=False)

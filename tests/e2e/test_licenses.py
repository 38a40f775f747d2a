"""Licenses on a real cluster, through the real CLI and REST API: slurm.conf's Licenses=, jobs
asking with -L, waiting with reason Licenses while others hold them, scontrol show licenses,
squeue %W and -L, scontrol update, SLURM_JOB_LICENSES, sacct's Licenses, and bad requests refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster, wait_for

LICENSES = ("Licenses=fluent:2,ansys\nSchedulerType=sched/backfill\n"
            "SchedulerParameters=bf_interval=1,bf_resolution=1")


@pytest.fixture(scope="module")
def lic_cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("lic"), extra=LICENSES).start()
    yield running
    running.stop()


def _licenses(c: Cluster) -> dict[str, dict]:
    shown = json.loads(c.run("scontrol", "--json", "show", "licenses").stdout)["licenses"]
    return {lic["LicenseName"]: lic for lic in shown}


def test_jobs_share_the_licenses_and_wait_for_them(lic_cluster: Cluster) -> None:
    c = lic_cluster
    assert c.run("scontrol", "show", "licenses").stdout == (
        "LicenseName=ansys\n    Total=1 Used=0 Free=1 Reserved=0 Remote=no\n"
        "LicenseName=fluent\n    Total=2 Used=0 Free=2 Reserved=0 Remote=no\n")
    holder = c.sbatch("-L", "fluent:2", "-o", "holder.out", "--wrap", "echo $SLURM_JOB_LICENSES; sleep 300")
    c.wait_state(holder, "RUNNING")
    waiting = c.sbatch("-L", "fluent", "--wrap", "true")
    other = c.sbatch("-L", "ansys", "--wrap", "sleep 300")  # another license: not held back
    c.wait_state(other, "RUNNING")
    wait_for(lambda: c.job(waiting)["reason"] == "Licenses", 20, what="the job waits for its license")
    assert c.run("scontrol", "-o", "show", "licenses=fluent").stdout == \
        "LicenseName=fluent Total=2 Used=2 Free=0 Reserved=0 Remote=no\n"
    assert c.run("scontrol", "show", "license", "nosuch").stdout == ""
    assert _licenses(c)["ansys"] == {"LicenseName": "ansys", "Total": 1, "Used": 1, "Free": 0, "Remote": False,
                                     "Reserved": 0, "LastConsumed": 0, "LastDeficit": 0, "LastUpdate": 0}
    listed = c.run("squeue", "-h", "-o", "%i %W %r", "-L", "fluent").stdout.split("\n")
    assert listed[:2] == [f"{holder} fluent:2 None", f"{waiting} fluent Licenses"]
    assert "Licenses=fluent:2 " in c.run("scontrol", "show", "job", str(holder)).stdout
    wait_for(lambda: (c.work / "holder.out").read_text().strip() == "fluent:2", 20, what="SLURM_JOB_LICENSES")
    # the holder ends: the waiting job runs, and sacct keeps what each asked for
    c.run("scancel", str(holder), str(other))
    c.wait_state(waiting, "COMPLETED")
    record = c.run("sacct", "-n", "-X", "-P", "-j", str(waiting), "-o", "JobID,Licenses").stdout.split()
    assert record == [f"{waiting}|fluent"]
    rest = c.api("GET", "/slurm/v0.0.44/licenses").json()
    assert {lic["LicenseName"]: lic["Nodes"] for lic in rest["licenses"]} == {"ansys": "", "fluent": ""}
    assert c.sacct_json(waiting)["jobs"][0]["licenses"] == "fluent"


def test_a_pending_jobs_licenses_change_and_a_running_jobs_only_by_an_administrator(lic_cluster: Cluster) -> None:
    c = lic_cluster
    alice = c.user_env()
    held = c.sbatch("-H", "-L", "ansys", "--wrap", "true", env=alice)
    c.run("scontrol", "update", f"JobId={held}", "Licenses=fluent:2", env=alice)
    assert c.job(held)["licenses"] == "fluent:2"
    refused = c.run("scontrol", "update", f"JobId={held}", "Licenses=fluent:3", env=alice, check=False)
    assert refused.returncode == 1 and "Invalid license specification" in refused.stderr
    assert c.job(held)["licenses"] == "fluent:2"
    c.run("scancel", str(held))
    running = c.sbatch("-L", "ansys", "--wrap", "sleep 300")
    c.wait_state(running, "RUNNING")
    c.run("scontrol", "update", f"JobId={running}", "Licenses=fluent")  # root: may change it
    assert _licenses(c)["fluent"]["Used"] == 1 and _licenses(c)["ansys"]["Used"] == 0
    c.run("scancel", str(running))


@pytest.mark.parametrize("spec", ["nosuch", "fluent:3", "fluent:x", "fluent ansys", ",".join(["f"] * 300)])
def test_bad_license_requests_are_refused_and_change_nothing(lic_cluster: Cluster, spec: str) -> None:
    c = lic_cluster
    before = len(c.jobs())
    refused = c.run("sbatch", "-L", spec, "--wrap", "true", check=False, env=c.user_env())
    assert refused.returncode == 1
    assert "sbatch: error: Batch job submission failed: Invalid license specification" in refused.stderr
    assert len(c.jobs()) == before


def test_a_license_request_too_long_is_refused_before_any_work(lic_cluster: Cluster) -> None:
    c = lic_cluster
    answer = c.api("POST", "/v1/jobs", token=c.token(64100, "alice"),
                   json={"script": "#!/bin/sh\ntrue\n", "licenses": "f," * 10_000})
    assert answer.status_code == 422

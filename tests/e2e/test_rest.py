"""Slurm's REST API: jobs submitted, listed, inspected, updated and cancelled, nodes, partitions,
reservations and the accounting read through slurmrestd's paths with X-SLURM-USER-NAME /
X-SLURM-USER-TOKEN, in every data_parser version served; every answer checked (schemathesis)
against the OpenAPI document Slurm's own slurmrestd publishes for its version (tests/slurm-openapi/)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from wattsched import dataversions
from wattsched.harness.testing import ALICE, Cluster, wait_for

schemathesis = pytest.importorskip("schemathesis")
V = "v0.0.40"
SLURM_DOCUMENTS = Path(__file__).parent / "slurm-openapi"


@pytest.fixture(scope="module")
def rest() -> Iterator[Cluster]:
    # in a folder other users may pass through (pytest's are root's alone): jobs run as nobody here
    root = Path(tempfile.mkdtemp(prefix="wattsched-rest-"))
    os.chmod(root, 0o755)
    running = Cluster(root, extra="AcctGatherEnergyType=acct_gather_energy/emulated\nAcctGatherNodeFreq=1\n"
                                  "EmulatedNodes=yes", node_extra="IdleWatts=100 MaxWatts=300").start()
    yield running
    running.stop()
    shutil.rmtree(root, ignore_errors=True)


def slurm_document(version: str) -> dict:
    """Slurm's OpenAPI document for the version. Its generator lists nested required fields by
    their path ("nodes/count" in job_resources), which no object can have under that name (Slurm's
    own answers fail it too): those entries are left out, the nested objects keep their own."""
    with gzip.open(SLURM_DOCUMENTS / f"{version}.json.gz", "rt") as handle:
        document = json.load(handle)
    for schema in document["components"]["schemas"].values():
        if "required" in schema:
            schema["required"] = [name for name in schema["required"] if "/" not in name]
    return document


class Client:
    """A slurmrestd client as tools write them: the user's name and token in Slurm's headers, and
    each answer validated against Slurm's OpenAPI document for the version of its path."""

    def __init__(self, cluster: Cluster, user: str, token: str, version: str = V):
        self.base = f"http://127.0.0.1:{cluster.port}"
        self.headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        self.schema = schemathesis.openapi.from_dict(slurm_document(version))

    def call(self, method: str, path: str, status: int = 200, **kwargs) -> dict:
        response = httpx.request(method, self.base + path, headers=self.headers, timeout=30, **kwargs)
        assert response.status_code == status, response.text
        template = next(p for p in self.schema.raw_schema["paths"] if _matches(p, path.split("?")[0]))
        if status == 200:
            self.schema[template][method.upper()].validate_response(response)
        return response.json()


def _matches(template: str, path: str) -> bool:
    parts, given = template.rstrip("/").split("/"), path.rstrip("/").split("/")
    return len(parts) == len(given) and all(p == g or p.startswith("{") for p, g in zip(parts, given, strict=True))


def token_of(cluster: Cluster, user: str, uid: int) -> str:
    """The token ``scontrol token`` prints for the user (SLURM_JWT=...)."""
    printed = cluster.run("scontrol", "token", env=cluster.user_env(uid, user)).stdout.strip()
    return printed.removeprefix("SLURM_JWT=")


def job_desc(work: Path, **extra) -> dict:
    return {"script": "#!/bin/sh\necho rest $SLURM_JOB_ID $(id -un)\n",
            "job": {"name": "restjob", "current_working_directory": str(work), "environment": ["PATH=/bin:/usr/bin"],
                    "standard_output": str(work / "out-%j.txt"), "time_limit": {"set": True, "number": 5},
                    "tasks": 1, **extra}}


def test_submit_list_show_and_account_a_job(rest: Cluster) -> None:
    # pytest's tmp_path is root's alone: nobody writes its output where nobody may
    work = Path(tempfile.mkdtemp(prefix="wattsched-rest-"))
    os.chmod(work, 0o1777)
    # root's token acting for another user (slurmrestd's rule for SlurmUser): the job is nobody's
    client = Client(rest, "nobody", rest.token())
    assert client.call("GET", f"/slurm/{V}/ping")["pings"][0]["pinged"] == "UP"
    reply = client.call("POST", f"/slurm/{V}/job/submit", json=job_desc(work, memory_per_node={"number": 100}))
    job_id = reply["job_id"]
    assert reply["result"]["job_id"] == job_id and reply["errors"] == []
    assert reply["meta"]["client"]["user"] == "nobody"
    rest.wait_state(job_id, "COMPLETED")
    assert (work / f"out-{job_id}.txt").read_text() == f"rest {job_id} nobody\n"
    shown = client.call("GET", f"/slurm/{V}/job/{job_id}")["jobs"][0]
    assert shown["user_name"] == "nobody" and shown["name"] == "restjob" and shown["job_state"] == ["COMPLETED"]
    assert shown["time_limit"] == {"set": True, "infinite": False, "number": 5}
    assert shown["memory_per_node"]["number"] == 100
    assert job_id in [j["job_id"] for j in client.call("GET", f"/slurm/{V}/jobs")["jobs"]]
    wait_for(lambda: rest.accounted(job_id)[0]["consumed_energy_j"], 30, what="energy accounted")
    db = client.call("GET", f"/slurmdb/{V}/job/{job_id}")["jobs"][0]
    assert db["user"] == "nobody" and db["state"]["current"] == ["COMPLETED"]
    energy = next(t for t in db["tres"]["allocated"] if t["type"] == "energy")
    assert energy["count"] == rest.accounted(job_id)[0]["consumed_energy_j"] > 0
    listed = client.call("GET", f"/slurmdb/{V}/jobs?users=nobody&state=COMPLETED")["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]
    shutil.rmtree(work)


def test_update_and_cancel_through_the_api(rest: Cluster, tmp_path: Path) -> None:
    client = Client(rest, "root", rest.token())
    held = client.call("POST", f"/slurm/{V}/job/submit", json=job_desc(tmp_path, hold=True))["job_id"]
    assert rest.job(held)["reason"] == "JobHeldUser"
    client.call("POST", f"/slurm/{V}/job/{held}", json={"time_limit": {"number": 7}, "comment": "via rest"})
    assert rest.job(held)["time_limit_min"] == 7 and rest.job(held)["comment"] == "via rest"
    client.call("DELETE", f"/slurm/{V}/job/{held}")
    assert rest.job(held)["state"] == "CANCELLED"
    sleeper = client.call("POST", f"/slurm/{V}/job/submit",
                          json={**job_desc(tmp_path), "script": "#!/bin/sh\nsleep 300\n"})["job_id"]
    rest.wait_state(sleeper, "RUNNING")
    client.call("DELETE", f"/slurm/{V}/job/{sleeper}?signal=SIGKILL")
    rest.wait_state(sleeper, {"CANCELLED", "FAILED"})


def test_nodes_partitions_reservations_diag_and_associations(rest: Cluster) -> None:
    token = token_of(rest, "root", 0)
    client = Client(rest, "root", token)
    nodes = client.call("GET", f"/slurm/{V}/nodes")["nodes"]
    assert [n["name"] for n in nodes] == ["n01", "n02", "n03", "n04"]
    wait_for(lambda: client.call("GET", f"/slurm/{V}/node/n01")["nodes"][0]["energy"]["current_watts"]["set"], 20,
             what="n01 metered")
    client.call("POST", f"/slurm/{V}/node/n02", json={"state": ["DRAIN"], "reason": "rest drain"})
    drained = client.call("GET", f"/slurm/{V}/node/n02")["nodes"][0]
    assert "DRAIN" in drained["state"] and drained["reason"] == "rest drain"
    client.call("POST", f"/slurm/{V}/node/n02", json={"state": ["RESUME"]})
    assert client.call("GET", f"/slurm/{V}/node/nope", status=404)["errors"][0]["error_number"] == 404
    parts = client.call("GET", f"/slurm/{V}/partitions")["partitions"]
    assert parts[0]["name"] == "debug" and parts[0]["nodes"]["total"] == 4
    assert client.call("GET", f"/slurm/{V}/partition/debug")["partitions"][0]["cpus"]["total"] == 16
    rest.run("scontrol", "create", "reservation", "ReservationName=restres", "StartTime=now+1hour",
             "Duration=10", "Nodes=n04", "Users=root")
    resv = client.call("GET", f"/slurm/{V}/reservation/restres")["reservations"][0]
    assert resv["node_list"] == "n04" and resv["users"] == "root"
    assert [r["name"] for r in client.call("GET", f"/slurm/{V}/reservations")["reservations"]] == ["restres"]
    stats = client.call("GET", f"/slurm/{V}/diag")["statistics"]
    assert stats["schedule_cycle_total"] > 0
    rest.run("sacctmgr", "-i", "add", "account", "physics", "Description=physicists")
    rest.run("sacctmgr", "-i", "add", "user", "carol", "Account=physics")
    accounts = client.call("GET", f"/slurmdb/{V}/accounts")["accounts"]
    assert {"physics", "root"} <= {a["name"] for a in accounts}
    assert client.call("GET", f"/slurmdb/{V}/account/physics")["accounts"][0]["description"] == "physicists"
    assert client.call("GET", f"/slurmdb/{V}/user/carol")["users"][0]["default"]["account"] == "physics"
    assocs = client.call("GET", f"/slurmdb/{V}/associations")["associations"]
    assert any(a["user"] == "carol" and a["account"] == "physics" for a in assocs)


def test_refusals_come_as_slurm_errors(rest: Cluster, tmp_path: Path) -> None:
    alice = Client(rest, "alice", rest.token(*ALICE))
    root_job = rest.sbatch("-H", "--wrap", "true")
    refused = alice.call("DELETE", f"/slurm/{V}/job/{root_job}", status=403)
    assert refused["errors"][0]["error"] == "Access/permission denied"
    assert rest.job(root_job)["state"] == "PENDING"
    assert alice.call("POST", f"/slurm/{V}/node/n01", status=403, json={"state": ["DRAIN"]})["errors"]
    before = len(rest.jobs())
    unknown = alice.call("POST", f"/slurm/{V}/job/submit", status=422, json=job_desc(tmp_path, gpus_per_node=2))
    assert "gpus_per_node" in str(unknown)
    assert alice.call("POST", f"/slurm/{V}/job/submit", status=400,
                      json={"job": {"current_working_directory": "/tmp"}})["errors"]
    assert len(rest.jobs()) == before
    # a token used under another user's name is refused; so are a missing and a forged token
    wrong = httpx.get(f"{alice.base}/slurm/{V}/jobs", timeout=10,
                      headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": rest.token(*ALICE)})
    assert wrong.status_code == 401
    assert httpx.get(f"{alice.base}/slurm/{V}/jobs", timeout=10).status_code == 401
    forged = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": "e30.e30.AAAA"}
    assert httpx.get(f"{alice.base}/slurm/{V}/jobs", headers=forged, timeout=10).status_code == 401
    # the same rules in every version, with the trailing slash too
    for version in dataversions.VERSIONS:
        for path in (f"/slurm/{version}/jobs/", f"/slurmdb/{version}/jobs"):
            assert httpx.get(f"{alice.base}{path}", headers=forged, timeout=10).status_code == 401
        refused = httpx.delete(f"{alice.base}/slurm/{version}/job/{root_job}/", headers=alice.headers, timeout=10)
        assert refused.status_code == 403 and refused.json()["errors"][0]["error"] == "Access/permission denied"
        assert refused.json()["meta"]["plugin"]["data_parser"] == f"data_parser/{version}"
    assert rest.job(root_job)["state"] == "PENDING"
    rest.run("scancel", str(root_job))


@pytest.mark.parametrize("version", dataversions.VERSIONS)
def test_every_version_answers_in_slurms_own_layout(rest: Cluster, version: str) -> None:
    """Each path of each version, with a pending, a running and a finished job, a reservation and
    the accounting, validated against Slurm's document for that version."""
    work = Path(tempfile.mkdtemp(prefix="wattsched-rest-"))
    os.chmod(work, 0o1777)
    client = Client(rest, "root", rest.token(), version)
    slurm, slurmdb = f"/slurm/{version}", f"/slurmdb/{version}"
    done = client.call("POST", f"{slurm}/job/submit", json=job_desc(work))["job_id"]
    runs = client.call("POST", f"{slurm}/job/submit",
                       json={**job_desc(work), "script": "#!/bin/sh\nsleep 300\n"})["job_id"]
    held = client.call("POST", f"{slurm}/job/submit", json=job_desc(work, hold=True))["job_id"]
    rest.wait_state(done, "COMPLETED")
    rest.wait_state(runs, "RUNNING")
    # Slurm's document writes some paths with a trailing slash: both forms answer
    listed = client.call("GET", f"{slurm}/jobs/")["jobs"]
    assert {done, runs, held} <= {j["job_id"] for j in listed}
    running = client.call("GET", f"{slurm}/job/{runs}")["jobs"][0]
    if version >= "v0.0.41":
        assert running["job_resources"]["nodes"]["count"] == 1 and running["job_resources"]["cpus"] == 1
    else:
        assert running["job_resources"]["allocated_hosts"] == 1
    client.call("POST", f"{slurm}/job/{held}", json={"comment": f"seen in {version}"})
    assert rest.job(held)["comment"] == f"seen in {version}"
    signalled = client.call("DELETE", f"{slurm}/job/{runs}")
    if version >= "v0.0.42":
        assert signalled["status"][0]["job_id"]["number"] == runs
    client.call("DELETE", f"{slurm}/job/{held}")
    pings = client.call("GET", f"{slurm}/ping")["pings"]
    assert pings[0]["responding"] if version >= "v0.0.42" else pings[0]["pinged"] == "UP"
    client.call("GET", f"{slurm}/diag")
    assert [n["name"] for n in client.call("GET", f"{slurm}/nodes")["nodes"]] == ["n01", "n02", "n03", "n04"]
    client.call("GET", f"{slurm}/node/n01")
    client.call("GET", f"{slurm}/partitions")
    client.call("GET", f"{slurm}/partition/debug")
    name = f"resv{version.replace('.', '')}"
    rest.run("scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now+3hours",
             "Duration=10", "Nodes=n03", "Users=root")
    assert client.call("GET", f"{slurm}/reservation/{name}")["reservations"][0]["node_list"] == "n03"
    client.call("GET", f"{slurm}/reservations")
    rest.run("scontrol", "delete", f"ReservationName={name}")
    wait_for(lambda: rest.accounted(done) and rest.accounted(done)[0]["consumed_energy_j"], 30, what="accounted")
    accounted = client.call("GET", f"{slurmdb}/job/{done}")["jobs"][0]
    assert accounted["state"]["current"] == ["COMPLETED"] and accounted["steps"]
    client.call("GET", f"{slurmdb}/jobs?users=root")
    client.call("GET", f"{slurmdb}/associations")
    client.call("GET", f"{slurmdb}/accounts")
    client.call("GET", f"{slurmdb}/account/root")
    client.call("GET", f"{slurmdb}/users")
    client.call("GET", f"{slurmdb}/user/root")
    meta = client.call("GET", f"{slurm}/ping/")["meta"]
    assert meta["plugin"]["data_parser"] == f"data_parser/{version}"
    shutil.rmtree(work, ignore_errors=True)


def test_the_openapi_document_lists_every_version(rest: Cluster) -> None:
    base = f"http://127.0.0.1:{rest.port}"
    document = httpx.get(f"{base}/openapi/v3").json()
    # slurmrestd serves the one document at all three paths; clients read one or another
    assert all(httpx.get(f"{base}{path}").json() == document for path in ("/openapi", "/openapi.json"))
    for version in dataversions.VERSIONS:
        assert {f"/slurm/{version}/jobs", f"/slurmdb/{version}/jobs"} <= set(document["paths"])
    refused = httpx.get(f"{base}/slurm/v0.0.39/jobs", headers={"X-SLURM-USER-TOKEN": rest.token()}, timeout=10)
    assert refused.status_code == 404

"""Public tools written for Slurm, unchanged, driving the emulated cluster: through its commands,
parsl's SlurmProvider, snakemake with snakemake-executor-plugin-slurm, reportseff, submitit and
dask-jobqueue; through Slurm's REST API with their default settings, pyslurmutils (data_parser
v0.0.45) and slurpy (a client generated from Slurm's OpenAPI document, whose models check every
answer's types and enums).

They are installed from PyPI into a virtual environment of their own (``.venv-clients``, the
``clients`` extra of pyproject.toml): they pin packages below what wattsched uses. Without network
the tests are skipped, saying so (``-m "not clients"`` skips them outright). The jobs they submit
run their Python code from that environment, as on a cluster where users bring their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import BIN, Cluster, wait_for

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-clients"
pytestmark = [pytest.mark.clients, pytest.mark.slow]


def _requirements() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]["optional-dependencies"]["clients"]


@pytest.fixture(scope="module")
def clients() -> Path:
    """The clients' virtual environment, made (or brought up to date with pyproject.toml) once."""
    wanted = "\n".join(_requirements())
    stamp = VENV / "requirements.txt"
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        done = subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *_requirements()],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            pytest.skip(f"the public client packages could not be installed from PyPI (no network?): "
                        f"{done.stderr.strip().splitlines()[-1:]}")
        stamp.write_text(wanted)
    return VENV / "bin"


@pytest.fixture(scope="module")
def metered(tmp_path_factory) -> Iterator[Cluster]:
    """A cluster with emulated energy meters (reportseff reads energy) and accounting."""
    cluster = Cluster(tmp_path_factory.mktemp("clients"), nodes=4, cpus=4, node_extra="IdleWatts=100 MaxWatts=200",
                      extra="EmulatedNodes=YES\nAcctGatherEnergyType=acct_gather_energy/emulated\n"
                            "AcctGatherNodeFreq=1\n").start()
    yield cluster
    cluster.stop()


def _env(cluster: Cluster, clients: Path) -> dict[str, str]:
    """wattsched's commands first on PATH, then the clients' Python and scripts."""
    env = dict(cluster.env)
    env["PATH"] = f"{BIN}:{clients}:{env.get('PATH', '/usr/bin:/bin')}"
    env.pop("PYTHONPATH", None)
    return env


def _python(clients: Path, cluster: Cluster, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    run = subprocess.run([str(clients / "python"), "-c", textwrap.dedent(code)], env=_env(cluster, clients),
                         cwd=cluster.work, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"stdout: {run.stdout}\nstderr: {run.stderr}"
    return run


# parsl's SlurmProvider on its own: it submits a block, then asks sacct for its state until it ends;
# the nodes are busy at first, and freed (scancel of the blocker) once parsl has seen PENDING
PARSL = """
import json, subprocess, time
from parsl.providers import SlurmProvider
from parsl.launchers import SingleNodeLauncher
provider = SlurmProvider(partition="debug", nodes_per_block=1, init_blocks=0, walltime="00:05:00",
                         launcher=SingleNodeLauncher(), cmd_timeout=60)
provider.script_dir = {script_dir!r}
job = provider.submit("sleep 3", 1)
seen = []
deadline = time.time() + 120
while time.time() < deadline:
    state = provider.status([job])[0].state.name
    if not seen or seen[-1] != state:
        seen.append(state)
        if state == "PENDING":
            subprocess.run(["scancel", "{blocker}"], check=True)
    if state == "COMPLETED":
        break
    time.sleep(0.2)
print(json.dumps({{"job": job, "seen": seen, "via": provider._cmd}}))
"""


def test_parsl_slurm_provider_sees_block_states_through_sacct(clients: Path, metered: Cluster) -> None:
    blocker = metered.sbatch("-N", "4", "--exclusive", "-J", "blocker", "--wrap", "sleep 600")
    metered.wait_state(blocker, "RUNNING")
    try:
        run = _python(clients, metered, PARSL.format(script_dir=str(metered.work), blocker=blocker))
    finally:  # the cluster is the module's: never leave it blocked for the next tests
        metered.run("scancel", str(blocker), check=False)
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["via"].startswith("sacct")  # parsl found sacct working (sacct -X) and reads states from it
    # (a job missing from sacct is COMPLETED to parsl: the submission must be in accounting at once)
    assert result["seen"] == ["PENDING", "RUNNING", "COMPLETED"]


def test_submitit_runs_a_function_on_the_cluster(clients: Path, metered: Cluster) -> None:
    run = _python(clients, metered, f"""
        import time
        import submitit
        executor = submitit.AutoExecutor(folder={str(metered.work / "submitit")!r}, cluster="slurm")
        executor.update_parameters(timeout_min=5, slurm_partition="debug", cpus_per_task=1)
        job = executor.submit(pow, 2, 10)
        result = job.result()
        deadline = time.time() + 60
        while job.state != "COMPLETED" and time.time() < deadline:  # the result is there before the job ends
            time.sleep(0.5)
        print("result", result, job.state)
    """)
    assert run.stdout.strip().splitlines()[-1] == "result 1024 COMPLETED"


def test_reportseff_reads_efficiency_and_energy(clients: Path, metered: Cluster) -> None:
    # busy for 3 s of the clock (a count of loop turns would end within a second on a fast CPU,
    # and reportseff shows no efficiency for a job of 0 elapsed seconds)
    job_id = metered.sbatch("-n", "2", "--wrap",
                            "srun -n 2 sh -c 'end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do :; done'")
    metered.wait_state(job_id, "COMPLETED", timeout=120)
    wait_for(lambda: metered.accounted(job_id)[0]["consumed_energy_j"], 60, what="the job's energy accounted")
    run = subprocess.run([str(clients / "reportseff"), "--no-color", "--format", "+Energy", str(job_id)],
                         env=_env(metered, clients), cwd=metered.work, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    header, *rows = [line.split() for line in run.stdout.strip().splitlines()]
    assert header[:2] == ["JobID", "State"] and header[-1] == "Energy"
    row = next(r for r in rows if r[0] == str(job_id))
    assert row[1] == "COMPLETED"
    assert int(row[-1]) > 0  # joules, from sacct's TRESUsageOutAve
    assert row[header.index("CPUEff")].endswith("%")


def test_dask_jobqueue_scales_workers_as_jobs(clients: Path, metered: Cluster) -> None:
    run = _python(clients, metered, """
        from dask.distributed import Client
        from dask_jobqueue import SLURMCluster
        cluster = SLURMCluster(cores=1, processes=1, memory="200MB", queue="debug", walltime="00:05:00",
                               scheduler_options={"host": "127.0.0.1"}, job_extra_directives=["-o /dev/null"])
        cluster.scale(jobs=1)
        client = Client(cluster)
        client.wait_for_workers(1, timeout=120)
        print("result", client.submit(lambda x: x + 1, 41).result(timeout=60))
        client.close(); cluster.close()
    """, timeout=400)
    assert run.stdout.strip().splitlines()[-1] == "result 42"


def test_snakemake_workflow_runs_through_the_slurm_executor(clients: Path, metered: Cluster) -> None:
    flow = metered.work / "snakeflow"
    flow.mkdir(exist_ok=True)
    (flow / "Snakefile").write_text(textwrap.dedent("""
        rule all:
            input: "c.txt"
        rule a:
            output: "a.txt"
            shell: "echo a > {output}"
        rule b:
            input: "a.txt"
            output: "b.txt"
            shell: "cat {input} > {output}; echo b >> {output}"
        rule c:
            input: "b.txt"
            output: "c.txt"
            shell: "cat {input} > {output}; echo c >> {output}; echo $SLURM_JOB_ID >> {output}"
    """))
    env = _env(metered, clients)
    env["HOME"] = str(metered.work)  # snakemake keeps its caches under the home directory
    run = subprocess.run([str(clients / "snakemake"), "--executor", "slurm", "--jobs", "3", "--latency-wait", "5",
                          "--slurm-no-account", "--slurm-init-seconds-before-status-checks", "1",
                          "--seconds-between-status-checks", "1", "--default-resources", "slurm_partition=debug",
                          "runtime=5", "mem_mb=100"], env=env, cwd=flow, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"stdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-5000:]}"
    lines = (flow / "c.txt").read_text().split()
    assert lines[:3] == ["a", "b", "c"] and lines[3].isdigit()
    assert os.path.exists(flow / ".snakemake")


def _rest_env(cluster: Cluster, clients: Path) -> dict[str, str]:
    """What a REST client's user sets: the URL, the user and a token from ``scontrol token``."""
    env = _env(cluster, clients)
    env.update(SLURM_URL=f"http://127.0.0.1:{cluster.port}", SLURM_USER="root", SLURM_TOKEN=cluster.token())
    env.pop("SLURM_API_VERSION", None)
    return env


def test_pyslurmutils_checks_submits_and_follows_a_job_with_its_defaults(clients: Path, metered: Cluster) -> None:
    env = _rest_env(metered, clients)
    check = subprocess.run([str(clients / "pyslurmutils"), "check"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stderr
    assert "Selected SLURM API v0.0.45" in check.stdout and "OK!" in check.stdout
    assert "Server supports v0.0.45, v0.0.44, v0.0.43, v0.0.42, v0.0.41, v0.0.40" in check.stdout
    logs = metered.work / "pyslurmutils"
    logs.mkdir(exist_ok=True)
    run = subprocess.run([str(clients / "python"), "-c", textwrap.dedent(f"""
        from pyslurmutils.client import SlurmScriptRestClient
        client = SlurmScriptRestClient(log_directory={str(logs)!r})
        job_id = client.submit_script("echo hello from $SLURM_JOB_ID")
        print("state", client.wait_finished(job_id, timeout=120))
        print("job", job_id)
        client.print_stdout_stderr(job_id)
        print("listed", job_id in [job.job_id for job in client.get_all_job_properties(all_users=True)])
    """)], env=env, cwd=metered.work, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"stdout: {run.stdout}\nstderr: {run.stderr}"
    job_id = int(run.stdout.split("job ", 1)[1].split()[0])
    assert "state COMPLETED" in run.stdout and f"hello from {job_id}" in run.stdout
    assert "listed True" in run.stdout
    assert metered.job(job_id)["state"] == "COMPLETED"


def test_slurpy_generated_client_reads_every_answer_into_its_models(clients: Path, metered: Cluster) -> None:
    run = subprocess.run([str(clients / "python"), "-c", textwrap.dedent(f"""
        import os
        import slurpy.v0042 as slurpy
        configuration = slurpy.Configuration(host=os.environ["SLURM_URL"])
        configuration.api_key["user"] = os.environ["SLURM_USER"]
        configuration.api_key["token"] = os.environ["SLURM_TOKEN"]
        with slurpy.ApiClient(configuration) as api_client:
            api = slurpy.SlurmApi(api_client)
            db = slurpy.SlurmdbApi(api_client)
            print("ping", api.get_ping().pings[0].responding)
            job = slurpy.JobDescMsg(name="slurpy", current_working_directory={str(metered.work)!r},
                                    environment=["PATH=/bin:/usr/bin"], script="#!/bin/sh\\necho slurpy\\n")
            job_id = api.post_job_submit(slurpy.JobSubmitReq(job=job)).job_id
            print("job", job_id)
            import time
            for _ in range(600):
                state = api.get_job(str(job_id)).jobs[0].job_state
                if "COMPLETED" in state:
                    break
                time.sleep(0.2)
            print("state", state)
            print("listed", job_id in [j.job_id for j in api.get_jobs().jobs])
            print("nodes", len(api.get_nodes().nodes), "partitions", len(api.get_partitions().partitions))
            print("diag", api.get_diag().statistics.jobs_submitted > 0)
            print("reservations", len(api.get_reservations().reservations))
            print("accounted", [j.job_id for j in db.get_jobs().jobs if j.job_id == job_id])
            print("users", sorted(u.name for u in db.get_users().users))
    """)], env=_rest_env(metered, clients), cwd=metered.work, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"stdout: {run.stdout}\nstderr: {run.stderr}"
    job_id = int(run.stdout.split("job ", 1)[1].split()[0])
    assert "ping True" in run.stdout and "state ['COMPLETED']" in run.stdout and "listed True" in run.stdout
    assert "nodes 4 partitions 1" in run.stdout and "diag True" in run.stdout
    assert f"accounted [{job_id}]" in run.stdout and "'root'" in run.stdout

"""Bad input gets a clear error, a non-zero exit, and loses nothing already accepted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wattsched.harness.testing import Cluster


@pytest.fixture(scope="module")
def baseline(cluster: Cluster) -> int:
    return cluster.sbatch("-H", "--wrap", "true")


@pytest.mark.parametrize(("args", "message"), [
    (["-N", "10", "--wrap", "true"], "Requested node configuration is not available"),
    (["-c", "64", "--wrap", "true"], "Requested node configuration is not available"),
    (["-p", "nosuch", "--wrap", "true"], "Invalid partition name specified"),
    (["-t", "1:2:3:4", "--wrap", "true"], "Invalid time limit specification"),
    (["--array=5-1", "--wrap", "true"], "Invalid job array specification"),
    (["--dependency=afterwhat:1", "--wrap", "true"], "Job dependency problem"),
    (["--signal=NOPE@10", "--wrap", "true"], "Invalid --signal specification"),
    (["--mem=10G", "--mem-per-cpu=1G", "--wrap", "true"], "mutually exclusive"),
    (["-w", "zz99", "--wrap", "true"], "Invalid node name specified"),
    (["--begin=yesterdayish", "--wrap", "true"], "Invalid time specification"),
    (["--deadline=whenever", "--wrap", "true"], "Invalid time specification"),
    (["--deadline=now-1hour", "--wrap", "true"], "Requested time limit is invalid"),
    (["--deadline=now+" + "9" * 60, "--wrap", "true"], "Invalid time specification"),
    (["-N", "abc", "--wrap", "true"], '"abc" is not a valid node count'),
    (["-N", "4-2", "--wrap", "true"], "Maximum node count 2 is less than minimum node count 4"),
])
def test_sbatch_refuses_bad_requests(cluster: Cluster, baseline: int, args: list[str], message: str) -> None:
    before = {j["job_id"] for j in cluster.jobs()}
    result = cluster.run("sbatch", *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert result.stderr.startswith("sbatch: error: ")
    assert {j["job_id"] for j in cluster.jobs()} == before
    assert cluster.job(baseline)["state"] == "PENDING"


def test_broken_sbatch_directives(cluster: Cluster, baseline: int) -> None:
    before = len(cluster.jobs())
    for body in ("#SBATCH --no-such-option\n", "#SBATCH --nodes=\"unterminated\n", "#SBATCH -N 0-0x\n"):
        script = cluster.work / "broken.sh"
        script.write_text("#!/bin/sh\n" + body + "true\n")
        result = cluster.run("sbatch", str(script), check=False)
        assert result.returncode != 0, body
        assert "error" in result.stderr.lower()
    assert len(cluster.jobs()) == before


def test_script_without_shebang_and_empty_script(cluster: Cluster) -> None:
    script = cluster.work / "noshebang.sh"
    script.write_text("echo hi\n")
    result = cluster.run("sbatch", str(script), check=False)
    assert result.returncode != 0 and "first line must start with #!" in result.stderr
    empty = cluster.run("sbatch", input="", check=False)
    assert empty.returncode != 0 and "Batch script is empty" in empty.stderr


@pytest.mark.parametrize("body", [
    b"{not json",
    b'{"work_dir": 5}',
    b'{"work_dir": "/tmp", "nodes_min": -1}',
    b'{"work_dir": "/tmp", "unknown_field": 1}',
    b'{"work_dir": "/tmp", "ntasks": "many"}',
    b"[]",
])
def test_malformed_http_bodies_get_4xx(cluster: Cluster, baseline: int, body: bytes) -> None:
    before = len(cluster.jobs())
    reply = cluster.api("POST", "/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= reply.status_code < 500, reply.text
    assert len(cluster.jobs()) == before


def test_bad_ids_and_commands(cluster: Cluster) -> None:
    assert cluster.run("scancel", "999999", check=False).returncode == 1
    assert "Invalid job id specified" in cluster.run("scancel", "999999", check=False).stderr
    assert cluster.run("scancel", "abc", check=False).returncode != 0
    assert cluster.run("scontrol", "show", "job", "999999", check=False).returncode == 1
    assert cluster.run("scontrol", "update", "nodename=n01", "state=drain", check=False).returncode == 1
    assert cluster.run("scontrol", "frobnicate", check=False).returncode == 1
    assert cluster.run("squeue", "-t", "NOTASTATE", check=False).returncode == 1
    unknown_user = cluster.run("scontrol", "token", "username=no_such_user_xyz", check=False)
    assert unknown_user.returncode == 1 and "Invalid user" in unknown_user.stderr


def test_broken_config_names_file_line_and_key(tmp_path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("ClusterName=x\nSlurmctldPort=notaport\n")
    result = subprocess.run([sys.executable, "-m", "wattsched.cli.wattsched", "controller", str(conf)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"{conf}:2: SlurmctldPort:" in result.stderr
    conf.write_text("ClusterName=x\nNodeName=a[1-2] CPUs=2 Bogus=1\n")
    result = subprocess.run([sys.executable, "-m", "wattsched.cli.wattsched", "controller", str(conf)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and f"{conf}:2: Bogus: unknown NodeName key" in result.stderr


def test_controller_unreachable(tmp_path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nStateSaveLocation={tmp_path}\n"
                    f"AuthAltParameters=jwt_key={tmp_path}/key\n")
    (tmp_path / "key").write_text("0123456789abcdef0123456789abcdef\n")
    from wattsched.harness.testing import BIN

    result = subprocess.run([str(BIN / "squeue")], env={"WATTSCHED_CONF": str(conf), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "Unable to contact slurm controller" in result.stderr

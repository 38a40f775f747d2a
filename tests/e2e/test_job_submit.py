"""JobSubmitPlugins=python: the site's job_submit.py (beside the configuration file, as Slurm's
job_submit.lua) sets defaults, reroutes and refuses submissions and updates, through the real
commands; it is read again when it changes, and only while root alone may write it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from wattsched.harness.testing import Cluster, wait_for

RULES = '''
def job_submit(job_desc, part_list, submit_uid):
    if job_desc.time_limit is None:
        job_desc.time_limit = {default}                 # a default time limit
    if job_desc.comment == "big" and "big" in [p.name for p in part_list]:
        job_desc.partition = "big"                      # rerouted
    if (job_desc.name or "").startswith("bad"):
        slurm.log_user("jobs named %s are not welcome here", job_desc.name)
        return slurm.ERROR
    if job_desc.wckey == "nope":
        return slurm.ESLURM_INVALID_ACCOUNT             # Slurm's code, Slurm's words
    if job_desc.name == "crash":
        return 1 // 0                                   # a bug in the rules
    return slurm.SUCCESS


def job_modify(job_desc, job_rec, part_list, modify_uid):
    if job_desc.comment == "nope":
        slurm.log_user("job %d may not say nope", job_rec.job_id)
        return slurm.ERROR
    return slurm.SUCCESS
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("jobsubmit")
    (root / "job_submit.py").write_text(RULES.format(default=5))
    running = Cluster(root, extra="JobSubmitPlugins=python",
                      partitions="PartitionName=debug Nodes=n[01-02] Default=YES MaxTime=INFINITE\n"
                                 "PartitionName=big Nodes=n[03-04] MaxTime=INFINITE").start()
    yield running
    running.stop()


def _rewrite(cluster: Cluster, text: str) -> None:
    path = cluster.root / "job_submit.py"
    path.write_text(text)
    os.chmod(path, 0o644)


def test_the_site_rules_set_defaults_reroute_and_refuse(cluster: Cluster) -> None:
    c = cluster
    plain = c.sbatch("--wrap", "sleep 60")
    assert c.job(plain)["time_limit_min"] == 5 and c.job(plain)["partition"] == "debug"
    kept = c.sbatch("-t", "20", "--comment", "big", "--wrap", "sleep 60")
    assert c.job(kept)["time_limit_min"] == 20 and c.job(kept)["partition"] == "big"
    before = c.run("squeue", "-h", "-o", "%i").stdout.split()
    refused = c.run("sbatch", "-J", "bad1", "--wrap", "true", check=False)
    assert refused.returncode == 1
    assert "Batch job submission failed: jobs named bad1 are not welcome here" in refused.stderr
    coded = c.run("sbatch", "--wckey", "nope", "--wrap", "true", check=False)
    assert coded.returncode == 1
    assert "Batch job submission failed: Invalid account or account/partition combination specified" in coded.stderr
    crashed = c.run("sbatch", "-J", "crash", "--wrap", "true", check=False)  # contained, and logged
    assert crashed.returncode == 1 and "Unspecified error" in crashed.stderr
    assert "ZeroDivisionError" in (c.root / "logs" / "controller.log").read_text()
    assert c.run("squeue", "-h", "-o", "%i").stdout.split() == before  # nothing refused was queued
    update = c.run("scontrol", "update", f"JobId={plain}", "Comment=nope", check=False)
    assert update.returncode != 0 and f"job {plain} may not say nope" in update.stderr
    c.run("scontrol", "update", f"JobId={plain}", "Comment=fine")
    assert c.job(plain)["comment"] == "fine"
    c.run("scancel", str(plain), str(kept))


def test_the_rules_are_read_again_when_they_change_and_only_from_roots_own_file(cluster: Cluster) -> None:
    c = cluster
    _rewrite(c, RULES.format(default=7))
    assert c.job(c.sbatch("-H", "--wrap", "true"))["time_limit_min"] == 7
    _rewrite(c, "def job_submit(job_desc, part_list, submit_uid):\n    return (\n")  # does not load
    assert c.job(c.sbatch("-H", "--wrap", "true"))["time_limit_min"] == 7  # the rules before it stay
    wait_for(lambda: "not loaded, the rules before it stay" in (c.root / "logs" / "controller.log").read_text(),
             10, what="the broken version logged")
    _rewrite(c, RULES.format(default=9))
    os.chmod(c.root / "job_submit.py", 0o666)  # anyone could write it now: root does not read it
    assert c.job(c.sbatch("-H", "--wrap", "true"))["time_limit_min"] == 7
    assert "not loading the site's rules" in (c.root / "logs" / "controller.log").read_text()
    os.chmod(c.root / "job_submit.py", 0o644)
    os.chown(c.root / "job_submit.py", 65534, 65534)  # a user's file: never root's rules
    assert c.job(c.sbatch("-H", "--wrap", "true"))["time_limit_min"] == 7
    os.chown(c.root / "job_submit.py", 0, 0)
    assert c.job(c.sbatch("-H", "--wrap", "true"))["time_limit_min"] == 9
    c.run("scancel", "-u", "root")

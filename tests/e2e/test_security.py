"""Authentication and authorization: unauthenticated, forged, expired and cross-user requests."""

from __future__ import annotations

import os

import httpx

from wattsched import auth
from wattsched.harness.testing import ALICE, Cluster


def test_unauthenticated_and_forged_requests_get_401(cluster: Cluster) -> None:
    before = len(cluster.jobs())
    body = {"script": "#!/bin/sh\ntrue\n", "work_dir": "/tmp"}
    assert cluster.api("POST", "/v1/jobs", token=None, json=body).status_code == 401
    forged = auth.user_token(b"not-the-cluster-key-0123456789", 0, "root")
    assert cluster.api("POST", "/v1/jobs", token=forged, json=body).status_code == 401
    expired = auth.sign(cluster.key(), {"uid": 0, "sun": "root", "role": "user", "exp": 1})
    assert cluster.api("GET", "/v1/jobs", token=expired).status_code == 401
    assert cluster.api("GET", "/v1/jobs", token="garbage").status_code == 401
    assert len(cluster.jobs()) == before
    result = cluster.run("squeue", env=dict(cluster.env, SLURM_JWT=forged), check=False)
    assert result.returncode != 0 and "Invalid authentication credential" in result.stderr


def test_cross_user_requests_are_refused(cluster: Cluster) -> None:
    root_job = cluster.sbatch("-H", "--wrap", "true")
    alice = cluster.user_env()
    alice_job = cluster.sbatch("-H", "--wrap", "true", env=alice)
    assert cluster.job(alice_job)["user"] == "alice" and cluster.job(alice_job)["uid"] == ALICE[0]
    refused = cluster.run("scancel", str(root_job), env=alice, check=False)
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr
    assert cluster.job(root_job)["state"] == "PENDING"
    hold = cluster.run("scontrol", "update", f"jobid={root_job}", "TimeLimit=1", env=alice, check=False)
    assert hold.returncode == 1 and "Access/permission denied" in hold.stderr
    prio = cluster.run("scontrol", "update", f"jobid={alice_job}", "Priority=99999", env=alice, check=False)
    assert prio.returncode == 1 and "Access/permission denied" in prio.stderr
    drain = cluster.run("scontrol", "update", "nodename=n01", "state=drain", "reason=x", env=alice, check=False)
    assert drain.returncode == 1 and "Access/permission denied" in drain.stderr
    token = cluster.run("scontrol", "token", "username=root", env=alice, check=False)
    assert token.returncode == 1
    cluster.run("scancel", str(alice_job), env=alice)  # her own job: allowed
    assert cluster.job(alice_job)["state"] == "CANCELLED"
    cluster.run("scancel", str(root_job))


def test_daemon_endpoints_need_daemon_roles(cluster: Cluster) -> None:
    hb = {"agent_url": "http://127.0.0.1:1", "boot_time": 0, "nodes": [], "events": []}
    assert cluster.api("POST", "/v1/agents/heartbeat", json=hb).status_code == 403
    node_token = cluster.token(role="node")
    assert cluster.api("POST", "/v1/agents/heartbeat", token=node_token, json=hb).status_code == 200
    agent = next(n["agent_url"] for n in cluster.nodes())
    launch = {"jobs": []}
    user = httpx.post(f"{agent}/v1/launch", json=launch, headers={"Authorization": f"Bearer {cluster.token()}"})
    assert user.status_code == 403
    nobody = httpx.post(f"{agent}/v1/launch", json=launch)
    assert nobody.status_code == 401
    forged_step = {"job_id": 1, "step_id": 0, "node": "n01", "credential": auth.sign(b"x" * 32, {"exp": 2e9}),
                   "argv": ["true"], "work_dir": "/tmp"}
    step = httpx.post(f"{agent}/v1/steps/launch", json=forged_step,
                      headers={"Authorization": f"Bearer {cluster.token()}"})
    assert step.status_code == 403


def _as_uid(uid: int, action) -> str:
    """Run ``action`` in a forked child as ``uid`` (no exec: the interpreter may be unreadable to it)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.setgid(uid)
            os.setuid(uid)
            result = str(action())
        except BaseException as exc:  # report anything to the parent
            result = f"error: {type(exc).__name__}: {exc}"
        os.write(write_fd, result.encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        output = pipe.read()
    os.waitpid(pid, 0)
    return output


def test_token_from_auth_socket_carries_the_callers_uid(tmp_path_factory) -> None:
    """A user who cannot read the key gets a token for exactly their own uid (SO_PEERCRED)."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root to act as another uid")
    import tempfile

    root = tempfile.mkdtemp(prefix="wattsched-auth-")
    os.chmod(root, 0o755)  # other users must reach the config and the socket, not the key
    cluster = Cluster(__import__("pathlib").Path(root)).start()
    try:
        os.chmod(cluster.conf, 0o644)
        for folder in (cluster.root / "ctld",):
            os.chmod(folder, 0o755)
        from wattsched.cli.common import Client, load_config

        os.environ["WATTSCHED_CONF"] = str(cluster.conf)
        config = load_config()
        assert not os.access(config.key_file, os.R_OK) or os.geteuid() == 0
        answer = _as_uid(65534, lambda: Client(config).request("GET", "/v1/ping")["uid"])
        assert answer == "65534"
        key_read = _as_uid(65534, lambda: auth.read_key(config.key_file))
        assert key_read.startswith("error: PermissionError")
    finally:
        cluster.stop()
        __import__("shutil").rmtree(root, ignore_errors=True)


def test_pyjwt_reads_our_tokens(cluster: Cluster) -> None:
    import jwt

    claims = jwt.decode(cluster.token(42, "bob"), cluster.key(), algorithms=["HS256"])
    assert claims["uid"] == 42 and claims["sun"] == "bob"

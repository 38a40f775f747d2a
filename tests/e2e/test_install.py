"""A login node's installation: a plain ``pip install wattsched`` (no extra) gets the commands and
nothing of the daemons; the commands drive a cluster from it; a daemon or a tool asked of it names
the extra it needs. The cluster itself runs from the development environment, as on another host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wattsched.harness.testing import Cluster, wait_for

ROOT = Path(__file__).resolve().parents[2]


def alone(env: dict[str, str]) -> dict[str, str]:
    """``env`` without a PYTHONPATH: the login node sees its own installation, not this checkout."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}

# what only the daemons, the simulator or the plots need (pydantic is not among them: typer needs it too)
DAEMON_PACKAGES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "httpx", "numpy", "h5py", "pyghmi", "matplotlib",
                   "prometheus_client", "psycopg", "pymysql", "pynvml")


@pytest.fixture(scope="module")
def login_node(tmp_path_factory) -> Path:
    """A fresh virtual environment holding wattsched's wheel with its plain dependencies: its bin/."""
    where = tmp_path_factory.mktemp("login")
    source = where / "source"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(ROOT / "wattsched", source / "wattsched", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(where / "dist"),
                            str(source)], capture_output=True, text=True, env=alone(dict(os.environ)))
    if built.returncode != 0:
        pytest.skip(f"the wheel could not be built here: {built.stderr.strip()[-300:]}")
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    wheel = next((where / "dist").glob("wattsched-*.whl"))
    done = subprocess.run([str(where / "venv" / "bin" / "pip"), "install", "-q", str(wheel)],
                          capture_output=True, text=True, env=alone(dict(os.environ)))
    if done.returncode != 0:
        pytest.skip(f"the plain dependencies are not installable here (no package index): {done.stderr[-300:]}")
    return where / "venv" / "bin"


def test_a_plain_install_holds_the_commands_and_none_of_the_daemons(login_node) -> None:
    found = subprocess.run([str(login_node / "python"), "-c",
                            "import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] "
                            "if importlib.util.find_spec(n)))", *DAEMON_PACKAGES],
                           capture_output=True, text=True, check=True, env=alone(dict(os.environ)))
    assert found.stdout.split() == []
    for command in ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "sacct", "wattsched"):
        assert (login_node / command).exists(), command


def test_the_commands_of_a_plain_install_drive_the_cluster(login_node, cluster: Cluster) -> None:
    env = alone(dict(cluster.env, PATH=f"{login_node}{os.pathsep}{os.environ.get('PATH', '')}"))

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(login_node / args[0]), *args[1:]], env=env, cwd=cluster.work,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        return done

    job = int(run("sbatch", "--parsable", "-N1", "--wrap", "sleep 30").stdout.strip())
    wait_for(lambda: run("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip() == "RUNNING",
             what=f"job {job} running, as the plain install's squeue sees it")
    assert "JobState=RUNNING" in run("scontrol", "show", "job", str(job)).stdout
    assert sorted(run("sinfo", "-h", "-o", "%D %t").stdout.splitlines()) == ["1 mix", "3 idle"]
    run("scancel", str(job))
    wait_for(lambda: run("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State").stdout.startswith("CANCELLED by"),
             what=f"job {job} CANCELLED in accounting, as the plain install's sacct sees it")


@pytest.mark.parametrize(("argv", "extra"), [
    (["wattsched", "controller", "CONF"], "controller"),
    (["wattsched", "noded", "CONF"], "node"),
    (["wattsched", "simulate", "--help"], None),
    (["sh5util", "-j", "1"], "node"),
])
def test_what_a_plain_install_lacks_is_named_with_its_extra(login_node, cluster: Cluster, argv, extra) -> None:
    argv = [str(cluster.conf) if a == "CONF" else a for a in argv]
    done = subprocess.run([str(login_node / argv[0]), *argv[1:]], env=alone(cluster.env), capture_output=True,
                          text=True, timeout=60)
    if extra is None:  # the help of a command is there without its extra
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"which this installation lacks: pip install 'wattsched[{extra}]'" in done.stderr, done.stderr

"""What a daemon's process leaves unloaded: the modules `wattsched controller`, `wattsched noded`,
slurmctld and slurmd block before importing their code (httpx's command-line client, pydantic.v1), while the
controller's and the agent's applications are built as usual."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from wattsched.service.daemonstart import without_unused_imports
without_unused_imports()
from wattsched.controller.app import create_app
from wattsched.noded.agent import Agent
import httpx
print(httpx.__version__ is not None, sorted(m for m in ("rich", "pygments", "pydantic.v1") if sys.modules.get(m)))
"""


def test_the_daemons_load_neither_httpx_cli_nor_pydantic_v1() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "True []"

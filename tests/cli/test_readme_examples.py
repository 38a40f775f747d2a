"""The examples cannot lie: every ```console block marked ``<!-- runs -->`` in the README and in the
documentation's pages (docs/, in the site's order) is run, command by command, against a fresh
emulated cluster made from etc/emulated.conf (as `make emulate` makes it), and what the block shows
after a command is what the command must print. Blocks marked ``<!-- runs on etc/ha.conf -->`` run
the same way against the two-controller cluster of etc/ha.conf (skipped without PostgreSQL).

A command's shown output is compared line by line, word by word, times (``0:03``, ``00:00:56``)
standing for any time. A command that only reads (squeue, sinfo, sacct, sstat, scontrol show...)
is run again until it prints what is shown (the cluster moves on: a job ends, a state settles),
for a bounded time; every other command runs once and must succeed.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.harness.testing import BIN, free_port, free_port_block

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """The README first (its walk-through starts the cluster's job ids), then the site's pages."""
    import yaml  # (the site's order is mkdocs.yml's nav)

    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["nav"]

    def walk(items) -> list[str]:
        found: list[str] = []
        for item in items:
            for value in (item.values() if isinstance(item, dict) else [item]):
                found += walk(value) if isinstance(value, list) else [value]
        return found

    return [README, *(ROOT / "docs" / page for page in walk(nav) if (ROOT / "docs" / page).exists())]
READERS = ("squeue", "sinfo", "sacct", "sstat", "sreport", "sshare", "sprio", "scontrol show",
           "sh5util", "wattsched profile")  # (these two write files, the same ones each time)
TIME = re.compile(r"^(\d+-)?\d+:\d\d(:\d\d)?$")
SETTLE_S = 120  # how long a read is retried: the walk-through's energy job runs a minute


RUNS = "<!-- runs -->"
RUNS_HA = "<!-- runs on etc/ha.conf -->"


def blocks(text: str, marker: str = RUNS) -> list[list[tuple[str, list[str]]]]:
    """The runnable blocks: each a list of (command, the output lines shown after it)."""
    found = []
    for match in re.finditer(re.escape(marker) + r"\n```console\n(.*?)```", text, re.S):
        steps: list[tuple[str, list[str]]] = []
        lines = match.group(1).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.startswith("$ "):
                if steps and line.strip() and not line.startswith("#"):
                    steps[-1][1].append(line)
                continue
            command = line[2:]
            while command.endswith("\\") and i < len(lines):  # a continued line (bash joins it)
                command += "\n" + lines[i]
                i += 1
            heredoc = re.search(r"<<'?(\w+)'?", command)
            if heredoc:  # the document's lines, up to its end word
                while i < len(lines):
                    command += "\n" + lines[i]
                    i += 1
                    if lines[i - 1] == heredoc.group(1):
                        break
            steps.append((command, []))
        found.append(steps)
    return found


def same(shown: list[str], printed: str) -> bool:
    actual = [line.split() for line in printed.splitlines() if line.strip()]
    expected = [line.split() for line in shown]
    return len(actual) == len(expected) and all(
        len(a) == len(e) and all(x == y or (TIME.match(x) and TIME.match(y)) for x, y in zip(a, e, strict=True))
        for a, e in zip(actual, expected, strict=True))


@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> Iterator[tuple[dict[str, str], Path]]:
    """etc/emulated.conf on ports and in folders of its own, started as `make emulate` starts it."""
    root = tmp_path_factory.mktemp("readme")
    text = (ROOT / "etc" / "emulated.conf").read_text()
    text = re.sub(r"(?m)^EmulatedBMCPort=.*$", f"EmulatedBMCPort={free_port_block(16)}", text)
    yield from _emulate(root, "emulated", text)


def _postgres() -> str:
    try:
        import psycopg

        psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=3).close()
    except Exception as exc:  # no driver, no server: say which
        return f"needs PostgreSQL on 127.0.0.1:5432 (user postgres): {str(exc).strip()[:120]}"
    return ""


@pytest.fixture(scope="module")
def ha_emulated(tmp_path_factory) -> Iterator[tuple[dict[str, str], Path]]:
    """etc/ha.conf on a port, in folders and in databases of its own."""
    reason = _postgres()
    if reason:
        pytest.skip(reason)
    import psycopg

    root = tmp_path_factory.mktemp("ha")
    tag = f"{os.getpid()}"
    text = (ROOT / "etc" / "ha.conf").read_text().replace("/wattsched_ha_", f"/wattsched_ha{tag}_")
    try:
        yield from _emulate(root, "ha", text)
    finally:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            for name in ("state", "acct"):
                conn.execute(f"DROP DATABASE IF EXISTS wattsched_ha{tag}_{name} WITH (FORCE)")


def _emulate(root: Path, name: str, text: str) -> Iterator[tuple[dict[str, str], Path]]:
    """The configuration ``text`` (etc/NAME.conf) on a port and in folders of its own, started as
    `wattsched emulate` starts it, stopped after."""
    text = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={free_port()}", text)
    text = re.sub(rf"\.\./wattsched-state/{name}", str(root / "state"), text)
    conf = root / f"{name}.conf"
    conf.write_text(text)
    work = root / "work"
    work.mkdir()
    env = dict(os.environ, WATTSCHED_CONF=str(conf), SLURM_CONF=str(conf), PATH=f"{BIN}:{os.environ['PATH']}")
    for var in ("SLURM_JOB_ID", "SLURM_JWT", "WATTSCHED_CONTROLLER"):
        env.pop(var, None)
    subprocess.run([str(BIN / "wattsched"), "emulate", "--daemon", str(conf)], env=env, check=True,
                   capture_output=True, timeout=180)
    try:
        yield env, work
    finally:
        subprocess.run([str(BIN / "wattsched"), "emulate", "--stop", str(conf)], env=env, capture_output=True,
                       timeout=120)


@pytest.mark.e2e
def test_the_walk_through_runs_as_shown(emulated: tuple[dict[str, str], Path]) -> None:
    env, work = emulated
    runnable = [block for page in pages() for block in blocks(page.read_text())]
    assert len(runnable) >= 2 and sum(len(b) for b in runnable) >= 19
    _run(runnable, env, work)


@pytest.mark.e2e
def test_the_failover_walk_through_runs_as_shown(ha_emulated: tuple[dict[str, str], Path]) -> None:
    env, work = ha_emulated
    runnable = [block for page in pages() for block in blocks(page.read_text(), RUNS_HA)]
    assert runnable and any("pkill -9" in command for block in runnable for command, _ in block)
    _run(runnable, env, work)


def _run(runnable: list[list[tuple[str, list[str]]]], env: dict[str, str], work: Path) -> None:
    for steps in runnable:
        for command, shown in steps:
            reads = command.startswith(READERS)
            deadline = time.monotonic() + (SETTLE_S if reads else 0)
            while True:
                done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                      timeout=120)
                good = done.returncode == 0 and (not shown or same(shown, done.stdout))
                if good or time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
            assert good, f"$ {command}\nexit {done.returncode}\nshown:\n" + "\n".join(shown) + \
                f"\nprinted:\n{done.stdout}{done.stderr}"


def test_the_runner_notices_an_example_changed_by_hand() -> None:
    """A block whose shown output is changed no longer matches what the command prints."""
    steps = blocks("<!-- runs -->\n```console\n$ echo 'Submitted batch job 1'\nSubmitted batch job 2\n```\n")[0]
    command, shown = steps[0]
    printed = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout
    assert not same(shown, printed)
    assert same(["Submitted batch job 1"], printed)
    assert same(["1 debug R 0:03 node01"], "1 debug R 12:59 node01\n")  # times stand for any time

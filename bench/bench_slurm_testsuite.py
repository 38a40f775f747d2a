"""SchedMD's own test suite (Slurm's ``testsuite/python``, pytest with its ``lib/atf.py``) run against
an emulated wattsched cluster, with every test's result written down.

The suite comes from a git repository of Slurm's sources (``--slurm-git``, at ``--commit``; the
search tool's ``fetch github:SchedMD/slurm`` brings one) or from a checkout (``--suite``, the folder
holding ``testsuite/``). It runs in a virtual environment of its own (``.venv-slurm-testsuite``,
made here with the ``slurm-testsuite`` extra of pyproject.toml: the suite's own needs, not ours),
against ``wattsched emulate`` on etc/emulated.conf (its state in a temporary folder, free ports),
with the configuration reachable as ``slurm.conf`` where atf looks for it, and only our commands on
PATH (atf finds Slurm's programs there). It runs in atf's local-config mode: the cluster as it is,
tests needing another configuration skip. atf runs a test only where ``sudo -ln`` grants everything
without a password: the suite runs as root, and for its length a drop-in
(/etc/sudoers.d/wattsched-slurm-testsuite) grants root that (Debian's ``sudo`` package needed); our
commands are linked into /usr/local/bin and /usr/local/sbin meanwhile, where the login shells atf
starts look for them. Run as root:

    .venv/bin/python bench/bench_slurm_testsuite.py --slurm-git /work/.mirror/SchedMD+slurm/repo \
        [--commit HEAD] [--out build/slurm-testsuite] [--timeout 300] [-- PYTEST_ARGS...]

It prints the counts (passed, failed, errors, skipped), the commonest reasons of failures and errors,
and writes ``results.tsv`` (one line per test: its id, outcome and first line of its message),
``junit.xml`` and the suite's log into ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_slurm import Emulated
from machine import describe

from wattsched.testing import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-slurm-testsuite"


def suite_venv() -> Path:
    """The suite's interpreter, in a virtual environment of its own with the extra's packages."""
    python = VENV / "bin" / "python"
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "slurm-testsuite"]
    stamp = VENV / ".installed"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if not stamp.exists() or stamp.read_text() != "\n".join(wanted):
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"pip could not install the suite's packages:\n{done.stderr}")
        stamp.write_text("\n".join(wanted))
    return python


DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "slurmrestd")


@contextlib.contextmanager
def installed_as_slurm(conf: Path) -> Iterator[None]:
    """For as long as the suite runs, the machine as a Slurm site's: root's ``NOPASSWD: ALL``,
    which atf looks for in ``sudo -ln``, and our commands where a login shell finds them (atf runs
    its commands as other users through ``sudo bash -l``, whose PATH is /etc/profile's), as links
    in /usr/local/bin and /usr/local/sbin, and the configuration where Slurm's is looked for (sudo
    keeps no SLURM_CONF), /etc/slurm/slurm.conf: links taken away afterwards, never over a file."""
    if shutil.which("sudo") is None:
        raise SystemExit("the suite needs sudo: apt-get install sudo")
    drop_in = Path("/etc/sudoers.d/wattsched-slurm-testsuite")
    drop_in.write_text("root ALL=(ALL:ALL) NOPASSWD: ALL\n")
    drop_in.chmod(0o440)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    links = []
    try:
        wanted = {Path("/usr/local/sbin" if name in DAEMONS else "/usr/local/bin") / name:
                  Path(sys.executable).parent / name for name in scripts if name != "wattsched"}
        wanted[Path("/etc/slurm/slurm.conf")] = conf
        for link, target in wanted.items():
            if not link.exists() and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(target)
                links.append(link)
        yield
    finally:
        drop_in.unlink()
        for link in links:
            link.unlink()


def export_suite(git_dir: Path, commit: str, into: Path) -> str:
    """testsuite/ of ``commit`` under ``into``; its full commit id."""
    full = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", commit], capture_output=True, text=True,
                          check=True).stdout.strip()
    archive = subprocess.Popen(["git", f"--git-dir={git_dir}", "archive", full, "testsuite"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise SystemExit(f"git archive {full} testsuite failed")
    return full


def results(junit: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) of each test case in pytest's xunit1 report."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (found.get("message") or found.text or "").strip()
                break
        rows.append((test_id, outcome, message.splitlines()[0][:300] if message else ""))
    return rows


def cause(message: str) -> str:
    """A failure's message with its numbers and quoted values blurred, so that alike causes group."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    return re.sub(r"\d+", "N", text)[:160]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm-git", type=Path, help="a git repository of Slurm's sources")
    source.add_argument("--suite", type=Path, help="a checkout holding testsuite/python")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "slurm-testsuite")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a test may take")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (tests, -k)")
    args = parser.parse_args()
    # stopped (SIGTERM), it still stops its cluster and takes its sudoers drop-in away
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    python = suite_venv()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wattsched-slurm-testsuite-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        if args.slurm_git:
            commit = export_suite(args.slurm_git, args.commit, root)
            base = root / "testsuite"
        else:
            base = args.suite / "testsuite"
            commit = subprocess.run(["git", "-C", str(args.suite), "rev-parse", "HEAD"], capture_output=True,
                                    text=True, check=False).stdout.strip() or "unknown"
        cluster = Emulated(root, nodes=16, cpus=8, array=1000)
        # accounting as a Slurm site names it: atf runs its accounting tests only then
        with open(cluster.conf, "a") as conf:
            conf.write("AccountingStorageType=accounting_storage/slurmdbd\n")
        slurm_conf = root / "slurm.conf"  # atf reads dirname($SLURM_CONF)/slurm.conf
        slurm_conf.symlink_to(cluster.conf.name)
        # an installation laid out as Slurm's: the commands in bin, the daemons in sbin (atf runs
        # PREFIX/sbin/slurmctld -V), both our scripts
        prefix = root / "prefix"
        prefix.mkdir()
        for folder in ("bin", "sbin"):  # folders of links: atf goes through bin/.. to sbin
            (prefix / folder).mkdir()
            for program in Path(sys.executable).parent.iterdir():
                (prefix / folder / program.name).symlink_to(program)
        suite_conf = root / "testsuite.conf"
        suite_conf.write_text(f"SlurmSourceDir={base.parent}\nSlurmBuildDir={base.parent}\n"
                              f"SlurmInstallDir={prefix}\nSlurmConfigDir={root}\n")
        env = dict(cluster.env, SLURM_CONF=str(slurm_conf), WATTSCHED_CONF=str(slurm_conf),
                   SLURM_TESTSUITE_CONF=str(suite_conf), PATH=f"{prefix / 'bin'}:/usr/bin:/bin",
                   USER="root", LOGNAME="root",
                   # the suite runs as root here (SchedMD's runs as a user with sudo): the slurmrestd
                   # it starts itself would refuse root, as Slurm's would
                   SLURMRESTD_SECURITY="disable_user_check")
        cluster.env = env
        cluster.start()
        restd = None
        try:
            wait_for(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                            text=True).stdout.split() == ["idle"], 120, what="the nodes idle")
            # slurmrestd as a site runs it (not as root), where atf's local mode looks for it
            port = free_port()
            with open(args.out / "slurmrestd.log", "w") as restd_log:
                restd = subprocess.Popen(["slurmrestd", "-u", "daemon", f"localhost:{port}"], env=env,
                                         stderr=restd_log)
            env["SLURM_TESTSUITE_SLURMRESTD_URL"] = f"http://localhost:{port}/"
            junit = args.out / "junit.xml"
            with open(args.out / "suite.log", "w") as log, installed_as_slurm(cluster.conf):
                subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rN", "-v",
                                "--continue-on-collection-errors",
                                f"--timeout={args.timeout}", f"--junitxml={junit}", *(args.pytest_args or ["tests"])],
                               cwd=base / "python", env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
        finally:
            if restd is not None:
                restd.terminate()
                restd.wait(30)
            cluster.stop()
    rows = results(junit)
    with open(args.out / "results.tsv", "w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(rows)
    counts = collections.Counter(outcome for _, outcome, _ in rows)
    print("bench: Slurm's testsuite/python against wattsched (local-config mode)")
    print(f"workload: testsuite of SchedMD/slurm {commit}, {len(rows)} items; etc/emulated.conf, 16 nodes of 8 CPUs")
    print(f"machine: {describe()}")
    for outcome in ("passed", "failed", "error", "skipped"):
        print(f"{outcome}: {counts[outcome]}")
    print(f"failed + errors: {counts['failed'] + counts['error']}")
    print(f"per-test results: {args.out / 'results.tsv'}")
    print("commonest causes of failures and errors:")
    for text, count in collections.Counter(cause(m) for _, o, m in rows if o in ("failed", "error")).most_common(25):
        print(f"  {count:4d}  {text}")


if __name__ == "__main__":
    main()

"""SchedMD's own test suite (Slurm's ``testsuite/python``, pytest with its ``lib/atf.py``) run against
wattsched, with every test's result written down, in either of atf's modes.

The suite comes from a git repository of Slurm's sources (``--slurm-git``, at ``--commit``; the
search tool's ``fetch github:SchedMD/slurm`` brings one) or from a checkout (``--suite``, the folder
holding ``testsuite/``). It runs in a virtual environment of its own (``.venv-slurm-testsuite``,
made here with the ``slurm-testsuite`` extra of pyproject.toml: the suite's own needs, not ours),
against an installation laid out as Slurm's in a temporary folder (our commands in ``bin``, our
daemons under Slurm's names in ``sbin``, the configuration in ``etc``), and only our commands on
PATH (atf finds Slurm's programs there).

- ``--mode local`` (atf's local-config): ``wattsched emulate`` on etc/emulated.conf (16 nodes of 8
  CPUs, free ports) and a slurmrestd, started here; tests needing another configuration skip.
- ``--mode auto`` (atf's auto-config): atf itself starts, reconfigures and stops the daemons, module
  by module, from a minimal site configuration (``etc.orig``: one node, node0, every slurmd of the
  host a virtual node with its own port and files): ``slurmctld -c -i``, ``slurmd -N nodeN`` for each
  node it adds to slurm.conf, ``scontrol shutdown``, ``sacctmgr`` before any controller runs.

atf runs a test only where ``sudo -ln`` grants everything without a password: the suite runs as
root, and for its length a drop-in (/etc/sudoers.d/wattsched-slurm-testsuite) grants root that
(Debian's ``sudo`` package needed); our commands are linked into /usr/local/bin and /usr/local/sbin
meanwhile, where the login shells atf starts look for them. Run as root:

    .venv/bin/python bench/bench_slurm_testsuite.py --slurm-git /work/.mirror/SchedMD+slurm/repo \
        [--mode local|auto] [--commit HEAD] [--out build/slurm-testsuite] [--timeout 300] [-- PYTEST_ARGS...]

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

from wattsched.harness.testing import free_port, wait_for

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


# auto-config's base: a Slurm site's minimal configuration, one node (node0) that atf multiplies
# as each test asks (atf.require_nodes: more NodeName lines, a port each), every slurmd of the host
# a virtual node with files of its own (%n)
AUTO_CONF = """\
ClusterName=cluster
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
TmpFS={root}/tmpfs/%n
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.%n.pid
EmulatedNodes=YES
ProctrackType=proctrack/cgroup
NodeName=node0 NodeHostname=localhost Port={node_port}
PartitionName=primary Nodes=ALL Default=YES State=UP MaxTime=INFINITE
"""


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on loopback (nodes atf adds take the ports
    after node0's)."""
    import socket

    for first in range(20000, 60000, count):
        try:
            held = []
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise SystemExit("no free run of ports on loopback")


def site(root: Path, mode: str) -> tuple[Path, dict[str, str]]:
    """An installation laid out as Slurm's under ``root`` (the commands in prefix/bin, the daemons
    in prefix/sbin, both links to our scripts: atf runs PREFIX/sbin/slurmctld) and its configuration
    folder: the slurm.conf, and the environment to run the suite in."""
    prefix = root / "prefix"
    prefix.mkdir()
    for folder in ("bin", "sbin"):  # folders of links: atf goes through bin/.. to sbin
        (prefix / folder).mkdir()
        for program in Path(sys.executable).parent.iterdir():
            (prefix / folder / program.name).symlink_to(program)
    etc = prefix / "etc"
    if mode == "auto":  # atf copies etc.orig over etc at each module's start
        base = free_ports(64)
        for folder in ("etc.orig", "log", "run", "spool", "tmpfs"):
            (prefix / folder if folder == "etc.orig" else root / folder).mkdir()
        (prefix / "etc.orig" / "slurm.conf").write_text(AUTO_CONF.format(root=root, ctld_port=base,
                                                                         node_port=base + 1))
        shutil.copytree(prefix / "etc.orig", etc)
    slurm_conf = etc / "slurm.conf"
    env = {"PATH": f"{prefix / 'bin'}:{prefix / 'sbin'}:/usr/bin:/bin", "HOME": str(root),
           "SLURM_CONF": str(slurm_conf), "WATTSCHED_CONF": str(slurm_conf), "USER": "root", "LOGNAME": "root",
           # the suite runs as root here (SchedMD's runs as a user with sudo): a slurmrestd it
           # starts itself would refuse root, as Slurm's would
           "SLURMRESTD_SECURITY": "disable_user_check"}
    return etc, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm-git", type=Path, help="a git repository of Slurm's sources")
    source.add_argument("--suite", type=Path, help="a checkout holding testsuite/python")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--mode", choices=("local", "auto"), default="local",
                        help="atf's local-config (a running cluster as it is) or auto-config (atf starts, "
                             "configures and stops the daemons itself, module by module)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "slurm-testsuite")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a test may take")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (tests, -k)")
    args = parser.parse_args()
    # stopped (SIGTERM), it still stops its cluster and takes its sudoers drop-in away
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    python = suite_venv()
    args.out.mkdir(parents=True, exist_ok=True)
    junit = args.out / "junit.xml"
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
        etc, env = site(root, args.mode)
        suite_conf = root / "testsuite.conf"
        suite_conf.write_text(f"SlurmSourceDir={base.parent}\nSlurmBuildDir={base.parent}\n"
                              f"SlurmInstallDir={etc.parent}\nSlurmConfigDir={etc}\n")
        env["SLURM_TESTSUITE_CONF"] = str(suite_conf)
        pytest = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rN", "-v", "--continue-on-collection-errors",
                  f"--timeout={args.timeout}", f"--junitxml={junit}"]
        if args.mode == "auto":
            with open(args.out / "suite.log", "w") as log, installed_as_slurm(etc / "slurm.conf"):
                try:
                    subprocess.run([*pytest, "--auto-config", *(args.pytest_args or ["tests"])], cwd=base / "python",
                                   env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
                finally:  # a module cut short leaves its daemons: scontrol shutdown stops them all
                    subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, check=False)
        else:
            local_config(root, env, args, pytest, base)
    report(args, commit, junit)


def local_config(root: Path, env: dict[str, str], args: argparse.Namespace, pytest: list[str], base: Path) -> None:
    """The suite against ``wattsched emulate`` (etc/emulated.conf, 16 nodes of 8 CPUs) and a
    slurmrestd, both started here and left as they are by atf."""
    cluster = Emulated(root, nodes=16, cpus=8, array=1000)
    # accounting as a Slurm site names it: atf runs its accounting tests only then
    with open(cluster.conf, "a") as conf:
        conf.write("AccountingStorageType=accounting_storage/slurmdbd\n")
    cluster.conf.rename(Path(env["SLURM_CONF"]))
    cluster.conf = Path(env["SLURM_CONF"])
    cluster.env = env
    cluster.start()
    restd = None
    try:
        wait_for(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                        text=True).stdout.split() == ["idle"], 120, what="the nodes idle")
        # slurmrestd as a site runs it (not as root), where atf's local mode looks for it
        port = free_port()
        with open(args.out / "slurmrestd.log", "w") as restd_log:
            restd = subprocess.Popen(["slurmrestd", "-u", "daemon", f"localhost:{port}"], env=env, stderr=restd_log)
        env["SLURM_TESTSUITE_SLURMRESTD_URL"] = f"http://localhost:{port}/"
        with open(args.out / "suite.log", "w") as log, installed_as_slurm(cluster.conf):
            subprocess.run([*pytest, *(args.pytest_args or ["tests"])], cwd=base / "python", env=env, stdout=log,
                           stderr=subprocess.STDOUT, check=False)
    finally:
        if restd is not None:
            restd.terminate()
            restd.wait(30)
        cluster.stop()


def report(args: argparse.Namespace, commit: str, junit: Path) -> None:
    rows = results(junit)
    with open(args.out / "results.tsv", "w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(rows)
    counts = collections.Counter(outcome for _, outcome, _ in rows)
    mode = f"{args.mode}-config mode"
    shape = ("etc/emulated.conf, 16 nodes of 8 CPUs" if args.mode == "local" else
             "atf's own configuration per module, from one node (node0) up, one slurmd each")
    print(f"bench: Slurm's testsuite/python against wattsched ({mode})")
    print(f"workload: testsuite of SchedMD/slurm {commit}, {len(rows)} items; {shape}")
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

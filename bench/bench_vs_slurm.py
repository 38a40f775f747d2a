"""wattsched beside real Slurm: the same commands and workloads against both, in one run.

Slurm is Debian's slurm-wlm (installed when absent; see loopback_slurm.py) with one slurmd per node
on loopback and no accounting. wattsched is ``wattsched emulate`` on etc/emulated.conf cut to the
same shape (IPMI energy through the emulated BMCs, HDF5 profiles and SQLite accounting left on), run
from the installation the README makes. Each figure is printed for both with the ratio that decides:
how many times faster wattsched is (above 1: wattsched ahead), or for memory how many times more it
uses.

    .venv/bin/python bench/bench_vs_slurm.py [--nodes 8] [--cpus 8] [--queued 2000] [--array 1000]
                                             [--memory 1000,10000] [--memory-array 100000]
                                             [--memory-only]

Workloads, in order, each starting from an empty queue: an idle controller's RSS; squeue and sinfo on
the empty cluster; squeue -j and scontrol show job of one held job; srun -N1 true and srun -N<all>
true; sequential ``sbatch -H --wrap true``, then four such loops in parallel, until ``--queued`` jobs
are held; squeue over them and the controller's RSS; scancel of them all (until squeue shows none);
an array of ``--array`` tasks of ``true`` submitted to the empty queue (jobs per second until the
last has ended); the same number of held array tasks released at once; the controller's memory with
each of ``--memory`` held jobs queued, submitted from a login shell's environment, and with one held
array of ``--memory-array`` tasks (on controllers started afresh). Then, where the machine allows,
the two array workloads again on real nodes confined by cgroups (proctrack/cgroup, task/cgroup).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback_slurm import LoopbackSlurm, prepare
from machine import describe, rss_mib

from wattsched.harness.testing import BIN, Cluster, free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Side:
    """One system under test: where its commands are, their environment, its controller's pid."""

    name: str
    bin: Path
    env: dict[str, str]
    controller_pid: Callable[[], int]

    def cmd(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run([str(self.bin / argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)} failed: {done.stderr.strip()}")
        return done.stdout

    def median_ms(self, *argv: str, runs: int = 20) -> float:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            self.cmd(*argv)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    def queued(self) -> int:
        return len(self.cmd("squeue", "-h", "-o", "%i").split())

    def wait_empty(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while self.queued():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the queue did not empty within {timeout:.0f} s")
            time.sleep(0.2)

    def submit(self, *argv: str) -> int:
        found = re.search(r"(\d+)", self.cmd("sbatch", "-o", "/dev/null", *argv))
        assert found, "sbatch printed no job id"
        return int(found.group(1))


def sbatch_loops(side: Side, loops: int, each: int) -> float:
    """Jobs per second of ``loops`` sequential ``sbatch -H`` loops run side by side."""
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            for _ in range(each):
                side.submit("-H", "--wrap", "true")
        except BaseException as error:  # re-raised below, in the main thread
            errors.append(error)

    threads = [threading.Thread(target=loop) for _ in range(loops)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return loops * each / (time.perf_counter() - started)


def timed_until_empty(side: Side, action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    side.wait_empty()
    return time.perf_counter() - started


def workload(side: Side, nodes: int, queued: int, array: int) -> dict[str, float]:
    print(f"  {side.name}: command latency", file=sys.stderr, flush=True)
    fig: dict[str, float] = {"controller RSS idle (MiB)": rss_mib(side.controller_pid())}
    fig["squeue, empty cluster (ms)"] = side.median_ms("squeue")
    fig["sinfo, empty cluster (ms)"] = side.median_ms("sinfo")
    held = side.submit("-H", "--wrap", "true")
    fig["squeue -j ID (ms)"] = side.median_ms("squeue", "-j", str(held))
    fig["scontrol show job ID (ms)"] = side.median_ms("scontrol", "show", "job", str(held))
    side.cmd("scancel", str(held))
    side.wait_empty()
    fig["srun -N1 true (ms)"] = side.median_ms("srun", "-N1", "true", runs=10)
    fig[f"srun -N{nodes} true (ms)"] = side.median_ms("srun", f"-N{nodes}", "true", runs=10)
    print(f"  {side.name}: {queued} held submissions", file=sys.stderr, flush=True)
    sequential = min(200, queued // 2)
    fig["sequential sbatch (jobs/s)"] = sbatch_loops(side, 1, sequential)
    fig["4 parallel sbatch loops (jobs/s)"] = sbatch_loops(side, 4, (queued - sequential) // 4)
    fig[f"squeue with {queued} queued (ms)"] = side.median_ms("squeue", runs=5)
    fig[f"controller RSS, {queued} queued (MiB)"] = rss_mib(side.controller_pid())
    fig[f"scancel of {queued} pending, until none shows (s)"] = \
        timed_until_empty(side, lambda: side.cmd("scancel", "-u", "root"))
    return fig | arrays(side, array)


def login_environment(side: Side) -> dict[str, str]:
    """What ``sbatch`` exports from a user's login shell on Debian (its LS_COLORS is dircolors'
    default), beside the side's own variables: the environment every queued job carries."""
    colors = subprocess.run(["dircolors", "-b"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"LS_COLORS='([^']*)'", colors)
    assert found, "dircolors printed no LS_COLORS"
    return side.env | {
        "LS_COLORS": found.group(1), "SHELL": "/bin/bash", "TERM": "xterm-256color", "LANG": "C.UTF-8",
        "USER": "root", "LOGNAME": "root", "MAIL": "/var/mail/root", "SHLVL": "1", "PWD": side.env["HOME"],
        "SSH_CONNECTION": "192.0.2.10 51234 192.0.2.1 22", "SSH_CLIENT": "192.0.2.10 51234 22",
        "SSH_TTY": "/dev/pts/0", "XDG_SESSION_ID": "42", "XDG_RUNTIME_DIR": "/run/user/0",
        "XDG_SESSION_TYPE": "tty", "XDG_SESSION_CLASS": "user", "MOTD_SHOWN": "pam",
        "LESSOPEN": "| /usr/bin/lesspipe %s", "LESSCLOSE": "/usr/bin/lesspipe %s %s",
        "OLDPWD": side.env["HOME"], "_": "/usr/bin/sbatch",
        "PATH": f"{side.env['PATH']}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/site/bin"}


def memory(side: Side, counts: list[int], array: int) -> dict[str, float]:
    """The controller's RSS, and what each queued job adds to it, with ``counts`` held jobs
    submitted from a login shell (four sbatch loops), then with one held array of ``array`` tasks."""
    shell = Side(side.name, side.bin, login_environment(side), side.controller_pid)
    fig, have = {}, 0
    side.cmd("squeue")  # each controller has answered a command before its idle size is taken
    base = fig["controller RSS idle, started afresh (MiB)"] = rss_mib(side.controller_pid())
    for count in counts:
        print(f"  {side.name}: {count} held jobs from a login shell", file=sys.stderr, flush=True)
        sbatch_loops(shell, 4, (count - have) // 4)
        have += (count - have) // 4 * 4
        rss = rss_mib(side.controller_pid())
        fig[f"controller RSS, {count} queued from a login shell (MiB)"] = rss
        fig[f"controller RSS per queued job, at {count} (KiB)"] = (rss - base) * 1024 / have
    side.cmd("scancel", "-u", "root")
    side.wait_empty()
    print(f"  {side.name}: one held array of {array} tasks", file=sys.stderr, flush=True)
    base = rss_mib(side.controller_pid())
    job = shell.submit("-H", f"--array=0-{array - 1}", "--wrap", "true")
    rss = rss_mib(side.controller_pid())
    fig[f"controller RSS, one held array of {array} tasks (MiB)"] = rss
    fig[f"controller RSS per held array task, of {array} (KiB)"] = (rss - base) * 1024 / array
    side.cmd("scancel", str(job))
    side.wait_empty()
    return fig


def arrays(side: Side, array: int) -> dict[str, float]:
    """End-to-end throughput: an array of ``true`` submitted to the empty queue, then as many held
    tasks released at once (jobs per second until the last has ended)."""
    print(f"  {side.name}: {array}-task arrays", file=sys.stderr, flush=True)
    fig = {}
    took = timed_until_empty(side, lambda: side.submit(f"--array=0-{array - 1}", "--wrap", "true"))
    fig[f"{array}-task array of true, submit to all ended (jobs/s)"] = array / took
    job = side.submit("-H", f"--array=0-{array - 1}", "--wrap", "true")
    took = timed_until_empty(side, lambda: side.cmd("scontrol", "release", str(job)))
    fig[f"{array} held array tasks released at once (jobs/s)"] = array / took
    return fig


def confined(root: Path, nodes: int, cpus: int, array: int) -> dict[str, float] | None:
    """The array workloads on real (not emulated) nodes confined by proctrack/cgroup and task/cgroup
    with ConstrainRAMSpace: every job and step gets its cgroups. None where the machine cannot
    (not root, or no writable cgroup v1 memory hierarchy)."""
    if os.geteuid() != 0 or not os.access("/sys/fs/cgroup/memory", os.W_OK):
        return None
    cluster = Cluster(root, nodes=nodes, cpus=cpus, agents=2,
                      extra=f"ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\nMaxArraySize={array + 1}")
    (root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n")
    cluster.start()
    try:
        assert cluster.controller is not None
        pid = cluster.controller.pid
        return arrays(Side("wattsched, cgroups", BIN, cluster.env, lambda: pid), array)
    finally:
        cluster.stop()


class Emulated:
    """``wattsched emulate`` on etc/emulated.conf cut to ``nodes`` nodes, its state under ``root``."""

    def __init__(self, root: Path, nodes: int, cpus: int, array: int, max_jobs: int) -> None:
        text = (ROOT / "etc" / "emulated.conf").read_text()
        state = root / "wattsched-state"
        last = f"node{nodes:02d}"
        replace = {
            r"^StateSaveLocation=.*$": f"StateSaveLocation={state}/ctld",
            r"^SlurmdSpoolDir=.*$": f"SlurmdSpoolDir={state}/spool",
            r"^ProfileHDF5Dir=.*$": f"ProfileHDF5Dir={state}/profile",
            r"^SlurmctldPort=.*$": f"SlurmctldPort={free_port()}",
            r"^EmulatedBMCPort=.*$": f"EmulatedBMCPort={free_port()}",
            r"node\[01-16\]": f"node[01-{nodes:02d}]" if nodes > 1 else last,
            r"CPUs=8 Sockets=1 CoresPerSocket=8": f"CPUs={cpus} Sockets=1 CoresPerSocket={cpus}",
        }
        for pattern, new in replace.items():
            text, count = re.subn(pattern, new, text, flags=re.M)
            assert count, f"etc/emulated.conf no longer has {pattern}"
        self.conf = root / "emulated.conf"
        self.conf.write_text(text + f"MaxArraySize={max(1001, array + 1)}\nMaxJobCount={max_jobs}\n")
        self.state = state / "ctld"
        self.env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(root),
                    "WATTSCHED_CONF": str(self.conf), "SLURM_CONF": str(self.conf)}

    def start(self) -> Emulated:
        subprocess.run([str(BIN / "wattsched"), "emulate", str(self.conf), "--daemon"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        return self

    def controller_pid(self) -> int:
        import json

        return int(json.loads((self.state / "emulate.json").read_text())["controller"])

    def stop(self) -> None:
        subprocess.run([str(BIN / "wattsched"), "emulate", "--stop", str(self.conf)], env=self.env,
                       stdout=subprocess.DEVNULL)


def ratio(name: str, slurm: float, ours: float) -> str:
    if "RSS" in name:  # (Slurm's array is one record: what it adds may be too little to see)
        return f"{ours / slurm:.2f}x Slurm's memory" if slurm >= 0.05 else "Slurm's: too little to see"
    faster = slurm / ours if "(ms)" in name or "(s)" in name else ours / slurm
    return f"{faster:.2f}x " + ("faster" if faster >= 1 else "as fast")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=8)
    parser.add_argument("--queued", type=int, default=2000)
    parser.add_argument("--array", type=int, default=1000)
    parser.add_argument("--memory", default="1000,10000",
                        help="numbers of held jobs to measure the controller's memory with, in rising order")
    parser.add_argument("--memory-array", type=int, default=100000)
    parser.add_argument("--memory-only", action="store_true",
                        help="the memory rows alone (100,000 jobs take each side minutes to submit)")
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.memory.split(","))
    # room on both sides for every job of the run at once: Slurm keeps the ended ones for MinJobAge
    # (and refuses a submission past MaxJobCount); its MaxArraySize counts task ids, from 0
    max_jobs = max(100000, args.queued + 2 * args.array + counts[-1] + args.memory_array + 1000)
    max_array = max(args.array, args.memory_array) + 1
    why, version = prepare()
    if why:
        print(f"bench: wattsched beside Slurm\nnot measured: {why}")
        return
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "wattsched")], stdout=subprocess.DEVNULL)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        def on_slurm(name: str, run: Callable[[Side], dict[str, float]]) -> dict[str, float]:
            slurm = LoopbackSlurm(Path(tmp) / name, args.nodes, args.cpus,
                                  f"MaxJobCount={max_jobs}\nMaxArraySize={max_array}").start()
            try:
                return run(Side("slurm", Path("/usr/bin"), slurm.env, lambda: slurm.controller_pid))
            finally:
                slurm.stop()

        def on_wattsched(name: str, run: Callable[[Side], dict[str, float]]) -> dict[str, float]:
            (Path(tmp) / name).mkdir()
            emulated = Emulated(Path(tmp) / name, args.nodes, args.cpus, max_array - 1, max_jobs).start()
            try:
                return run(Side("wattsched", BIN, emulated.env, emulated.controller_pid))
            finally:
                emulated.stop()

        def measured(side: Side) -> dict[str, float]:
            return workload(side, args.nodes, args.queued, args.array)

        def memory_of(side: Side) -> dict[str, float]:
            return memory(side, counts, args.memory_array)

        # the memory rows on controllers started afresh: jobs the other workloads ended would still be
        # in memory (MinJobAge), and the memory they freed would hold the new jobs unseen
        results["slurm"] = ({} if args.memory_only else on_slurm("slurm", measured)) | \
            on_slurm("slurm-memory", memory_of)
        results["wattsched"] = ({} if args.memory_only else on_wattsched("wattsched", measured)) | \
            on_wattsched("wattsched-memory", memory_of)
        with_cgroups = None if args.memory_only else confined(Path(tmp) / "confined", args.nodes, args.cpus,
                                                               args.array)
    print("bench: wattsched beside Slurm, same commands, one run")
    print(f"workload: {args.nodes} nodes x {args.cpus} CPUs on loopback; {version} (one slurmd per node, no "
          f"accounting) against wattsched emulate (IPMI energy, HDF5 profiles, SQLite accounting)")
    shell = login_environment(Side("", BIN, {"PATH": "", "HOME": "/root"}, os.getpid))
    print(f"memory rows: held jobs of `sbatch -H --wrap true` from a login shell's environment of "
          f"{sum(len(k) + len(v) + 2 for k, v in shell.items())} bytes ({len(shell)} variables, LS_COLORS "
          "dircolors' default) beside each side's own")
    print(f"machine: {describe()}")
    width = max(map(len, results["slurm"]))
    print(f"{'figure':<{width}}  {'Slurm':>10}  {'wattsched':>10}  wattsched/Slurm")
    for name, theirs in results["slurm"].items():
        ours = results["wattsched"][name]
        print(f"{name:<{width}}  {theirs:>10.1f}  {ours:>10.1f}  {ratio(name, theirs, ours)}")
    print()
    if args.memory_only:
        return
    if with_cgroups is None:
        print("with cgroups: not measured (needs root and a writable cgroup v1 memory hierarchy)")
        return
    print(f"with cgroups: wattsched on {args.nodes} real nodes (not emulated) under proctrack/cgroup, task/cgroup "
          f"and ConstrainRAMSpace, beside the same run's Slurm figures (Slurm without cgroups)")
    for name, ours in with_cgroups.items():
        theirs = results["slurm"][name]
        print(f"{name:<{width}}  {theirs:>10.1f}  {ours:>10.1f}  {ratio(name, theirs, ours)}")
    print()


if __name__ == "__main__":
    main()

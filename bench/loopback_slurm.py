"""A real Slurm on loopback, shaped like the emulated cluster it is measured beside.

Debian's slurm-wlm (installed with apt-get when absent and the bench runs as root), munged started
as its own user when nothing answers on its socket, then one slurmctld and one slurmd per node, each
slurmd on its own port under its node's name (``slurmd -N``), all on 127.0.0.1. No accounting
(Slurm's fastest set-up); ``SlurmdParameters=config_overrides`` lets eight-CPU nodes register on a
smaller host, as the emulated nodes do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from wattsched.harness import testing
from wattsched.harness.testing import free_port

SBIN = Path("/usr/sbin")


def ensure_installed() -> str | None:
    """None when Slurm's daemons are here (installing them if root may); else why they are not."""
    if (SBIN / "slurmctld").exists() and (SBIN / "slurmd").exists() and shutil.which("munge"):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "Debian's slurm-wlm is not installed and this user cannot install it (apt-get as root)"
    done = subprocess.run(["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"],
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True, text=True)
    if done.returncode != 0:
        return f"apt-get install slurm-wlm failed: {done.stderr.strip()[-300:]}"
    return None


def ensure_munge() -> None:
    """munged answering (Slurm's auth/munge): wattsched.harness.testing starts it where it is not."""
    why = testing.ensure_munge()
    if why:
        raise RuntimeError(why)


def prepare() -> tuple[str, str]:
    """Slurm's daemons installed and munged answering: ("", slurmctld's version line), else (why
    not, "")."""
    why = ensure_installed()
    if why:
        return why, ""
    ensure_munge()
    return "", subprocess.run([str(SBIN / "slurmctld"), "-V"], capture_output=True, text=True).stdout.strip()


class LoopbackSlurm:
    """slurmctld and ``nodes`` slurmd of ``cpus`` CPUs each, on loopback, under ``root``."""

    def __init__(self, root: Path, nodes: int = 8, cpus: int = 8, extra: str = "") -> None:
        self.root, self.nodes, self.cpus = root, nodes, cpus
        self.names = [f"n{i:02d}" for i in range(1, nodes + 1)]
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        (root / "state").mkdir(parents=True, exist_ok=True)
        (root / "log").mkdir(exist_ok=True)
        lines = [
            "ClusterName=bench", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={free_port()}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
            f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.%n.log",
            "SlurmctldDebug=error", "SlurmdDebug=error",
            "ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides", "ReturnToService=2", "MaxJobCount=100000",
            "MaxArraySize=10001", "MinJobAge=300", "KillWait=5", *extra.splitlines()]
        lines += [f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
                  f"CPUs={cpus} State=UNKNOWN" for name in self.names]
        lines.append(f"PartitionName=debug Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for key in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SRUN_"))]:
            if key != "SLURM_CONF":
                del self.env[key]

    def start(self, timeout: float = 60) -> LoopbackSlurm:
        self.procs.append(subprocess.Popen([str(SBIN / "slurmctld"), "-D", "-i", "-f", str(self.conf)],
                                           env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))
        for name in self.names:
            (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)
            self.procs.append(subprocess.Popen([str(SBIN / "slurmd"), "-D", "-N", name, "-f", str(self.conf)],
                                               env=self.env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + timeout
        while True:
            # Slurm's own sinfo, whatever PATH holds (wattsched's commands have the same names)
            done = subprocess.run(["/usr/bin/sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                                  text=True)
            idle = [line for line in done.stdout.splitlines() if line.split()[-1] == "idle"]
            if len(idle) == self.nodes:
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Slurm's nodes did not come up within {timeout:.0f} s: {done.stdout}"
                                   f"{done.stderr}; logs in {self.root}/log")
            time.sleep(0.2)

    @property
    def controller_pid(self) -> int:
        return self.procs[0].pid

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

"""slurmd: a node agent under Slurm's program name and options (slurmd(8)), as an administrator's
habits, init scripts and systemd units, and Slurm's own test suite, start it.

It runs the same agent as ``wattsched noded``, for the node -N names (else the one named like this
host), on the node's Port or SlurmdPort, in the background unless -D, with its pid in SlurmdPidFile
and its log in -L's file or SlurmdLogFile (``%n`` there: the node's name). -C prints this host's
hardware as a NodeName line, as Slurm's does, for slurm.conf. Options of Slurm's that concern what
this agent has no part of (dynamic nodes, configless start, a slurmstepd path, memory locking,
cleaning Slurm's shared memory) are accepted and change nothing.
"""

from __future__ import annotations

import os
import sys

from wattsched.cli.options import NO, OPT, REQ, Opt
from wattsched.cli.slurmdaemon import DaemonCommand, start

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any

    from wattsched.config import Config
    from wattsched.service.daemonstart import Start

USAGE = """\
Usage: slurmd [OPTIONS]
   -b                         Report node reboot now.
   -c                         Force cleanup of slurmd shared memory.
   -C                         Print node configuration information and exit.
   --conf                     Dynamic node configuration, works with -Z.
   --conf-server host[:port]  Get configs from slurmctld at `host[:port]`.
   -d stepd                   Pathname to the slurmstepd program.
   -D                         Run daemon in foreground.
   --extra                    Arbitrary descriptive string.
   -f config                  Read configuration from the specified file.
   -F[feature]                Start as Dynamic Future node w/optional Feature.
   -G                         Print node's GRES configuration and exit.
   -h                         Print this help message.
   --instance-id              Cloud instance ID of node.
   --instance-type            Cloud instance type of node.
   -L logfile                 Log messages to the file `logfile'.
   -M                         Use mlock() to lock slurmd pages into memory.
   -n value                   Run the daemon at the specified nice value.
   -N node                    Run the daemon for specified nodename.
   -s                         Change working directory to SlurmdLogFile/SlurmdSpoolDir.
   --systemd                  Started from a systemd unit file.
   -v                         Verbose mode. Multiple -v's increase verbosity.
   -V                         Print version information and exit.
   -Z                         Start as Dynamic Normal node.
"""

COMMAND = DaemonCommand("slurmd", USAGE, [
    Opt("b", None, NO, dest="reboot"),
    Opt("c", None, NO, dest="clean"),
    Opt("C", None, NO, dest="print_config"),
    Opt("d", None, REQ, dest="stepd"),
    Opt("F", None, OPT, dest="future", const=""),
    Opt("G", None, NO, dest="print_gres"),
    Opt("M", None, NO, dest="mlock"),
    Opt("N", None, REQ, dest="node"),
    Opt("Z", None, NO, dest="dynamic"),
    Opt(None, "authinfo", REQ), Opt(None, "conf", REQ), Opt(None, "conf-server", REQ), Opt(None, "extra", REQ),
    Opt(None, "instance-id", REQ), Opt(None, "instance-type", REQ),
])


def files(config: Config, opts: dict[str, Any]) -> tuple[str, str]:
    from wattsched.noded.agent import node_path

    node = opts.get("node") or os.uname().nodename.split(".")[0]
    log_file = node_path(config.slurmd_log_file, node)
    return node_path(config.slurmd_pid_file, node), os.path.dirname(log_file) if log_file else config.slurmd_spool_dir


def address(config: Config, node: str | None) -> tuple[str, str]:
    """Where the agent listens, and the address the controller is to reach it at: the node's
    NodeAddr, else (its name being this host's) the host's name; an emulated cluster's virtual
    nodes live on loopback."""
    if config.emulated_nodes:
        return "127.0.0.1", "127.0.0.1"
    conf = next((n for n in config.nodes if n.name == node), None)
    return "0.0.0.0", (conf.node_addr if conf and conf.node_addr else node or os.uname().nodename.split(".")[0])


def run(path: str, config: Config, opts: dict[str, Any], how: Start) -> None:
    from wattsched.service.daemonstart import without_unused_imports

    without_unused_imports()  # before the daemon's libraries are imported
    from wattsched.noded.main import run as run_agent

    host, advertise = address(config, opts.get("node"))
    run_agent(path, opts.get("node"), host, None, advertise, how)  # (errors: slurmdaemon.start's to tell)


def main() -> None:
    argv = sys.argv[1:]
    opts, _ = COMMAND.parse(argv)
    if opts.get("print_config"):
        from wattsched.noded.hosttopo import node_line

        sys.stdout.write(node_line())
        raise SystemExit(0)
    if "future" in opts and opts.get("dynamic"):
        sys.stderr.write("slurmd: error: -F and -Z options are mutually exclusive\n")
        raise SystemExit(1)
    raise SystemExit(start(COMMAND, argv, files, run))

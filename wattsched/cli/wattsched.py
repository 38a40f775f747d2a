"""``wattsched``: run the controller or a node agent, emulate a cluster, print the version."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from typing import Annotated

from wattsched.cli.common import CLIError, config_file, die, missing_part
from wattsched.cli.plaintyper import typer
from wattsched.cli.power import app as power_app
from wattsched.cli.simulate import simulate
from wattsched.service.daemonstart import without_unused_imports

app = typer.Typer(add_completion=False, no_args_is_help=True, help="wattsched daemons and tools.")

# a checkout's etc/ (wattsched/cli/wattsched.py is three levels below it)
DEFAULT_EMULATED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "etc", "emulated.conf")


@app.command()
def controller(config: Annotated[str | None, typer.Argument(help="Configuration file.")] = None,
               port: Annotated[int | None, typer.Option(help="Override SlurmctldPort.")] = None,
               name: Annotated[str | None, typer.Option(
                   help="Which SlurmctldHost this is (default: the one named like this host).")] = None) -> None:
    """Run the controller in the foreground (a standby while another one is active)."""
    without_unused_imports()
    from wattsched.config import ConfigError
    from wattsched.controller.main import run
    from wattsched.controller.startup import StartupError

    try:
        run(config_file(config), port=port, name=name)
    except (ConfigError, StartupError) as exc:
        raise CLIError(str(exc)) from exc


@app.command()
def noded(config: Annotated[str | None, typer.Argument(help="Configuration file.")] = None,
          nodes: Annotated[str | None, typer.Option(help="Hostlist of the nodes this agent hosts.")] = None,
          host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
          port: Annotated[int | None, typer.Option(help="Port (default: the node's Port or SlurmdPort).")] = None,
          advertise: Annotated[str | None, typer.Option(help="Address the controller should use.")] = None) -> None:
    """Run a node agent in the foreground."""
    without_unused_imports()
    from wattsched.config import ConfigError
    from wattsched.noded.main import AgentStartError, run

    try:
        run(config_file(config), nodes, host, port, advertise)
    except (ConfigError, AgentStartError, OSError) as exc:
        raise CLIError(str(exc)) from exc


@app.command()
def emulate(config: Annotated[str | None, typer.Argument(help="Cluster configuration "
                                                          "(default: etc/emulated.conf).")] = None,
            agents: Annotated[int | None, typer.Option(help="Agent processes (default: EmulatedAgents).")] = None,
            daemon: Annotated[bool, typer.Option("--daemon", help="Return once the cluster is up.")] = False,
            stop_: Annotated[bool, typer.Option("--stop", help="Stop the cluster started from CONFIG.")] = False,
            ) -> None:
    """Run an emulated cluster of virtual nodes on this host."""
    from wattsched.cli import emulate as emu
    from wattsched.config import ConfigError, load

    path = os.path.abspath(config or os.environ.get("WATTSCHED_CONF") or DEFAULT_EMULATED) if stop_ else \
        config_file(config or DEFAULT_EMULATED)
    try:
        if stop_:
            if not emu.stop(path):
                raise CLIError(f"no emulated cluster is running from {path}")
            sys.stderr.write("wattsched: emulated cluster stopped\n")
            return
        started = time.time()
        info = emu.start(path, agents, None)
        conf = load(path, globals_only=True)
    except ConfigError as exc:
        raise CLIError(str(exc)) from exc
    controllers = " and ".join(f"{name} at {url}" for (name, _), url in zip(conf.slurmctld_hosts,
                                                                          conf.controller_urls, strict=True))
    sys.stderr.write(f"wattsched: cluster '{conf.cluster_name}' up in {time.time() - started:.1f} s "
                     f"(controller {controllers}, {len(info['agents'])} agent processes)\n")
    sys.stderr.write(f"wattsched: dashboard at {conf.controller_url}/dashboard/ (paste the token `scontrol token` "
                     "prints)\n")
    print(emu.shell_line(path))
    sys.stdout.flush()
    if daemon:
        return
    sys.stderr.write("wattsched: press Ctrl-C to stop the cluster\n")
    stopping = False

    def handle(_sig, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    # up while a controller is: with backups, killing the one in charge is what a newcomer tries
    while not stopping and any(emu.alive(pid) for pid in info["controllers"]):
        time.sleep(0.5)
    emu.stop(path)
    sys.stderr.write("wattsched: emulated cluster stopped\n")


@app.command()
def bmc(config: Annotated[str | None, typer.Argument(help="Configuration file.")] = None,
        nodes: Annotated[str | None, typer.Option(help="Hostlist of the nodes to serve (default: all).")] = None,
        ) -> None:
    """Run the emulated BMCs of the configured virtual nodes on loopback: over IPMI (RMCP+), each in a
    process of its own (pyghmi's event loop stalls when one process serves many), forked from one;
    over Redfish (HTTPS), all in the first, where the cluster reads or switches them so."""
    from wattsched import hostlist
    from wattsched.config import ConfigError, load
    from wattsched.noded import bmc as emulated

    try:
        path = config_file(config)
        conf = load(path)
        names = hostlist.expand(nodes) if nodes else [n.name for n in conf.nodes]
    except (ConfigError, OSError) as exc:
        raise CLIError(str(exc)) from exc
    protocols = conf.emulated_bmc_protocols or frozenset({"ipmi"})
    redfish = None
    if "redfish" in protocols:
        from wattsched.noded import redfishbmc

        redfish = functools.partial(redfishbmc.serve, conf, emulated.views(conf, names))
    if "ipmi" not in protocols and redfish is not None:
        redfish()
        return
    if len(names) == 1 and redfish is None:
        emulated.serve_ipmi(conf, names)
        return
    children = []
    for name in names:  # forked after pyghmi is imported, before it has a socket or a thread
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                _die_with(parent)
                emulated.serve_ipmi(conf, [name])
            finally:
                os._exit(1)
        children.append(pid)

    def stop(_sig, _frame):
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if redfish is not None:  # after the forks: a thread does not survive one
        import threading

        threading.Thread(target=redfish, name="redfish", daemon=True).start()
    os.wait()  # one BMC died: take the others down with it
    stop(0, None)


def _die_with(parent: int) -> None:
    """Have the kernel end this process when ``parent`` dies, even by SIGKILL (Linux prctl)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before we asked
        raise SystemExit(0)


app.add_typer(power_app, name="power")
app.command(name="simulate")(simulate)


profile_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Job power profiles (HDF5).")
app.add_typer(profile_app, name="profile")


@profile_app.command("plot")
def profile_plot(
    job: Annotated[int, typer.Option("-j", "--jobs", help="Job id.")],
    input_: Annotated[str | None, typer.Option("-i", "--input", help="Merged profile (default: the job's "
                                                                      "job_<id>.h5 in ProfileHDF5Dir).")] = None,
    output: Annotated[str | None, typer.Option("-o", "--output", help="PNG file (default: ./job_<id>_power.png).")]
    = None,
    user: Annotated[str | None, typer.Option("--user", help="The job's user (default: you).")] = None,
) -> None:
    """Draw a job's power over time, one line per node, to a PNG."""
    from wattsched.cli.profiles import find_merged, plot_power

    path = input_ or find_merged(job, user)
    out = output or f"job_{job}_power.png"
    plot_power(path, job, out)
    print(out)


@app.command()
def completion() -> None:
    """Print bash completion for the Slurm commands: source <(wattsched completion)."""
    from wattsched.cli.completion import bash

    print(bash())


@app.command()
def version() -> None:
    """Print the version."""
    from wattsched import __version__

    print(f"wattsched {__version__}")


def main() -> None:
    try:
        app(prog_name="wattsched")
    except CLIError as exc:
        die("wattsched", str(exc))
    except ModuleNotFoundError as exc:
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        die("wattsched", str(missing_part(command, exc, f"wattsched {command}")))


if __name__ == "__main__":
    main()

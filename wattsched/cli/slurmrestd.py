"""slurmrestd: Slurm's REST API daemon under its name and options (slurmrestd(8)), listening where
the site says (``slurmrestd [OPTIONS] [host]:port|unix:/path ...``, or SLURMRESTD_LISTEN) and
sending each request on to the controller, which serves the API itself (wattsched.service.restproxy).
Without an address it answers the requests on its standard input (inetd's way).

As Slurm's, it refuses to run as root, its group or nobody unless told (-u/-g to drop to after the
sockets are open, or SLURMRESTD_SECURITY=disable_user_check). The controller checks the token each
request carries (rest_auth/jwt); on standard input, a request without one is its caller's
(rest_auth/local: the token the commands would use). -a, -s and -d name Slurm's plugins (``list``
lists them); every data parser version the controller has is served. -t and --max-connections
bound it.
"""

from __future__ import annotations

import os
import sys

from wattsched.cli.options import NO, REQ, Opt, QuietCommand

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import NoReturn

USAGE = """\
Usage: slurmrestd [OPTIONS] [host:port]...
\t-a <authentication types>
\t\tList of authentication types to accept.
\t-d <data_parser plugins to load>
\t\tCSV list of data_parser plugins.
\t-f file
\t\tUse specified file for slurmctld configuration
\t-h, --help
\t\tPrint this help message.
\t--max-connections <count>
\t\tSet max count of connections to process.
\t-s <OpenAPI plugins to load>
\t\tCSV list of OpenAPI plugins.
\t-t <thread count>
\t\tNumber of threads to use for processing.
\t-u <user>
\t\tsetuid() to user after opening sockets.
\t-v
\t\tVerbose mode. Multiple -v's increase verbosity.
\t-V
\t\tPrint version information and exit.
"""


COMMAND = QuietCommand("slurmrestd", "[OPTIONS] [host:port]...", USAGE, [
    Opt("a", None, REQ, dest="auth"), Opt("d", None, REQ, dest="data_parsers"), Opt("f", None, REQ, dest="file"),
    Opt("g", None, REQ, dest="group"), Opt("h", "help", NO, dest="help"), Opt("s", None, REQ, dest="openapi"),
    Opt("t", None, REQ, dest="threads"), Opt("u", None, REQ, dest="user"),
    Opt("v", None, NO, kind="count", dest="verbose"), Opt("V", None, NO, kind="version"),
    Opt(None, "max-connections", REQ, dest="max_connections"),
])
# the plugins slurmrestd -a, -s and -d name (list: each one); a bare name stands for its full one
AUTH_TYPES = ("rest_auth/jwt", "rest_auth/local")
OPENAPI = ("openapi/slurmctld", "openapi/slurmdbd")
SECURITY = ("disable_unshare_sysv", "disable_unshare_files", "disable_user_check", "become_user")


def fatal(message: str) -> NoReturn:
    sys.stderr.write(f"slurmrestd: fatal: {message}\n")
    raise SystemExit(1)


def _ids(opts: dict) -> tuple[int | None, int | None]:
    """-u's uid and -g's gid (names or numbers), checked as Slurm's."""
    import grp
    import pwd

    uid = gid = None
    if opts.get("user"):
        try:
            entry = pwd.getpwnam(opts["user"]) if not opts["user"].isdigit() else pwd.getpwuid(int(opts["user"]))
        except KeyError:
            fatal(f"Unable to resolve user: {opts['user']}")
        uid, gid = entry.pw_uid, entry.pw_gid
    if opts.get("group"):
        try:
            gid = grp.getgrnam(opts["group"]).gr_gid if not opts["group"].isdigit() else int(opts["group"])
        except KeyError:
            fatal(f"Unable to resolve gid: {opts['group']}")
    return uid, gid


def _lock_down(uid: int | None, gid: int | None, security: set[str]) -> None:
    """Drop to -u/-g once the sockets are open; refuse root, its group and nobody, as Slurm's."""
    if gid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
    if uid is not None:
        os.setresuid(uid, uid, uid)
    if os.getuid() == 65534 or os.getgid() == 65534:
        fatal("slurmrestd must not be run as nobody")
    if "disable_user_check" not in security:
        if os.getuid() == 0:
            fatal("slurmrestd should not be run as the root user.")
        if os.getgid() == 0:
            fatal("slurmrestd should not be run with the root goup.")


def plugins(kind: str, asked: str | None, known: tuple[str, ...], what: str) -> list[str]:
    """The plugins of ``kind`` asked for (all by default), checked against ``known``; ``list``
    names them all on standard error and ends, as Slurm's."""
    if asked is not None and asked.strip().lower() == "list":
        sys.stderr.write(f"Possible {what} plugins:\n" + "".join(f"{name}\n" for name in known))
        raise SystemExit(0)
    chosen = []
    for name in (n.strip() for n in (asked or ",".join(known)).split(",")):
        full = name if name.startswith(f"{kind}/") else f"{kind}/{name}"
        if full not in known:
            fatal(f"Unable to find plugin: {full}")
        chosen.append(full)
    return chosen


def slurmrestd(argv: list[str]) -> int:
    opts, addresses = COMMAND.parse(argv)
    if opts.get("help"):
        sys.stderr.write(USAGE)
        return 0
    security = set(filter(None, os.environ.get("SLURMRESTD_SECURITY", "").split(",")))
    if security - set(SECURITY):
        fatal(f"Unexpected value in SLURMRESTD_SECURITY={os.environ['SLURMRESTD_SECURITY']}")
    auth = plugins("rest_auth", opts.get("auth") or os.environ.get("SLURMRESTD_AUTH_TYPES"), AUTH_TYPES,
                   "REST authentication")
    from wattsched import dataversions

    plugins("openapi", opts.get("openapi") or os.environ.get("SLURMRESTD_OPENAPI_PLUGINS"), OPENAPI, "OpenAPI")
    plugins("data_parser", opts.get("data_parsers") or os.environ.get("SLURMRESTD_DATA_PARSER_PLUGINS"),
            tuple(f"data_parser/{v}" for v in dataversions.VERSIONS), "data_parser")
    threads = opts.get("threads")
    if threads is not None:
        count = int(threads) if threads.lstrip("-").isdigit() else 0
        if count < 2:
            fatal("Request at least 2 threads for processing")
        if count > 1024:
            fatal("Excessive thread count")
    connections = opts.get("max_connections") or os.environ.get("SLURMRESTD_MAX_CONNECTIONS")
    if connections is not None and (not connections.isdigit() or int(connections) < 1):
        fatal(f"Invalid max connection count: {connections}")
    addresses = addresses or [a for a in os.environ.get("SLURMRESTD_LISTEN", "").split(",") if a]
    uid, gid = _ids(opts)
    from wattsched import config as config_mod
    from wattsched.cli.common import CLIError, config_file

    try:
        config = config_mod.load(config_file(opts.get("file")), globals_only=True)
    except (CLIError, config_mod.ConfigError) as exc:
        fatal(str(exc))
    from wattsched import logs
    from wattsched.service.daemonstart import without_unused_imports

    without_unused_imports()  # before uvicorn and httpx
    from wattsched.service import restproxy

    if not addresses:  # inetd's way, or a request on a pipe: standard input and output
        _lock_down(uid, gid, security)
        local = None
        if "rest_auth/local" in auth:
            from wattsched.cli.common import Client

            local = Client(config).token()
        return restproxy.serve_pipe(list(config.controller_urls), config.message_timeout_s, local)
    try:
        sockets = [restproxy.listen(address) for address in addresses]
    except ValueError as exc:
        fatal(str(exc))
    except OSError as exc:
        fatal(f"Unable to bind listen address: {exc.strerror}")
    _lock_down(uid, gid, security)
    logs.setup(logs.louder(os.environ.get("SLURMRESTD_DEBUG") or "info", opts.get("verbose", 0)))
    restproxy.serve(sockets, list(config.controller_urls), config.message_timeout_s,
                    int(connections) if connections else None)
    return 0


def main() -> None:
    from wattsched.cli.options import run

    run("slurmrestd", lambda: slurmrestd(sys.argv[1:]))

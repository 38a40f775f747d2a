"""strigger: set, get or clear event triggers, as Slurm's: a program run (as its setter, on the
controller's host) when a node goes down, drains, comes back, stays idle, when a job ends or nears
its time limit, when the configuration is read again, a backup controller takes over or the
accounting database goes away or returns; given the nodes or the job as its last argument.

The checks Slurm's strigger makes before asking (one mode, a trigger and a program for --set, an
absolute program path that exists and is a regular file, offsets within +-32000 s) are made here
too; the controller makes the others (see wattsched.controller.triggerctl).
"""

from __future__ import annotations

import os
import pwd
import stat
import sys

from wattsched.cli.common import Client, CLIError, print_json
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, refused, run, standard

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any

COMMAND = Command("strigger", "[--set | --get | --clear | --version] [-aAbBcCdDefFgGhHiIjnNopQrtuv]", [
    Opt(None, "set", NO, "create a trigger"),
    Opt(None, "get", NO, "get trigger information"),
    Opt(None, "clear", NO, "delete a trigger"),
    "",
    Opt("a", "primary_slurmctld_failure", NO, "trigger event when primary slurmctld fails"),
    Opt("b", "primary_slurmctld_resumed_control", NO, "trigger event on primary slurmctld resumed control"),
    Opt("C", "backup_slurmctld_assumed_control", NO, "trigger event when backup slurmctld assumed control"),
    Opt("d", "down", NO, "trigger event when node goes DOWN"),
    Opt("D", "drained", NO, "trigger event when node becomes DRAINED"),
    Opt(None, "draining", NO, "trigger event when node is DRAINING but not already DRAINED"),
    Opt("f", "fini", NO, "trigger event when job finishes"),
    Opt(None, "flags", REQ, "trigger event flag (perm = permanent)", metavar="perm"),
    Opt("g", "primary_slurmdbd_failure", NO, "trigger when primary slurmdbd fails"),
    Opt("G", "primary_slurmdbd_resumed_operation", NO,
        "trigger when primary slurmdbd resumed operation after failure"),
    Opt("h", "primary_database_failure", NO, "trigger when primary database fails"),
    Opt("H", "primary_database_resumed_operation", NO,
        "trigger when primary database resumed operation after failure"),
    Opt("i", "id", REQ, "a trigger's ID number", metavar="#", kind="int"),
    Opt("I", "idle", NO, "trigger event when node remains IDLE"),
    Opt("j", "jobid", REQ, "trigger related to specific jobid", metavar="#"),
    Opt("M", "cluster", REQ, "cluster to issue commands to (this one)", metavar="name", dest="clusters"),
    Opt(None, "clusters", REQ, "same as --cluster", metavar="name"),
    Opt("n", "node", OPT, "trigger related to specific node, all nodes by default", metavar="host"),
    Opt("N", "noheader", NO, "Do not print the message header"),
    Opt("o", "offset", REQ, "trigger's offset time from event, negative to precede", metavar="#", kind="int"),
    Opt("p", "program", REQ, "pathname of program to execute when triggered", metavar="path"),
    Opt("Q", "quiet", NO, "quiet mode (suppress informational messages)"),
    Opt("r", "reconfig", NO, "trigger event on configuration changes"),
    Opt("R", "resume", NO, "trigger event when node is set to RESUME state"),
    Opt("t", "time", NO, "trigger event on job's time limit"),
    Opt("u", "up", NO, "trigger event when node returned to service from DOWN state"),
    Opt(None, "user", REQ, "a user name or ID to filter triggers by", metavar="user"),
    Opt("v", "verbose", NO, "print detailed event logging", kind="count"),
    Opt(None, "json", NO, "--get: the triggers as JSON (wattsched's)"),
    refused(None, "burst_buffer", NO, "there are no burst buffers here"),
    refused(None, "front_end", NO, "there are no front end nodes here"),
    refused("F", "fail", NO, "nodes have no FAIL state here"),
    refused("A", "primary_slurmctld_resumed_operation", NO, "the controllers do not watch each other's health"),
    refused("B", "backup_slurmctld_failure", NO, "the controllers do not watch each other's health"),
    refused("c", "backup_slurmctld_resumed_operation", NO, "the controllers do not watch each other's health"),
    refused("e", "primary_slurmctld_acct_buffer_full", NO,
            "the accounting outbox is the state store, never full while it can be written"),
    "Help options:",
    *standard(None),
], help_usage="[--set | --get | --clear] [OPTIONS]", operands=False)

# each event option, the kind of thing it concerns and the controller's name for it
_EVENTS = (("primary_slurmctld_failure", "slurmctld"), ("primary_slurmctld_resumed_control", "slurmctld"),
           ("backup_slurmctld_assumed_control", "slurmctld"), ("primary_slurmdbd_failure", "slurmdbd"),
           ("primary_slurmdbd_resumed_operation", "slurmdbd"), ("primary_database_failure", "database"),
           ("primary_database_resumed_operation", "database"), ("down", "node"), ("drained", "node"),
           ("draining", "node"), ("idle", "node"), ("up", "node"), ("resume", "node"), ("reconfig", "node"),
           ("fini", "job"), ("time", "job"))
_JOB_EVENTS = ("fini", "time", "up", "down")  # with --jobid, --up and --down concern the job's nodes


def _validate(opts: dict[str, Any], events: list[str]) -> None:
    """Slurm's strigger checks, in its order and words."""
    if sum(bool(opts.get(mode)) for mode in ("set", "get", "clear")) != 1:
        raise CLIError("You must use exactly one of the following options: --set, --get or --clear")
    if opts.get("clear") and not (opts.get("user") or opts.get("id") or opts.get("jobid")):
        raise CLIError("You must specify a --id, --jobid, or --user to clear")
    if opts.get("set") and not events:
        raise CLIError("You must specify a trigger")
    if opts.get("set") and not opts.get("program"):
        raise CLIError("You must specify a --program value")
    if {"fini", "time"} & set(events) and not opts.get("jobid"):
        raise CLIError("You must specify a --jobid value")
    program = opts.get("program")
    if program is not None:
        if not program.startswith("/"):
            raise CLIError('The --program value must start with "/"')
        try:
            mode = os.stat(program.split()[0]).st_mode
        except OSError:
            raise CLIError("Invalid --program value, file not found") from None
        if not stat.S_ISREG(mode):
            raise CLIError("Invalid --program value, not regular file")
    if not -32000 <= opts.get("offset", 0) <= 32000:
        raise CLIError("The --offset parameter must be between +/-32000")


def _job_id(text: str | None) -> int:
    if text is None:
        return 0
    if not text.isdigit() or int(text) <= 0 or int(text) > 2**32 - 1:
        raise CLIError(f"Invalid jobid {text}")
    return int(text)


def _uid(user: str | None) -> int | None:
    if user is None:
        return None
    try:
        return int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise CLIError(f"Invalid user {user}") from None


def _body(opts: dict[str, Any], events: list[str], job_id: int) -> dict[str, Any]:
    """The trigger to set: on the job, on the controllers or the database, else on nodes."""
    kinds = {kind for name, kind in _EVENTS if name in events and kind not in ("node", "job")}
    if job_id:
        res_type, res_id = "job", str(job_id)
    elif kinds:
        res_type, res_id = sorted(kinds)[0], "*"
    else:
        res_type, res_id = "node", opts.get("node") or "*"
    flags = opts.get("flags")
    if flags is not None and not flags.lower().startswith("perm"):
        raise CLIError(f"Invalid flags {flags}")
    return {"res_type": res_type, "res_id": res_id, "types": events, "offset": opts.get("offset", 0),
            "perm": flags is not None, "program": opts["program"]}


def _selected(trig: dict[str, Any], opts: dict[str, Any], events: list[str], job_id: int, uid: int | None) -> bool:
    """strigger --get's filters: each event option asks for triggers of that one type (with --jobid,
    of that job), --node for node triggers, --id and --user for theirs."""
    if job_id and (trig["res_type"] != "job" or trig["res_id"] != str(job_id)):
        return False
    if opts.get("node") is not None and trig["res_type"] != "node":
        return False
    if opts.get("id") and trig["trig_id"] != opts["id"]:
        return False
    if uid is not None and trig["uid"] != uid:
        return False
    return all(trig["type"] == name for name in events)


def _line(trig: dict[str, Any]) -> str:
    return (f"{trig['trig_id']:7d} {trig['res_type']:<9} {trig['res_id']:>7} {trig['type']:<35} "
            f"{trig['offset']:6d} {trig['user']:<8} {trig['flags']:<5} {trig['program']}")


def strigger(argv: list[str]) -> int:
    opts, _ = COMMAND.parse(argv)
    events = [name for name, _ in _EVENTS if opts.get(name)]
    _validate(opts, events)
    job_id, uid = _job_id(opts.get("jobid")), _uid(opts.get("user"))
    verbose = opts.get("verbose", 0)
    client = Client.for_options(opts)
    if opts.get("set"):
        if job_id and set(events) - set(_JOB_EVENTS):
            raise CLIError(f"--{(set(events) - set(_JOB_EVENTS)).pop()} is not an event of a job")
        try:
            client.request("POST", "/v1/triggers", _body(opts, events, job_id))
        except CLIError as exc:
            raise SystemExit(f"slurm_set_trigger: {exc}") from None
        if verbose:
            sys.stderr.write("strigger: trigger set\n")
        return 0
    if opts.get("clear"):
        try:
            client.request("DELETE", "/v1/triggers", params={"trig_id": opts.get("id") or None,
                                                             "job_id": job_id or None, "uid": uid})
        except CLIError as exc:
            if opts.get("quiet"):
                return 0
            raise SystemExit(f"slurm_clear_trigger: {exc}") from None
        return 0
    found = client.request("GET", "/v1/triggers")["triggers"]
    if verbose:
        sys.stderr.write(f"strigger: Read {len(found)} trigger records\n")
    chosen = [t for t in found if _selected(t, opts, events, job_id, uid)]
    if opts.get("json"):
        print_json({"triggers": chosen})
        return 0
    if chosen and not opts.get("noheader"):
        print("TRIG_ID RES_TYPE   RES_ID TYPE                                OFFSET USER     FLAGS PROGRAM")
    for trig in chosen:
        print(_line(trig))
    return 0


def main() -> None:
    run("strigger", lambda: strigger(sys.argv[1:]))

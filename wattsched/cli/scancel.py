"""scancel: cancel or signal jobs by id (12, 12_3, 12_[1-4]) or by filters."""

from __future__ import annotations

import os
import sys

from wattsched.cli.common import Client, CLIError, split_list
from wattsched.cli.options import NO, REQ, Command, Opt, ignored, run, standard


def parse_signal(name: str) -> int:
    text = name.upper().removeprefix("SIG")
    if text.isdigit():
        number = int(text)
    else:
        import signal  # here: the enum module it brings costs every scancel ~3 ms

        try:
            number = int(getattr(signal, "SIG" + text))
        except AttributeError as exc:
            raise CLIError(f"Invalid job signal: {name}") from exc
    if not 1 <= number <= 64:
        raise CLIError(f"Invalid job signal: {name}")
    return number


COMMAND = Command("scancel", "[-A account] [--batch] [--full] [--interactive] [-n job_name] "
                  "[-p partition] [-Q] [-q qos] [--reservation=reservation] [-s signal | integer] "
                  "[-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name] [--hurry] [-V] [-v] "
                  "[-w hosts...] [--wckey=wckey] [--me] [job_id[_array_id][.step_id]]", [
    Opt("A", "account", REQ, "act only on jobs charging this account", metavar="account", kind="list"),
    Opt("b", "batch", NO, "signal batch shell for specified job"),
    Opt("f", "full", NO, "signal batch shell and all steps for specified job"),
    Opt("i", "interactive", NO, "require response from user for each job"),
    Opt("M", "clusters", REQ, "cluster to issue commands to (this one)", metavar="cluster_name"),
    Opt(None, "me", NO, "act only on jobs of the invoking user"),
    Opt("n", "name", REQ, "act only on jobs with this name", metavar="job_name", kind="list"),
    Opt(None, "jobname", REQ, "same as --name", metavar="job_name", dest="name", kind="list"),
    Opt("p", "partition", REQ, "act only on jobs in this partition", metavar="partition", kind="list"),
    Opt("Q", "quiet", NO, "disable warnings"),
    Opt("q", "qos", REQ, "act only on jobs with this quality of service", metavar="qos", kind="list"),
    Opt("R", "reservation", REQ, "act only on jobs with this reservation", metavar="reservation"),
    Opt("s", "signal", REQ, "signal to send to job, default is SIGKILL", metavar="name | integer"),
    Opt("t", "state", REQ, "act only on jobs in this state. Valid job states are PENDING, RUNNING and "
        "SUSPENDED", metavar="states", kind="list"),
    Opt("u", "user", REQ, "act only on jobs of this user", metavar="user_name", kind="list"),
    Opt("v", "verbose", NO, "verbosity level", kind="count"),
    Opt("w", "nodelist", REQ, "act only on jobs on these nodes", metavar="hosts...", kind="list"),
    Opt(None, "wckey", REQ, "act only on jobs with this workload characterization key", metavar="wckey",
        kind="list"),
    ignored("H", "hurry", NO), ignored("c", "cron", NO), ignored(None, "ctld", NO),
    ignored(None, "federation", NO), ignored(None, "sibling", REQ),
    "Help options:",
    *standard(),
], help_usage="[OPTIONS] [job_id[_array_id][.step_id]]")


def scancel(argv: list[str]) -> int:
    """Cancel (or signal) jobs."""
    from wattsched import states as st

    opts, operands = COMMAND.parse(argv)
    sig = parse_signal(opts["signal"]) if opts.get("signal") else None
    client = Client.for_options(opts)
    ids = split_list(operands)
    users = split_list(opts.get("user"))
    if opts.get("me"):
        from wattsched.auth import username

        users.append(username(os.getuid()))
    filter_keys = ("account", "name", "partition", "qos", "reservation", "state", "nodelist", "wckey")
    if not ids and not users and not any(opts.get(k) for k in filter_keys):
        raise CLIError("No job identification provided")
    if users or any(opts.get(k) for k in filter_keys):
        params = {"user": users or None, "partition": split_list(opts.get("partition")) or None,
                  "job": ids or None, "detail": "true"}
        jobs = client.request("GET", "/v1/jobs", params=params)["jobs"]
        try:
            wanted = {st.parse_job_state(s) for s in split_list(opts.get("state"))} or {"PENDING", "RUNNING"}
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        ids = [str(j["job_id"]) for j in jobs if j["state"] in wanted and _matches(j, opts)]
        if not ids:
            return 0
    if opts.get("interactive"):
        ids = [job_ref for job_ref in ids if _confirm(job_ref)]
    if opts.get("verbose"):  # Slurm's words, before the requests (on stderr, where its verbose() writes)
        for job_ref in ids:
            kind = "step" if "." in job_ref else f"{'full ' if opts.get('full') else ''}job"
            sys.stderr.write(f"scancel: {'Terminating' if sig is None else f'Signal {sig} to'} {kind} {job_ref}\n")
    failed = False
    for start in range(0, len(ids), BATCH):
        failed |= _cancel(client, ids[start:start + BATCH], sig, opts)
    return 1 if failed else 0


BATCH = 4096  # job references in one request (the API's LIST_MAX)


def _cancel(client: Client, refs: list[str], sig: int | None, opts: dict) -> bool:
    """Cancel or signal ``refs`` in one request; when the controller refuses it (one of them is
    unknown or not the caller's: it then acts on none), one request each, so that each refusal is
    said as Slurm says it and the others still go. True if any failed."""
    body: dict[str, object] = {"job_ids": refs, "batch_only": bool(opts.get("batch")), "full": bool(opts.get("full"))}
    if sig is not None:
        body["signal"] = sig
    try:
        client.request("POST", "/v1/jobs/cancel", body)
    except CLIError as exc:
        if exc.status == 0:
            raise
        if len(refs) > 1:
            return any([_cancel(client, [ref], sig, opts) for ref in refs])  # a list: every one is sent
        if not opts.get("quiet"):
            sys.stderr.write(f"scancel: error: Kill job error on job id {refs[0]}: {exc}\n")
        return True
    return False


def _matches(job: dict, opts: dict) -> bool:
    """The filters the controller's listing does not apply."""
    for key, value in (("name", job["name"]), ("account", job["account"]), ("wckey", job["wckey"]),
                       ("qos", job.get("qos", ""))):
        wanted = split_list(opts.get(key))
        if wanted and value not in wanted:
            return False
    if opts.get("reservation") and job["reservation"] != opts["reservation"]:
        return False
    if opts.get("nodelist"):
        from wattsched import hostlist

        wanted_nodes = {n for expr in split_list(opts["nodelist"]) for n in hostlist.expand(expr)}
        if not wanted_nodes & set(hostlist.expand(job["node_list"]) if job["node_list"] else []):
            return False
    return True


def _confirm(job_ref: str) -> bool:
    sys.stdout.write(f"Cancel job_id={job_ref} ? (y/n) ")
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower().startswith("y")


def main() -> None:
    run("scancel", lambda: scancel(sys.argv[1:]))

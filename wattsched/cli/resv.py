"""Advanced reservations on the command line: ``scontrol create|update|delete|show reservation``
and ``sinfo -T``, with Slurm's keys, messages and layouts."""

from __future__ import annotations

from typing import Any

from wattsched import timefmt
from wattsched.cli.common import Client, CLIError

# scontrol's reservation keys in the order Slurm's scontrol tries them, each with the fewest letters
# that name it (``start=`` is StartTime, ``user=`` Users) and the API's field (None: a key of Slurm's
# that wattsched has no notion of)
_KEYS: tuple[tuple[str, int, str | None], ...] = (
    ("Accounts", 1, "accounts"), ("Comment", 3, None), ("Flags", 2, "flags"), ("Groups", 1, None),
    ("Users", 1, "users"), ("ReservationName", 1, "name"), ("BurstBuffer", 2, None), ("StartTime", 2, "start_time"),
    ("EndTime", 1, "end_time"), ("Duration", 1, "duration"), ("MaxStartDelay", 2, None), ("NodeCnt", 5, "node_cnt"),
    ("NodeCount", 5, "node_cnt"), ("CoreCnt", 5, None), ("CoreCount", 5, None), ("CPUCnt", 5, None),
    ("CPUCount", 5, None), ("Nodes", 5, "nodes"), ("Features", 2, "features"), ("Licenses", 2, None),
    ("PartitionName", 1, "partition"), ("TRES", 1, None), ("TRESPerNode", 5, None), ("Watts", 1, "watts"))


def _key(given: str) -> tuple[str, str | None] | None:
    """The key ``given`` names, as Slurm's scontrol matches it: its first letters, at least as many as
    the key needs."""
    lower = given.lower()
    return next(((key, field) for key, fewest, field in _KEYS
                 if len(lower) >= fewest and key.lower().startswith(lower)), None)


def spec_from_pairs(pairs: dict[str, str], aborted: str) -> dict[str, Any]:
    """The API body for ``scontrol create|update reservation`` from its Key=Value arguments;
    ``aborted`` ends Slurm's message for a key it does not know."""
    body: dict[str, Any] = {}
    for given, value in pairs.items():
        known = _key(given)
        if known is None:
            raise CLIError(f"Unknown parameter {given}={value}.  {aborted}")
        key, field = known
        if field is None:
            raise CLIError(f"{key} is not supported on reservations here")
        if field in ("node_cnt", "watts"):
            try:
                body[field] = None if value.upper() in ("INFINITE", "UNLIMITED") and field == "watts" else int(value)
            except ValueError as exc:
                raise CLIError(f"Invalid {given} value: {value}") from exc
        else:
            body[field] = value
    return body


def create(client: Client, pairs: dict[str, str]) -> None:
    try:
        reply = client.request("POST", "/v1/reservations", spec_from_pairs(pairs, "No reservation created."))
    except CLIError as exc:
        raise CLIError(f"Error creating the reservation: {exc}") from exc
    print(f"Reservation created: {reply['name']}")


def update(client: Client, pairs: dict[str, str], skip: bool = False) -> None:
    body = spec_from_pairs(pairs, "No reservation update.")
    if skip:
        body["skip"] = True
    name = body.pop("name", "")
    try:
        client.request("PATCH", f"/v1/reservations/{name}", body)
    except CLIError as exc:
        raise CLIError(f"Error updating the reservation: {exc}") from exc
    print("Reservation updated.")


def delete(client: Client, name: str) -> None:
    try:
        client.request("DELETE", f"/v1/reservations/{name}")
    except CLIError as exc:
        raise CLIError(f"delete_reservation {name}: {exc}") from exc


def _duration(seconds: float) -> str:
    """Slurm's secs2time_str: HH:MM:SS or D-HH:MM:SS."""
    return timefmt.elapsed_str(seconds)


def lines(r: dict[str, Any]) -> list[str]:
    """scontrol show reservation, line by line."""
    watts = "n/a" if r["watts"] is None else str(r["watts"])
    return [
        f"ReservationName={r['name']} StartTime={timefmt.ts_str(r['start_time'])} "
        f"EndTime={timefmt.ts_str(r['end_time'])} Duration={_duration(r['duration_s'])}",
        f"Nodes={r['nodes']} NodeCnt={r['node_cnt']} CoreCnt={r['core_cnt']} Features={r.get('features') or '(null)'} "
        f"PartitionName={r['partition'] or '(null)'} Flags={','.join(r['flags'])}",
        f"TRES={r['tres']}",
        f"Users={','.join(r['users']) or '(null)'} Groups=(null) Accounts={','.join(r['accounts']) or '(null)'} "
        f"Licenses=(null) State={r['state']} BurstBuffer=(null) Watts={watts}",
        "MaxStartDelay=(null)",
    ]


def sinfo_table(reservations: list[dict[str, Any]], noheader: bool) -> str:
    """sinfo -T: one line per reservation."""
    out = [] if noheader else [f"{'RESV_NAME':<14} {'STATE':>8}  {'START_TIME':>19}  {'END_TIME':>19}  "
                               f"{'DURATION':>11}  NODELIST"]
    for r in reservations:
        out.append(f"{r['name'][:14]:<14} {r['state']:>8}  {timefmt.ts_str(r['start_time']):>19}  "
                   f"{timefmt.ts_str(r['end_time']):>19}  {_duration(r['duration_s']):>11}  {r['nodes']}")
    return "\n".join(out)

"""Advanced reservations on the command line: ``scontrol create|update|delete|show reservation``
and ``sinfo -T``, with Slurm's keys, messages and layouts."""

from __future__ import annotations

from typing import Any

from wattsched import timefmt
from wattsched.cli.common import Client, CLIError

# scontrol's keys (lower case) -> the API's field names
_KEYS = {"reservationname": "name", "reservation": "name", "starttime": "start_time", "endtime": "end_time",
         "duration": "duration", "nodes": "nodes", "nodecnt": "node_cnt", "nodecount": "node_cnt",
         "users": "users", "user": "users", "accounts": "accounts", "account": "accounts",
         "partitionname": "partition", "partition": "partition", "flags": "flags", "flag": "flags",
         "watts": "watts"}


def spec_from_pairs(pairs: dict[str, str]) -> dict[str, Any]:
    """The API body for ``scontrol create|update reservation`` from its Key=Value arguments."""
    body: dict[str, Any] = {}
    for key, value in pairs.items():
        if key not in _KEYS:
            raise CLIError(f"Invalid input: {key}  Request aborted")
        field = _KEYS[key]
        if field in ("node_cnt", "watts"):
            try:
                body[field] = None if value.upper() in ("INFINITE", "UNLIMITED") and field == "watts" else int(value)
            except ValueError as exc:
                raise CLIError(f"Invalid {key} value: {value}") from exc
        else:
            body[field] = value
    return body


def create(client: Client, pairs: dict[str, str]) -> None:
    try:
        reply = client.request("POST", "/v1/reservations", spec_from_pairs(pairs))
    except CLIError as exc:
        raise CLIError(f"Error creating the reservation: {exc}") from exc
    print(f"Reservation created: {reply['name']}")


def update(client: Client, pairs: dict[str, str]) -> None:
    body = spec_from_pairs(pairs)
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
        f"Nodes={r['nodes']} NodeCnt={r['node_cnt']} CoreCnt={r['core_cnt']} Features=(null) "
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

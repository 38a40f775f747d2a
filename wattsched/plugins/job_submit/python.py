"""job_submit/python: a site's submission rules in Python, as Slurm's job_submit/lua runs the
site's job_submit.lua. ``JobSubmitPlugins=python`` loads ``job_submit.py`` from the folder of
slurm.conf. The file defines, as the Lua file does::

    def job_submit(job_desc, part_list, submit_uid): ...
    def job_modify(job_desc, job_rec, part_list, modify_uid): ...   # optional

``job_desc`` carries Slurm's job_desc field names (``partition``, ``qos``, ``time_limit`` in
minutes, ``account``, ``comment``, ``min_nodes``, ``num_tasks``...; None where unset); setting one
changes the submission (or the update). ``job_rec`` is the job as it is (read only). ``part_list``
holds the partitions (``name``, ``nodes``, ``max_time``, ``default_time``, ``default``, ``state``).
The functions return ``slurm.SUCCESS`` (or None) to accept, anything else to refuse; what they
pass to ``slurm.log_user`` is the message the user sees. ``slurm.log_info``/``log_error`` write
to the controller's log. A module named ``slurm`` is given to the file, with those and Slurm's
constants.

Safety. The controller runs as root: it loads the file only if it is a regular file owned by
root (or by the controller's user), not writable by group or others, in a folder no one else may
write. The file is read again when it changes; a version that fails to load is logged and the
previous one kept. A rule that raises refuses the submission ("Unspecified error") and is logged
with its traceback; the controller goes on. The rules run in the controller, between requests:
they must be quick, as Slurm asks of its Lua scripts.
"""

from __future__ import annotations

import logging
import os
import stat
import traceback
import types
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from wattsched import timefmt
from wattsched.model import JOB_FIELD_PATHS

log = logging.getLogger("wattsched.controller")
SCRIPT = "job_submit.py"
SUCCESS, ERROR = 0, -1

# Slurm's job_desc names -> the submission's fields (wattsched.api.JobSubmit / JobUpdate), and
# whether a site rule may change it
FIELDS: dict[str, tuple[str, bool]] = {
    "account": ("account", True), "array_inx": ("array", True), "comment": ("comment", True),
    "admin_comment": ("admin_comment", True), "cpus_per_task": ("cpus_per_task", True),
    "dependency": ("dependency", True), "exc_nodes": ("exclude", True), "features": ("constraint", True),
    "tres_per_node": ("gres", True), "max_nodes": ("nodes_max", True), "min_nodes": ("nodes_min", True),
    "min_mem_per_cpu": ("mem_per_cpu_mb", True), "min_mem_per_node": ("mem_per_node_mb", True),
    "name": ("name", True), "nice": ("nice", True), "ntasks_per_node": ("ntasks_per_node", True),
    "num_tasks": ("ntasks", True), "partition": ("partition", True), "priority": ("priority", True),
    "qos": ("qos", True), "req_nodes": ("nodelist", True), "requeue": ("requeue", True),
    "reservation": ("reservation", True), "time_limit": ("time_limit", True), "wckey": ("wckey", True),
    "cpu_freq": ("cpu_freq", True), "profile": ("profile", True), "licenses": ("licenses", True),
    "script": ("script", False), "work_dir": ("work_dir", False), "std_out": ("output", False),
    "std_err": ("error", False), "std_in": ("input", False), "environment": ("environment", False),
    "argv": ("argv", False), "immediate": ("immediate", False),
}
# the job's record, for job_modify (read only)
RECORD = {"job_id": "job_id", "user_id": "uid", "user_name": "user", "group_id": "gid", "account": "account",
          "partition": "partition", "qos": "qos", "name": "name", "comment": "comment", "job_state": "state",
          "time_limit": "time_limit_min", "priority": "priority", "nice": "nice", "num_tasks": "ntasks",
          "min_nodes": "nodes_min", "cpus_per_task": "cpus_per_task", "work_dir": "work_dir"}
_READ_RECORD = {name: attrgetter(JOB_FIELD_PATHS[field]) for name, field in RECORD.items()}  # (parts' by path)


# Slurm's error codes a rule may return, with the words Slurm's commands print for them
ERRORS = {2000: ("ESLURM_INVALID_PARTITION_NAME", "Invalid partition name specified"),
          2002: ("ESLURM_ACCESS_DENIED", "Access/permission denied"),
          2045: ("ESLURM_INVALID_ACCOUNT", "Invalid account or account/partition combination specified"),
          2051: ("ESLURM_INVALID_TIME_LIMIT", "Requested time limit is invalid (missing or exceeds some limit)"),
          2066: ("ESLURM_INVALID_QOS", "Invalid qos specification")}


class Refusal(Exception):
    """The site's rules refused the request; the message is what the user sees."""


class JobDesc:
    """A submission (or update) under Slurm's job_desc names; unset values read as None."""

    def __init__(self, values: dict[str, Any], identity: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_identity", dict(identity))

    def __getattr__(self, name: str) -> Any:
        if name in self._identity:
            return self._identity[name]
        if name not in FIELDS:
            raise AttributeError(f"job_desc has no field {name!r}")
        value = self._values.get(FIELDS[name][0])
        if name == "time_limit" and value is not None:
            try:
                return timefmt.parse_duration_min(value)
            except timefmt.TimeFormatError:
                return value  # an update's +N or -N: as the user wrote it
        if isinstance(value, dict | list):
            return type(value)(value)  # a copy: the environment and argv are read only
        return None if value == "" else value

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in FIELDS or not FIELDS[name][1]:
            raise AttributeError(f"job_desc.{name} cannot be set here")
        field, _ = FIELDS[name]
        if name == "time_limit" and value is not None:
            value = str(int(value))
        self._values[field] = "" if value is None and field not in ("ntasks", "requeue", "time_limit",
                                                                      "priority") else value


class JobRec:
    """The job as it stands, for job_modify: read only."""

    def __init__(self, job: Any) -> None:
        object.__setattr__(self, "_job", job)

    def __getattr__(self, name: str) -> Any:
        if name not in RECORD:
            raise AttributeError(f"job_rec has no field {name!r}")
        return _READ_RECORD[name](self._job)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("job_rec is read only: set job_desc's fields")


def _slurm_module(said: list[str]) -> types.ModuleType:
    """The ``slurm`` module a site file sees."""
    slurm = types.ModuleType("slurm")
    names = {"SUCCESS": SUCCESS, "ERROR": ERROR, "FAILURE": ERROR, "NO_VAL": 0xFFFFFFFE, "INFINITE": 0xFFFFFFFF,
             **{name: code for code, (name, _text) in ERRORS.items()}}
    for name, value in names.items():
        setattr(slurm, name, value)

    def log_user(message: str, *args: Any) -> None:
        said.append(str(message) % args if args else str(message))

    def _log(level: int) -> Callable[..., None]:
        return lambda message, *args: log.log(level, "job_submit/python: %s",
                                              str(message) % args if args else str(message))

    slurm.log_user = log_user  # type: ignore[attr-defined]
    slurm.user_msg = log_user  # type: ignore[attr-defined]
    slurm.log_info = _log(logging.INFO)  # type: ignore[attr-defined]
    slurm.log_verbose = slurm.log_debug = _log(logging.DEBUG)  # type: ignore[attr-defined]
    slurm.log_error = _log(logging.ERROR)  # type: ignore[attr-defined]
    return slurm


def _trusted(path: str) -> os.stat_result:
    """The site file's status, if root may believe it (see the module's docstring), else OSError.
    Every folder above it too must be root's and closed to others (or sticky, as /tmp): else
    someone could put another folder, with other rules, in its place."""
    ours = {0, os.geteuid()}
    folder = os.path.dirname(os.path.realpath(path))
    while True:
        info = os.stat(folder)
        open_to_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
        if info.st_uid not in ours or open_to_others:
            raise PermissionError(f"{folder} may be written by others than root")
        if folder == os.path.dirname(folder):
            break
        folder = os.path.dirname(folder)
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_uid not in ours or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path} is not a regular file of root's that only root may write")
    return info


class PythonJobSubmit:
    """The site's job_submit.py, (re)loaded when it changes."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, SCRIPT)
        self._said: list[str] = []
        self._functions: dict[str, Callable[..., Any]] = {}
        self._version: tuple[int, int, int, int] | None = None
        self._refresh()
        if not self._functions:
            raise ValueError(f"job_submit/python: no usable {self.path} (see the log)")

    def _refresh(self) -> None:
        try:
            info = _trusted(self.path)
        except OSError as exc:
            if self._version != (0, 0, 0, 0):
                log.error("job_submit/python: not loading the site's rules: %s", exc)
            self._version = (0, 0, 0, 0)  # logged once; the rules loaded before, if any, stay
            return
        version = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if version == self._version:
            return
        self._version = version
        namespace: dict[str, Any] = {"__name__": "job_submit", "__file__": self.path,
                                     "slurm": _slurm_module(self._said)}
        try:
            with open(self.path, "rb") as handle:
                source = handle.read(1 << 20)
            exec(compile(source, self.path, "exec"), namespace)  # the site's own rules, in root's own file
            if not callable(namespace.get("job_submit")):
                raise ValueError("it defines no job_submit(job_desc, part_list, submit_uid)")
        except Exception:
            log.error("job_submit/python: %s not loaded, the rules before it stay:\n%s", self.path,
                      traceback.format_exc(limit=5))
            return
        self._functions = {name: namespace[name] for name in ("job_submit", "job_modify")
                           if callable(namespace.get(name))}
        log.info("job_submit/python: loaded %s", self.path)

    def call(self, function: str, args: tuple[Any, ...]) -> None:
        """Run a site rule; Refusal with the user's message when it refuses or fails."""
        self._refresh()
        rule = self._functions.get(function)
        if rule is None:
            return
        self._said.clear()
        try:
            code = rule(*args)
        except Exception:
            log.error("job_submit/python: %s failed:\n%s", function, traceback.format_exc(limit=5))
            raise Refusal("Unspecified error") from None
        if code not in (None, SUCCESS):
            known = ERRORS.get(code) if isinstance(code, int) else None
            raise Refusal("; ".join(self._said) or (known[1] if known else "Unspecified error"))


def partition_list(partitions: list[Any]) -> list[types.SimpleNamespace]:
    """The part_list a site rule sees (read as Slurm's: name, nodes, max_time, default_time...)."""
    return [types.SimpleNamespace(name=p.name, nodes=p.node_expr, max_time=p.max_time_min,
                                  default_time=p.default_time_min, default=p.default, state=p.state,
                                  max_nodes=p.max_nodes, qos=p.qos or None) for p in partitions]

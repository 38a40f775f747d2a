"""Structured logging: one ``key=value`` line per event, quiet (warnings) unless asked."""

from __future__ import annotations

import logging
import sys
import time

from wattsched.config import LOG_LEVELS

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# what each of Slurm's levels (SlurmctldDebug, SlurmdDebug: declared with the keys) lets through
LEVELS = dict(zip(LOG_LEVELS, (logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO,
                               logging.DEBUG, logging.DEBUG, logging.DEBUG), strict=True))


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        fields = [f"time={stamp}", f"level={record.levelname.lower()}", f"logger={record.name}",
                  f"msg={record.getMessage()!r}"]
        fields += [f"{k}={v!r}" for k, v in record.__dict__.items() if k not in _STANDARD]
        if record.exc_info:
            fields.append(f"exc={self.formatException(record.exc_info)!r}")
        return " ".join(fields)


def louder(level: str, steps: int) -> str:
    """The level ``steps`` above ``level``, as each -v of a Slurm daemon raises it."""
    if level not in LOG_LEVELS or steps <= 0:
        return level
    return LOG_LEVELS[min(LOG_LEVELS.index(level) + steps, len(LOG_LEVELS) - 1)]


def setup(level: str = "info", path: str | None = None, syslog: bool = False) -> None:
    """Slurm's 'info' level is our default and shows warnings and errors only. ``path``: a log
    file, else standard error, or with ``syslog`` (a daemon in the background) the system's log,
    as Slurm's daemons log where no log file is set."""
    handler: logging.Handler
    if path:
        handler = logging.FileHandler(path)
    elif syslog:
        from logging.handlers import SysLogHandler

        try:
            handler = SysLogHandler("/dev/log", facility=SysLogHandler.LOG_DAEMON)
        except OSError:  # no syslog daemon: nowhere to write
            handler = logging.NullHandler()
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger("wattsched")
    root.handlers[:] = [handler]
    root.setLevel(LEVELS.get(level, logging.WARNING))
    root.propagate = False

"""Structured logging: one ``key=value`` line per event, quiet (warnings) unless asked."""

from __future__ import annotations

import logging
import sys
import time

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
LEVELS = {"quiet": logging.CRITICAL, "fatal": logging.CRITICAL, "error": logging.ERROR, "info": logging.WARNING,
          "verbose": logging.INFO, "debug": logging.DEBUG, "debug2": logging.DEBUG, "debug3": logging.DEBUG}


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
    order = list(LEVELS)
    return order[min(order.index(level) + steps, len(order) - 1)] if level in LEVELS and steps > 0 else level


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

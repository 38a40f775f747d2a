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


def setup(level: str = "info", path: str | None = None) -> None:
    """Slurm's 'info' level is our default and shows warnings and errors only."""
    handler: logging.Handler = logging.FileHandler(path) if path else logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger("wattsched")
    root.handlers[:] = [handler]
    root.setLevel(LEVELS.get(level, logging.WARNING))
    root.propagate = False

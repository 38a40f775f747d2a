"""A replay's plots drawn beside it: a child process, forked before the replay starts, loads
matplotlib on another core while the replay runs, then draws the plots it is sent while the
parent writes the per-job results. Loading matplotlib and drawing the two plots took 0.65 s of
a 15 s replay of KTH SP2 (measured on a 2-core VM); with a core to spare they now cost the
replay's wall time about the writing of jobs.csv. The CPU time is the same, and on one core
nothing is lost but the fork.

The child only ever reads what its parent sends through a pipe (pickled: the waits, the energy
by node state and the folder, from the same program) and writes the PNGs the parent would have
written; it answers with the paths or the error. A parent that stops before sending (a failed
replay, Ctrl-C) closes the pipe on leaving the ``with`` block (or by ending), and the child ends
on the empty message.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType


class PlotError(RuntimeError):
    """The child could not draw the plots (its reason)."""


class Plotter:
    """The child that draws a replay's plots: :meth:`send` them, then :meth:`drawn` waits for it.
    A context manager: leaving it ends and reaps the child whatever happened."""

    def __init__(self) -> None:
        inbox, outbox = os.pipe()  # parent -> child: what to draw
        answers, answer = os.pipe()  # child -> parent: the paths, or the error
        self._outbox: int | None = outbox
        self._answers: int | None = answers
        self.pid: int | None = os.fork()
        if self.pid == 0:
            os.close(outbox)
            os.close(answers)
            code = 1
            try:
                code = _child(inbox, answer)
            finally:
                os._exit(code)  # never the parent's atexit handlers, nor its buffers flushed twice
        os.close(inbox)
        os.close(answer)

    def __enter__(self) -> Plotter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for fd in (self._outbox, self._answers):
            if fd is not None:
                os.close(fd)
        self._outbox = self._answers = None
        self._reap()

    def send(self, out: Path, waits_h: list[float], energy_by_state: dict[str, float]) -> None:
        """What to draw, in ``out``: the waiting times (hours) and the energy by node state (J)."""
        assert self._outbox is not None, "sent once"
        outbox, self._outbox = self._outbox, None
        with os.fdopen(outbox, "wb") as pipe:
            pipe.write(pickle.dumps((str(out), waits_h, dict(energy_by_state))))

    def drawn(self) -> dict[str, Path]:
        """The plots' paths, once the child has drawn them."""
        assert self._answers is not None, "read once"
        answers, self._answers = self._answers, None
        with os.fdopen(answers, "rb") as pipe:
            answer = pipe.read()
        status = self._reap()
        if not answer:
            raise PlotError(f"the plotting process ended without an answer (exit status {status})")
        kind, value = pickle.loads(answer)
        if kind != "drawn":
            raise PlotError(value)
        return {name: Path(path) for name, path in value.items()}

    def _reap(self) -> int | None:
        if self.pid is None:
            return None
        pid, self.pid = self.pid, None
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@contextlib.contextmanager
def beside() -> Iterator[Plotter | None]:
    """A plotter for the ``with`` block, or None where no process can be forked (a process limit
    reached, say): the plots are then drawn in the process, as before."""
    try:
        plotter = Plotter()
    except OSError:
        yield None
        return
    with plotter:
        yield plotter


def _child(inbox: int, answer: int) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it closes the pipe
    failure = None
    try:
        from wattsched.simulator import report

        report.load_plotting()
    except Exception as exc:  # (no matplotlib): said when the plots are asked for
        failure = f"loading matplotlib: {type(exc).__name__}: {exc}"
    with os.fdopen(inbox, "rb") as pipe:
        message = pipe.read()
    if not message:
        return 0
    if failure is None:
        out, waits_h, energy_by_state = pickle.loads(message)
        try:
            paths = report.draw_plots(Path(out), waits_h, energy_by_state)
        except Exception as exc:  # (matplotlib's or the file system's): the parent reports it
            failure = f"drawing the plots: {type(exc).__name__}: {exc}"
    reply = ("failed", failure) if failure is not None else \
        ("drawn", {name: str(path) for name, path in paths.items()})
    with os.fdopen(answer, "wb") as pipe:
        pipe.write(pickle.dumps(reply))
    return 0

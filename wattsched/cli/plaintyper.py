"""typer for ``wattsched``'s own commands, without rich: plain click-style usage errors and no
rich import on the start-up path. typer reads TYPER_USE_RICH once, when it is first imported; the
variable is set for that import alone, so it never reaches what a command passes on (sbatch's
default --export=ALL copies the whole environment into the job's)."""

import os

_before = os.environ.get("TYPER_USE_RICH")
os.environ["TYPER_USE_RICH"] = "0"
try:
    import typer
finally:
    if _before is None:
        del os.environ["TYPER_USE_RICH"]
    else:
        os.environ["TYPER_USE_RICH"] = _before

__all__ = ["typer"]

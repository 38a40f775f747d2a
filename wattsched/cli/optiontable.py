"""The table of Slurm options per command in docs/user/commands.md, made from the commands' own
option tables: ``python -m wattsched.cli.optiontable`` prints it (the test suite checks the page
shows it as is)."""

from __future__ import annotations

import importlib

from wattsched.cli.completion import COMMANDS
from wattsched.cli.options import IGNORED, Opt

BEGIN, END = "<!-- options-table -->", "<!-- /options-table -->"


def _name(opt: Opt) -> str:
    if opt.long and opt.short:
        return f"`-{opt.short}`/`--{opt.long}`"
    return f"`--{opt.long}`" if opt.long else f"`-{opt.short}`"


def table() -> str:
    lines = [BEGIN, "| command | acted on | accepted, no effect here (noted under `-v`) | refused, with the reason |",
             "|---|---|---|---|"]
    for prog in COMMANDS:
        command = importlib.import_module(f"wattsched.cli.{prog}").COMMAND
        acted = [o for o in command.options if o.status is None]
        ignored = [o for o in command.options if o.status == IGNORED]
        refused = [o for o in command.options if o.status not in (None, IGNORED)]
        lines.append(f"| {prog} | {' '.join(_name(o) for o in acted)} | {' '.join(_name(o) for o in ignored) or '-'} "
                     f"| {' '.join(_name(o) for o in refused) or '-'} |")
    lines.append(END)
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

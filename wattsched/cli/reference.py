"""The documentation site's reference pages, made from the code's own tables: a page per command
from its option table (wattsched.cli.options), a page of every configuration key from the
settings' declarations (wattsched.config), and the README as the site's front page.

It is MkDocs' hook (mkdocs.yml ``hooks:``, through docs/hooks.py): the pages are added to the site as it is built, never
written into docs/, so the reference cannot drift from the code. ``python -m wattsched.cli.reference
DIR`` writes the same pages into DIR, to read them without MkDocs.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from pathlib import Path
from typing import Any

from wattsched import config as config_mod
from wattsched.cli.options import IGNORED, NO, OPT, Opt
from wattsched.cli.optiontable import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _option(opt: Opt) -> str:
    value = "" if opt.arg == NO else (f"[={opt.metavar}]" if opt.arg == OPT else f"={opt.metavar}")
    if opt.long:
        return (f"`-{opt.short}`, " if opt.short else "") + f"`--{opt.long}{value}`"
    return f"`-{opt.short} {opt.metavar}`" if opt.arg else f"`-{opt.short}`"


def command_page(prog: str) -> str:
    """One command's page: its usage and every option, with what wattsched does with it."""
    command = importlib.import_module(f"wattsched.cli.{prog}").COMMAND
    lines = [f"# {prog}", "", "```", command.usage.strip(), "```", ""]
    if command.epilog:
        lines += [command.epilog.strip(), ""]
    lines += ["Options follow getopt_long's grammar, as Slurm's: `--opt=value` or `--opt value`, `-o value` "
              "or `-ovalue`, unique prefixes of long names, `--` ending the options.", ""]
    section = "Options"
    rows: list[str] = []

    def flush() -> None:
        if rows:
            lines.extend([f"## {section}", "", "| option | what it does |", "|---|---|", *rows, ""])
            rows.clear()

    for item in command.items:
        if isinstance(item, str):
            flush()
            section = item.strip().rstrip(":") or "Options"
            continue
        if item.status is None:
            what = item.help
        elif item.status == IGNORED:
            what = f"accepted, no effect here ({item.help})" if item.help else "accepted, no effect here"
        else:
            what = f"refused: {item.status}"
        rows.append(f"| {_option(item)} | {_cell(what)} |")
    flush()
    return "\n".join(lines)


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if value in (None, "", ()):
        return "(none)"
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _kind(parse: Any) -> str:
    name = getattr(parse, "__qualname__", getattr(parse, "__name__", "")).split(".<locals>")[0]
    return name.replace("_", " ").strip() or "text"


def keys_page() -> str:
    """Every configuration key, per file and line kind, from the settings' declarations."""
    lines = ["# Configuration keys", "",
             "Every key wattsched reads, generated from its declaration in `wattsched/config.py` (the one place "
             "each key is declared). Keys are case-insensitive. *restart*: `scontrol reconfigure` refuses to "
             "change it while the controller runs. What each key does is told in the "
             "[configuration reference](configuration.md) and the pages it links to.", ""]
    kinds = (("slurm.conf", config_mod.Config, ""), ("NodeName= lines", config_mod.NodeConf, ""),
             ("PartitionName= lines", config_mod.PartitionConf, ""), ("cgroup.conf", config_mod.Config, "cgroup.conf"),
             ("acct_gather.conf (root's alone)", config_mod.Config, config_mod.ACCT_GATHER))
    for title, cls, conf in kinds:
        lines += [f"## {title}", "", "| key | also | value | default | |", "|---|---|---|---|---|"]
        declared = [f for f in dataclasses.fields(cls) if "key" in f.metadata and f.metadata["conf"] == conf]
        for f in sorted(declared, key=lambda f: f.metadata["key"].lower()):
            meta = f.metadata
            notes = ", ".join(n for n, on in (("path", meta.get("path")), ("restart", meta.get("restart"))) if on)
            lines.append(f"| `{meta['key']}` | {', '.join(meta['aliases']) or ''} | {_cell(_kind(meta['parse']))} "
                         f"| {_cell(_default(f))} | {notes} |")
        lines.append("")
    return "\n".join(lines)


def front_page() -> str:
    """The README, its links made relative to the site (docs/x.md is x.md there)."""
    text = (ROOT / "README.md").read_text()
    return re.sub(r"\]\(docs/", "](", text)


def pages() -> dict[str, str]:
    """Every generated page, by its path in the site."""
    made = {"index.md": front_page(), "reference/keys.md": keys_page()}
    made.update({f"reference/commands/{prog}.md": command_page(prog) for prog in COMMANDS})
    return made


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook: the generated pages join the site's files."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reference")
    for path, text in pages().items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

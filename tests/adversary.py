"""A symlink adversary for the hostile suite: as an unprivileged user, it plants links (to a root-only
file, to /etc/shadow, to the cluster's key) at every place a daemon touches that the user might write,
and checks, by a before/after listing, that no file outside the user's own changed owner, mode or
content.

The places, for a job of the attacker's on a node: its profile files (the node files, the merged file
and the merge's temporary file), its scratch folder and script, and its output file; and the job's
working and output folders, swapped for links to a root-only folder while it waits. A place the user
cannot write (a root-owned folder) simply refuses the link: that is the defence working, not an error.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

Entry = tuple[int, int, int, str]  # uid, gid, mode, content digest ("" when not compared)


def _digest(path: Path) -> str:
    try:
        with open(path, "rb", buffering=0) as handle:
            return hashlib.sha256(handle.read(1 << 20)).hexdigest()
    except OSError:
        return "unreadable"


def listing(roots: Iterable[Path], contents: bool) -> dict[str, Entry]:
    """Every entry below the roots (links not followed): owner, group, mode and, when ``contents``,
    a digest of each regular file's first MiB."""
    found: dict[str, Entry] = {}
    for root in roots:
        if not root.exists():
            continue
        for folder, dirs, files in os.walk(root):
            for name in [*dirs, *files]:
                path = Path(folder, name)
                try:
                    info = path.lstat()
                except FileNotFoundError:
                    continue
                digest = _digest(path) if contents and stat.S_ISREG(info.st_mode) else ""
                found[str(path)] = (info.st_uid, info.st_gid, info.st_mode, digest)
            dirs[:] = [d for d in dirs if not Path(folder, d).is_symlink()]
    return found


@dataclass
class SymlinkAdversary:
    run_as_attacker: Callable[[str], None]  # runs a shell script as the attacker
    attacker_uid: int
    targets: list[Path]  # what the links point at: files the attacker must never gain or change
    watched: list[Path]  # trees whose owners and modes must not change (state, spool, profiles)
    fixed: list[Path]  # trees whose contents must not change either (/etc, the guarded folder)

    def snapshot(self) -> tuple[dict[str, Entry], dict[str, Entry]]:
        return listing(self.watched, contents=False), listing(self.fixed, contents=True)

    def plant(self, places: Iterable[Path]) -> None:
        """Link every place to each target in turn (the last one stays); places the attacker cannot
        write are refused by the system, silently."""
        lines = []
        for place in places:
            for target in self.targets:
                lines.append(f"ln -sfn '{target}' '{place}' 2>/dev/null && echo planted '{place}'")
        script = "\n".join(lines) + "\ntrue\n"
        self.run_as_attacker(script)

    def swap(self, folders: Iterable[Path]) -> None:
        """Replace each of the attacker's folders by a link to the first target's folder (a job's
        working or output folder, swapped while the job waits)."""
        target = self.targets[0].parent
        self.run_as_attacker("\n".join(f"rm -rf '{f}' && ln -s '{target}' '{f}'" for f in folders) + "\ntrue\n")

    def changes(self, before: tuple[dict[str, Entry], dict[str, Entry]],
                allowed: Callable[[str, Entry], bool]) -> list[str]:
        """What changed that must not have: in the watched trees an entry's owner or mode (or a new
        entry of the attacker's that ``allowed`` does not accept), in the fixed trees anything."""
        after = self.snapshot()
        problems = []
        for path, entry in after[0].items():
            old = before[0].get(path)
            if old is not None and old[:3] != entry[:3] and not allowed(path, entry):
                problems.append(f"{path}: owner/mode {old[:3]} -> {entry[:3]}")
            if old is None and entry[0] == self.attacker_uid and not allowed(path, entry):
                problems.append(f"{path}: new and the attacker's {entry[:3]}")
        for path, entry in after[1].items():
            old = before[1].get(path)
            if old != entry:
                problems.append(f"{path}: {old or 'absent'} -> {entry}")
        for path in before[1]:
            if path not in after[1]:
                problems.append(f"{path}: gone")
        for target in self.targets:
            info = target.lstat()
            if info.st_uid == self.attacker_uid:
                problems.append(f"{target}: now the attacker's")
        return problems



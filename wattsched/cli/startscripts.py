"""The Slurm commands' start scripts, written again to start without the ``site`` module.

pip writes each console script as ``#!<venv>/bin/python3`` and an import of its entry point, so
``site`` runs at every start: it finds the site directories, reads their .pth files and imports the
distribution's sitecustomize (Debian's installs apport's exception hook). That is 1.9 ms of CPU of
``sbatch``'s 16 on the project's 2-core VM, and 10 % more submissions a second from four parallel
loops (measured, docs/status.md). What ``site`` adds to the path is fixed once the package is
installed, so each script can carry it: this rewrites the commands' scripts as ``python3 -S`` with
that list, taken from this interpreter (which ran ``site``) against one started with ``-S``.

The scripts are left as pip made them where skipping ``site`` would change what a command runs: a
.pth file that runs code (an ``import`` line: an editable-install hook, a coverage start-up), or a
shebang pip had to wrap (a path with spaces, or too long). The ``wattsched`` command starts the
daemons and keeps pip's script. ``make`` runs this after each install:
``python -m wattsched.cli.startscripts``.
"""

from __future__ import annotations

import importlib.metadata
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

KEPT = frozenset({"wattsched"})  # starts the daemons, whose start-up time does not matter
MARK = "# written by wattsched.cli.startscripts"


def site_paths() -> list[str]:
    """The entries ``site`` put on this interpreter's path: its path less that of one started with ``-S``."""
    bare = subprocess.run([sys.executable, "-S", "-c", "import sys; print('\\n'.join(sys.path[1:]))"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    return [entry for entry in sys.path[1:] if entry not in bare]


def pth_with_code(directories: list[str]) -> list[Path]:
    """The .pth files in ``directories`` that run code at start-up, which ``-S`` would skip."""
    return [pth for directory in directories if os.path.isdir(directory)
            for pth in sorted(Path(directory).glob("*.pth"))
            if any(line.startswith(("import ", "import\t")) for line in pth.read_text(errors="replace").splitlines())]


def script(python: str, paths: list[str], module: str, function: str) -> str:
    return (f"#!{python} -S\n{MARK}: pip's script, started without the site module\n"
            f"import sys\nsys.path += {paths!r}\nfrom {module} import {function}\n"
            f"if __name__ == '__main__':\n    sys.exit({function}())\n")


def rewrite(directory: Path, commands: dict[str, str], paths: list[str]) -> list[str]:
    """Rewrite the scripts in ``directory`` of ``commands`` (name -> ``module:function``); returns
    the names rewritten. Only a script whose first line is ``#!`` and this interpreter is rewritten."""
    done = []
    for name, target in sorted(commands.items()):
        path = directory / name
        if name in KEPT or not path.is_file():
            continue
        shebang = path.read_text(errors="replace").partition("\n")[0]
        python = shebang.removeprefix("#!")
        if not shebang.startswith("#!") or not os.path.isfile(python) or not os.path.samefile(python, sys.executable):
            continue
        module, _, function = target.partition(":")
        fresh = path.with_name(f".{name}.new")
        fresh.write_text(script(python, paths, module, function))
        fresh.chmod(path.stat().st_mode & 0o7777)
        os.replace(fresh, path)
        done.append(name)
    return done


def main() -> int:
    paths = site_paths()
    running = pth_with_code([*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])])
    if running:
        print(f"startscripts: the commands keep pip's scripts: {', '.join(map(str, running))} runs code at "
              "start-up, which python3 -S would skip", file=sys.stderr)
        return 0
    points = importlib.metadata.distribution("wattsched").entry_points
    commands = {point.name: point.value for point in points if point.group == "console_scripts"}
    done = rewrite(Path(sysconfig.get_path("scripts")), commands, paths)
    print(f"startscripts: {len(done)} commands start without the site module", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The commands' start scripts without the site module: the same command, the path site would make
written in, and left as pip made them wherever skipping site would change what runs."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import wattsched
from wattsched.cli import startscripts


def test_a_rewritten_command_starts_without_site_and_answers_the_same(tmp_path: Path) -> None:
    pip_script = f"#!{sys.executable}\nimport sys\nfrom wattsched.cli.squeue import main\nsys.exit(main())\n"
    for name in ("squeue", "wattsched"):
        (tmp_path / name).write_text(pip_script)
        (tmp_path / name).chmod(0o755)
    (tmp_path / "sinfo").write_text(f"#!/bin/sh\n'''exec' '{sys.executable}' \"$0\" \"$@\"\n' '''\n")
    done = startscripts.rewrite(tmp_path, {"squeue": "wattsched.cli.squeue:main", "sinfo": "wattsched.cli.sinfo:main",
                                           "wattsched": "wattsched.cli.wattsched:main", "sacct": "x:y"},
                                startscripts.site_paths())
    assert done == ["squeue"]  # pip's wrapped shebang, the daemons' command and a missing script: kept
    assert (tmp_path / "squeue").read_text().startswith(f"#!{sys.executable} -S\n{startscripts.MARK}")
    assert (tmp_path / "wattsched").read_text() == pip_script and (tmp_path / "squeue").stat().st_mode & 0o777 == 0o755
    probe = "import sys, runpy; runpy.run_path(sys.argv[1], run_name='__main__')"
    ran = subprocess.run([sys.executable, "-S", "-c", f"import sys; assert 'site' not in sys.modules; {probe}",
                          str(tmp_path / "squeue"), "-V"], capture_output=True, text=True)
    assert ran.stdout.strip() == wattsched.version_line(), ran.stderr
    assert subprocess.run([str(tmp_path / "squeue"), "-V"], capture_output=True, text=True).stdout.strip() \
        == wattsched.version_line()


def test_the_path_written_in_finds_the_package_and_its_libraries_where_site_would() -> None:
    paths = startscripts.site_paths()
    assert sysconfig.get_path("purelib") in paths
    found = "import wattsched, numpy; print(wattsched.__file__, numpy.__file__)"
    with_site = subprocess.run([sys.executable, "-c", found], capture_output=True, text=True, check=True).stdout
    without = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path += {paths!r}; {found}"],
                             capture_output=True, text=True, check=True).stdout
    assert without == with_site and without.split()[0] == wattsched.__file__


def test_a_pth_file_that_runs_code_keeps_pips_scripts(tmp_path: Path) -> None:
    (tmp_path / "plain.pth").write_text("/some/where\n")
    assert startscripts.pth_with_code([str(tmp_path), str(tmp_path / "absent")]) == []
    (tmp_path / "hook.pth").write_text("# a comment\nimport _editable_finder; _editable_finder.install()\n")
    assert startscripts.pth_with_code([str(tmp_path)]) == [tmp_path / "hook.pth"]


def test_the_install_the_readme_makes_starts_its_commands_without_site() -> None:
    scripts = Path(sysconfig.get_path("scripts"))
    if not (scripts / ".installed").exists():
        pytest.skip("this venv was not made by the Makefile (make emulate, make test)")
    for name in ("sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun", "sacct"):
        assert (scripts / name).read_text().splitlines()[1].startswith(startscripts.MARK), name

"""Slurm's option grammar (glibc getopt_long) as the commands read it, and their help, usage and version."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wattsched.cli import jobopts, options
from wattsched.cli.sacct import COMMAND as SACCT
from wattsched.cli.sbatch import COMMAND as SBATCH
from wattsched.cli.squeue import COMMAND as SQUEUE
from wattsched.harness.testing import BIN

SLURM_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "scancel", "sinfo", "scontrol", "sacct", "sstat", "sprio",
                  "sshare", "sacctmgr", "sreport", "sdiag", "sh5util")


def test_unique_prefixes_of_long_options() -> None:
    # parsl: sacct -X --noheader --format=jobid,state%20 --job '40,41'
    opts, operands = SACCT.parse(["-X", "--noheader", "--format=jobid,state%20", "--job", "40,41"])
    assert opts == {"allocations": True, "noheader": True, "format": "jobid,state%20", "jobs": ["40,41"]}
    assert operands == []
    assert SBATCH.parse(["--part=debug", "--wra", "true"])[0] == {"partition": "debug", "wrap": "true"}


def test_an_exact_name_wins_over_longer_ones() -> None:
    # --mem is also the prefix of --mem-per-cpu (and of ignored --mem-bind)
    assert SBATCH.parse(["--mem", "100", "x.sh"]) == ({"mem": "100"}, ["x.sh"])


def test_ambiguous_and_unknown_options_fail_as_getopt(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        SBATCH.parse(["--nod=2"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "option '--nod' is ambiguous; possibilities: '--nodes'" in err and "'--nodelist'" in err
    assert 'Try "sbatch --help" for more information' in err
    with pytest.raises(SystemExit):
        SQUEUE.parse(["--bogus"])
    assert "squeue: unrecognized option '--bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SQUEUE.parse(["-%"])
    assert "squeue: invalid option -- '%'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SBATCH.parse(["--hold=yes"])
    assert "option '--hold' doesn't allow an argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SBATCH.parse(["-N"])
    assert "option requires an argument -- 'N'" in capsys.readouterr().err


def test_bundled_short_options_and_attached_values() -> None:
    opts, operands = SBATCH.parse(["-N2", "-n", "4", "-vvQ", "-Jname", "job.sh", "arg"])
    assert opts == {"nodes": "2", "ntasks": 4, "verbose": 2, "quiet": True, "job_name": "name"}
    assert operands == ["job.sh", "arg"]


def test_optional_arguments_only_attach_with_equals() -> None:
    # --nice[=adj]: "--nice 5" leaves 5 an operand (here: sbatch's script), as getopt_long does
    assert SBATCH.parse(["--nice", "5"]) == ({"nice": "100"}, ["5"])
    assert SBATCH.parse(["--nice=5", "x.sh"]) == ({"nice": "5"}, ["x.sh"])


def test_run_commands_stop_at_the_script_others_permute() -> None:
    opts, operands = SBATCH.parse(["-N1", "job.sh", "-N", "5", "--foo"])
    assert opts == {"nodes": "1"} and operands == ["job.sh", "-N", "5", "--foo"]
    opts, operands = SQUEUE.parse(["-u", "alice", "extra", "-h"])
    assert opts == {"user": ["alice"], "noheader": True} and operands == ["extra"]
    assert SQUEUE.parse(["--", "-h"]) == ({}, ["-h"])


def test_numbers_are_checked_as_slurm_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        SBATCH.parse(["-n", "four"])
    assert 'sbatch: error: Invalid numeric value "four" for --ntasks.' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SBATCH.parse(["-c", "99999999999"])
    assert "too big" in capsys.readouterr().err


def test_ignored_options_are_noted_under_verbose_refused_ones_fail(capsys: pytest.CaptureFixture[str]) -> None:
    opts, _ = SBATCH.parse(["--mcs-label=x", "--reboot", "x.sh"])
    assert opts == {} and capsys.readouterr().err == ""
    SBATCH.parse(["-v", "--mcs-label=x", "x.sh"])
    assert "option --mcs-label is not supported by this site and is ignored" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SBATCH.parse(["--mem-per-gpu=4G", "x.sh"])
    assert "sbatch: error: --mem-per-gpu: --mem-per-gpu is not supported; use --mem" in capsys.readouterr().err


def test_every_slurm_option_of_the_run_commands_is_known() -> None:
    # a sample of Slurm's sbatch/srun/salloc options across its sections: each parses (acts, is ignored
    # or is refused with a reason), none is "unrecognized"
    for prog, names in (("sbatch", ["account", "acctg-freq", "array", "begin", "chdir", "clusters", "comment",
                                    "constraint", "contiguous", "core-spec", "cpu-freq", "cpus-per-task",
                                    "deadline", "dependency", "distribution", "error", "exclude", "exclusive",
                                    "export", "get-user-env", "gres", "hint", "hold", "input", "job-name",
                                    "licenses", "mail-type", "mem", "mem-per-cpu", "nice", "no-kill",
                                    "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-node",
                                    "open-mode", "output", "overcommit", "oversubscribe", "parsable",
                                    "partition", "priority", "profile", "propagate", "qos", "quiet", "reboot",
                                    "requeue", "reservation", "signal", "sockets-per-node", "switches",
                                    "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid",
                                    "wait", "wait-all-nodes", "wckey", "wrap"]),
                        ("srun", ["label", "unbuffered", "immediate", "jobid", "cpu-bind", "mpi", "overlap",
                                  "exact", "kill-on-bad-exit", "multi-prog", "pty", "preserve-env", "het-group"]),
                        ("salloc", ["immediate", "no-shell", "bell", "kill-command"])):
        table = {o.long for o in jobopts.job_options(prog) if isinstance(o, options.Opt)}
        missing = [n for n in names if n not in table]
        assert not missing, (prog, missing)


@pytest.mark.parametrize("prog", SLURM_COMMANDS)
def test_help_usage_and_version(prog: str) -> None:
    version = subprocess.run([str(BIN / prog), "--version"], capture_output=True, text=True, timeout=30)
    # exactly Slurm's "slurm X.Y.Z" (Slurm's testsuite parses it; ours is wattsched --version's)
    assert version.returncode == 0 and re.fullmatch(r"slurm \d+\.\d+\.\d+\n", version.stdout)
    usage = subprocess.run([str(BIN / prog), "--usage"], capture_output=True, text=True, timeout=30)
    helped = subprocess.run([str(BIN / prog), "--help"], capture_output=True, text=True, timeout=30)
    # Slurm's layouts: the database commands list their options one by one (sacctmgr --usage is its
    # help); the others open with a usage line, and sbatch, salloc and srun --usage bracket each option
    listing = prog in ("sacct", "sstat", "sacctmgr")
    assert helped.returncode == usage.returncode == 0
    assert re.match(rf"{prog} \[<OPTION>\]( \[<COMMAND>\])?\n    Valid <OPTION> values are:\n" if listing
                    else rf"Usage: {prog} ", helped.stdout)
    assert usage.stdout == helped.stdout if prog == "sacctmgr" else usage.stdout.startswith(f"Usage: {prog} ")
    if prog in ("sbatch", "srun", "salloc"):
        tail = "[command [args...]]" if prog == "salloc" else "executable [args...]"
        assert re.fullmatch(rf"Usage: {prog}(\s+\[-{{1,2}}.*?\])+\s+{re.escape(tail)}\n", usage.stdout, re.S)
    if prog in ("scancel", "sinfo", "squeue", "sprio"):
        assert helped.stdout.startswith(f"Usage: {prog} [OPTIONS]")
    assert "<class" not in helped.stdout and "TEXT" not in helped.stdout  # no Python types as metavars
    if prog == "sbatch":
        assert "  -N, --nodes=N               number of nodes on which to run (N = min[-max])" in helped.stdout
    bad = subprocess.run([str(BIN / prog), "--no-such-option"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and f"{prog}: unrecognized option '--no-such-option'" in bad.stderr


def test_the_documented_option_table_is_the_commands_own() -> None:
    from wattsched.cli import optiontable

    page = (Path(__file__).resolve().parents[2] / "docs" / "user" / "commands.md").read_text()
    start, end = page.index(optiontable.BEGIN), page.index(optiontable.END) + len(optiontable.END)
    assert page[start:end] == optiontable.table(), "out of date: python -m wattsched.cli.optiontable"


@pytest.mark.parametrize("prog", ["squeue", "sinfo", "sacct", "scontrol"])
def test_a_reader_gone_away_ends_the_command_quietly_as_slurms(prog: str) -> None:
    """`squeue | head -1`: the command ends by SIGPIPE, as Slurm's C commands do, without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([str(BIN / prog), "--help"], stdout=write_end, stderr=subprocess.PIPE, timeout=30)
    finally:
        os.close(write_end)
    assert done.returncode == -signal.SIGPIPE and done.stderr == b""


def test_the_commands_leave_the_environment_they_pass_on_alone() -> None:
    """sbatch's default --export=ALL copies the environment into the job's: nothing of ours may be
    added to it (TYPER_USE_RICH was, by the package's import)."""
    code = "import os, wattsched.cli.sbatch, wattsched.cli.wattsched; print(sorted(os.environ))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0 and done.stdout.strip() in ("['PATH']", "['LC_CTYPE', 'PATH']"), done.stdout


def test_the_reference_pages_list_every_option_and_every_key() -> None:
    """The site's reference is made from the code's own tables: every option of every command and
    every configuration key (with its aliases) is on its page."""
    import dataclasses
    import importlib

    from wattsched import config
    from wattsched.cli import optiontable, reference

    made = reference.pages()
    for prog in optiontable.COMMANDS:
        page = made[f"reference/commands/{prog}.md"]
        for opt in importlib.import_module(f"wattsched.cli.{prog}").COMMAND.options:
            assert (f"`--{opt.long}" if opt.long else f"`-{opt.short}") in page, (prog, opt.long, opt.short)
    keys = made["reference/keys.md"]
    for cls in (config.Config, config.NodeConf, config.PartitionConf):
        for f in dataclasses.fields(cls):
            if "key" in f.metadata:
                assert f"| `{f.metadata['key']}` | {', '.join(f.metadata['aliases'])} |" in keys, f.metadata["key"]
    assert made["index.md"].startswith("# wattsched") and "](docs/" not in made["index.md"]


def test_show_hostnames_says_what_is_wrong_and_exits_0_as_slurms() -> None:
    """Slurm's testsuite asks ``scontrol show hostnames`` of every node requirement: a bad or empty list
    gets Slurm's message on stderr and exit code 0; the encoders still fail on a bad argument."""
    env = dict(os.environ, WATTSCHED_CONF=str(Path(__file__).resolve().parents[2] / "etc" / "emulated.conf"))
    env.pop("SLURM_NODELIST", None)

    def scontrol(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "scontrol"), *args], capture_output=True, text=True, timeout=30,
                              env=dict(env, **extra))

    for text in ("[]", "x[", "n[3-1]"):
        shown = scontrol("show", "hostnames", text)
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, "", f"Invalid hostlist: {text}\n"), text
    empty = scontrol("show", "hostnames")
    assert (empty.returncode, empty.stderr) == (0, "scontrol: error: host list is empty\n")
    assert scontrol("show", "hostnames", SLURM_NODELIST="n[1-2]").stdout == "n1\nn2\n"
    assert scontrol("show", "hostnames").stdout == "" and scontrol("show", "hostnames", "a,b").stdout == "a\nb\n"
    encode = scontrol("show", "hostlist")
    assert encode.returncode == 1 and "invalid encode argument" in encode.stderr
    assert scontrol("show", "hostlist", "x[").returncode == 1


def test_every_input_variable_stands_for_a_declared_option_and_is_read_as_it() -> None:
    from wattsched.cli import jobopts, salloc, sbatch

    for command in (sbatch.COMMAND, salloc.COMMAND):
        for variable, option in jobopts.INPUT_VARIABLES[command.prog]:
            assert (command.by_short if len(option) == 2 else command.by_long).get(option.lstrip("-")), variable
    read = sbatch.COMMAND.from_environment(jobopts.INPUT_VARIABLES["sbatch"], {
        "SBATCH_ACCOUNT": "physics", "SBATCH_NO_REQUEUE": "", "SBATCH_WAIT": "1", "SLURM_CLUSTERS": "a",
        "SBATCH_CLUSTERS": "b", "UNRELATED": "x"})
    # flags are set whatever the value; of two variables for one option, Slurm's later one wins
    assert read == {"account": "physics", "requeue": False, "wait": True, "clusters": "a"}


def test_the_configuration_is_slurms_where_ours_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without WATTSCHED_CONF or SLURM_CONF: /etc/wattsched/wattsched.conf, else a Slurm site's
    /etc/slurm/slurm.conf (sudo and login shells keep neither variable)."""
    from wattsched.cli import common

    ours, slurms = tmp_path / "wattsched.conf", tmp_path / "slurm.conf"
    monkeypatch.setattr(common, "DEFAULT_CONF", str(ours))
    monkeypatch.setattr(common, "SLURM_DEFAULT_CONF", str(slurms))
    for name in ("WATTSCHED_CONF", "SLURM_CONF"):
        monkeypatch.delenv(name, raising=False)
    assert common.config_path() == str(ours)  # neither: ours, whose absence is then reported
    slurms.write_text("")
    assert common.config_path() == str(slurms)
    ours.write_text("")
    assert common.config_path() == str(ours)
    monkeypatch.setenv("SLURM_CONF", "/elsewhere.conf")
    assert common.config_path() == "/elsewhere.conf"


def test_list_options_keep_a_bracketed_list_whole() -> None:
    """-w n[01-02,05],n07 and 12_[1-4,6],13: a comma inside brackets belongs to its item, as Slurm's."""
    from wattsched.cli.common import split_list

    assert split_list(["n[01-02,05],n07", "a,,b"]) == ["n[01-02,05]", "n07", "a", "b"]
    assert split_list(["12_[1-4,6],13"]) == ["12_[1-4,6]", "13"]
    assert split_list(None) == []

"""Interactive work as a user at a terminal does it: srun --pty, salloc with a shell, srun's stdin.

The commands run on a real pseudo-terminal (Python's pty), typed at like a person would: a line,
then wait for what it prints."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from wattsched.harness.testing import BIN, Cluster, wait_for


class Terminal:
    """A command on its own pseudo-terminal: type lines, wait for text, collect its exit code."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec at once (the test process has threads)
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.seen = b""

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern.encode())
        while not (found := regex.search(self.seen)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} in {self.seen.decode(errors='replace')!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"terminal closed before {pattern!r}: {self.seen.decode(errors='replace')!r}")
                self.seen += chunk
        return found

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with_output = select.select([self.fd], [], [], 0.1)[0]
            if with_output:
                with contextlib.suppress(OSError):
                    self.seen += os.read(self.fd, 65536)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        raise AssertionError(f"still running: {self.seen.decode(errors='replace')!r}")


@pytest.fixture()
def terminal(cluster: Cluster) -> Iterator[type]:
    opened: list[Terminal] = []

    def open_terminal(*args: str) -> Terminal:
        term = Terminal([str(BIN / args[0]), *args[1:]], dict(cluster.env, TERM="dumb", PS1="$ "), str(cluster.work))
        opened.append(term)
        return term

    yield open_terminal
    for term in opened:
        try:
            os.kill(term.pid, 9)
            os.waitpid(term.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_srun_pty_runs_an_interactive_shell(cluster: Cluster, terminal) -> None:
    shell = shutil.which("bash") or "/bin/sh"
    term = terminal("srun", "--pty", shell, "--norc", "--noprofile") if shell.endswith("bash") else \
        terminal("srun", "--pty", shell)
    term.type("echo tty-$(tty | cut -c1-9)-job-$SLURM_JOB_ID-step-$SLURM_STEP_ID\n")
    found = term.expect(r"tty-/dev/pts/-job-(\d+)-step-0")
    job_id = int(found.group(1))
    term.type("stty size\n")
    term.expect(r"\d+ \d+")  # a real terminal: it has a size
    term.type("exit 3\n")
    assert term.wait() == 3
    assert cluster.wait_state(job_id, {"FAILED"})["exit_code"] == 3


def test_salloc_gives_a_shell_in_an_allocation_and_releases_it(cluster: Cluster, terminal) -> None:
    term = terminal("salloc", "-N", "2", "/bin/sh")
    job_id = int(term.expect(r"Granted job allocation (\d+)").group(1))
    assert cluster.job(job_id)["state"] == "RUNNING"
    term.type("echo nodes=$SLURM_JOB_NUM_NODES id=$SLURM_JOB_ID\n")
    term.expect(rf"nodes=2 id={job_id}")
    term.type("srun -l printenv SLURMD_NODENAME | sort\n")
    term.expect(r"0: n\d+\s+1: n\d+")
    term.type("exit\n")
    term.expect(rf"Relinquishing job allocation {job_id}")
    assert term.wait() == 0
    assert cluster.wait_state(job_id, {"COMPLETED"})
    steps = [s["step_id"] for s in cluster.accounted(job_id)[0]["steps"]]
    assert "0" in steps


def test_salloc_command_ends_when_the_allocation_is_cancelled(cluster: Cluster) -> None:
    proc = subprocess.Popen([str(BIN / "salloc"), "sleep", "300"], env=cluster.env, cwd=cluster.work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = wait_for(lambda: next((j["job_id"] for j in cluster.jobs() if j["state"] == "RUNNING"
                                        and j["name"] == "sleep"), None), 30, what="salloc's job running")
        cluster.run("scancel", str(job_id))
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert f"Job allocation {job_id} has been revoked" in err
    assert proc.returncode != 0


def test_salloc_no_shell_leaves_the_allocation_for_steps(cluster: Cluster) -> None:
    """salloc --no-shell: the allocation is granted and kept (steps run in it with --jobid) until
    scancel or its time limit, as Slurm's."""
    done = cluster.run("salloc", "--no-shell", "-N1", "-t", "5")
    job_id = re.search(r"Granted job allocation (\d+)", done.stderr).group(1)
    assert cluster.job(int(job_id))["state"] == "RUNNING" and "Relinquishing" not in done.stderr
    assert cluster.run("srun", f"--jobid={job_id}", "echo", "in it").stdout == "in it\n"
    assert cluster.job(int(job_id))["state"] == "RUNNING"
    cluster.run("scancel", job_id)
    cluster.wait_state(int(job_id), "CANCELLED")


def test_ctrl_c_shows_the_tasks_then_ends_the_step_as_slurms_srun(cluster: Cluster, terminal) -> None:
    """Ctrl-C once: srun says so and lists its tasks' states; again within a second: it sends them
    Ctrl-C and forces the step's end (a task ignoring SIGINT is killed); --quit-on-interrupt: at once."""
    task = "trap '' INT; echo WAITING; sleep 1000"
    term = terminal("srun", "-v", "-N1", "--unbuffered", "sh", "-c", task)
    term.expect("WAITING")
    term.type("\x03")
    term.expect(r"srun: interrupt \(one more within 1 sec to abort\)\r?\nsrun: StepId=\d+\.0 task 0: running")
    for _ in range(50):  # a second Ctrl-C within a second of the first (as often as a loaded machine needs)
        term.type("\x03")
        with contextlib.suppress(AssertionError):
            term.expect("srun: forcing job termination", timeout=0.5)
            break
    term.expect(r"srun: sending Ctrl-C to StepId=\d+\.0")
    term.expect("task 0: Killed")
    assert term.wait() != 0
    quick = terminal("srun", "-N1", "--quit-on-interrupt", "sh", "-c", task)
    quick.expect("WAITING")
    quick.type("\x03")
    quick.expect("srun: forcing job termination")
    assert quick.wait() != 0
    # the job cancelled under it: srun says its step was aborted, as Slurm's
    cancelled = terminal("srun", "-v", "-N1", "sh", "-c", task)
    job_id = cancelled.expect(r"srun: jobid (\d+)").group(1).decode()
    cancelled.expect("WAITING")
    cluster.run("scancel", job_id)
    cancelled.expect(r"srun: Job step aborted: Waiting up to 3 seconds for job step to finish\.")
    assert cancelled.wait() != 0


def test_stdin_goes_to_every_task_or_where_input_says(cluster: Cluster) -> None:
    assert cluster.run("srun", "cat", input="hello\n").stdout == "hello\n"
    # Slurm's default (srun(1), IO Redirection): stdin broadcast to all tasks, every byte to each
    data = "".join(f"{i:05d}\n" for i in range(2000))  # 12,000 bytes
    four = cluster.run("srun", "-N2", "-n", "4", "-l", "cat", input=data).stdout.splitlines()
    assert sorted(four) == sorted(f"{t}: {line}" for t in range(4) for line in data.splitlines())
    everyone = cluster.run("srun", "-n", "2", "-l", "--input=all", "cat", input="y\n").stdout
    assert sorted(everyone.splitlines()) == ["0: y", "1: y"]
    assert cluster.run("srun", "-n", "2", "-l", "-i", "1", "cat", input="z\n").stdout == "1: z\n"
    assert cluster.run("srun", "--input=none", "cat", input="ignored\n").stdout == ""
    (cluster.work / "in-1.txt").write_text("from file\n")
    assert cluster.run("srun", "-n", "2", "-l", "--input=in-%t.txt", "cat", check=False).stdout.count("from file") == 1


def test_tasks_writing_one_output_file_lose_nothing(cluster: Cluster) -> None:
    """srun -i FILE -o OUT -N4 -n4 cat: every task's copy ends up in OUT (the file is emptied once,
    before any task runs, and the tasks append), as Slurm's; %x is the job's name."""
    source = cluster.work / "broadcast.in"
    source.write_text("".join(f"{line:099d}\n" for line in range(100)))  # 10,000 bytes
    out = cluster.work / "broadcast.out"
    out.write_text("old content to be emptied\n")
    for _ in range(3):
        cluster.run("srun", f"--input={source}", f"--output={out}", "--error=/dev/null", "-N4", "-n4", "cat", "-")
        assert out.stat().st_size == 4 * 10_000
    cluster.run("srun", "-J", "named", "-n2", "-o", "x-%x-%t.out", "echo", "hi")
    assert [(cluster.work / f"x-named-{t}.out").read_text() for t in (0, 1)] == ["hi\n", "hi\n"]
    # -o N: task N's output alone comes to srun, the others' is discarded; none: all of it is
    only = cluster.run("srun", "-n4", "--output=2", "--error=3", "sh", "-c", "echo out $SLURM_PROCID; "
                       "echo err $SLURM_PROCID >&2")
    assert (only.stdout, only.stderr) == ("out 2\n", "err 3\n")
    assert cluster.run("srun", "-n2", "--output=none", "echo", "hi").stdout == ""
    beyond = cluster.run("srun", "-n2", "--output=5", "true", check=False)
    assert beyond.returncode == 1 and "--output: task 5 is not part of this step" in beyond.stderr


def test_bash_completes_options_partitions_jobs_nodes_and_fields(cluster: Cluster, tmp_path) -> None:
    """`wattsched completion` in a real interactive bash: Tab completes the commands' options, and
    partitions, job ids, node names and sacct fields asked of the cluster."""
    script = tmp_path / "completion.bash"
    script.write_text(cluster.run("wattsched", "completion").stdout)
    job = cluster.sbatch("--wrap", "sleep 300")
    term = Terminal(["/bin/bash", "--norc", "--noprofile", "-i"],
                    dict(cluster.env, TERM="dumb", PS1="$ ", INPUTRC="/dev/null"), str(cluster.work))
    try:
        term.type(f"source {script}; echo sourced\n")
        term.expect("sourced\r?\n")
        for typed, shown in (("sbatch --parti\t", r"sbatch --partition "),  # one match: completed in place
                             ("squeue -p \t", r"squeue -p debug"),
                             (f"scancel {str(job)[:-1]}\t", rf"scancel {job}"),
                             ("sbatch -w n0\t\t", r"n01\s+n02\s+n03\s+n04"),  # several: listed
                             ("sacct -o JobID\t\t", r"JobID\s+JobIDRaw"),
                             ("sacct --format=JobID,Elapsed\t\t", r"JobID,Elapsed\s+JobID,ElapsedRaw")):
            term.seen = b""
            term.type(typed)
            term.expect(shown)
            term.type("\x15")  # Ctrl-U: a fresh line
        term.type("exit\n")
        assert term.wait() == 0
    finally:
        cluster.run("scancel", str(job))


def test_sattach_shows_a_running_steps_output_and_feeds_its_input(cluster: Cluster) -> None:
    """sattach JOB.STEP, as Slurm's: --layout prints where the tasks run; attached, the output from
    then on comes (labelled, one task's with --output-filter) and what is typed reaches the tasks
    that read srun's input; Ctrl-C detaches and the step runs on. Another user may not attach."""
    script = "sleep 300 | srun -n2 sh -c 'while read line; do echo \"$SLURM_PROCID got $line\"; done'"
    job_id = cluster.sbatch("-n2", "-o", "/dev/null", "--wrap", script)
    wait_for(lambda: cluster.run("scontrol", "show", "step", f"{job_id}.0", check=False).returncode == 0, 30,
             what="the step running")
    shown = cluster.run("sattach", "--layout", f"{job_id}.0").stdout
    assert shown == "Job step layout:\n\t2 tasks, 1 nodes (n01)\n\n\tNode 0 (n01), 2 task(s): 0 1 \n"
    attached = subprocess.Popen([str(BIN / "sattach"), "-l", "--output-filter=1", f"{job_id}.0"], env=cluster.env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(iter(attached.stdout.readline, "")), daemon=True)
        reader.start()
        for word in ("hello", "again"):  # typed until it comes back: the attach may still be under way
            for _ in range(30):
                attached.stdin.write(f"{word}\n")
                attached.stdin.flush()
                with contextlib.suppress(AssertionError):
                    wait_for(lambda w=word: f"1: 1 got {w}\n" in seen, 1, what=f"'{word}' echoed by task 1")
                    break
            assert f"1: 1 got {word}\n" in seen, seen
        assert not any(line.startswith("0:") for line in seen)
        attached.send_signal(signal.SIGINT)
        assert attached.wait(30) == 0
        assert cluster.job(job_id)["state"] == "RUNNING"
    finally:
        attached.kill()
    other = cluster.run("sattach", f"{job_id}.0", env=cluster.user_env(), check=False)
    assert other.returncode == 1 and "Access/permission denied" in other.stderr
    missing = cluster.run("sattach", f"{job_id}.7", check=False)
    assert missing.returncode == 1 and f"Job step {job_id}.7 not found or not running" in missing.stderr
    cluster.run("scancel", str(job_id))

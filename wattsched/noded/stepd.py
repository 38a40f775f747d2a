"""The step daemon: the only code that turns the root agent's launch request into a user's process.

The agent runs as root and never opens, creates or enters a path a user named (Slurm's slurmstepd
rule). Its fork server (:mod:`wattsched.noded.forkserver`) forks this code with a clean environment
and the launch request on a file descriptor (a memfd the agent wrote), in one of two modes:

* ``batch``: a root supervisor for one batch script. It forks the script's process, which becomes
  the user (supplementary groups, gid, uid) and only then applies the user's umask, enters the
  working directory, opens stdin/stdout/stderr and executes the script. The root parent records the
  child's pid and start time, waits for it, and writes the exit status into the job's root-owned spool
  folder. The agent trusts only those two files, also after its own restart, because no process of
  the user can write there.
* ``exec``: the same change of identity in-process, then exec (a step task: the agent itself is the
  parent and reaps it).

Until the exec the child's signal dispositions are reset to their defaults, since the supervisor
ignores the termination signals that the agent sends to the script's process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

TYPE_CHECKING = False  # not typing's: the fork server imports only what the daemons need
if TYPE_CHECKING:
    from typing import Any

# The signals the batch supervisor ignores: they are meant for the script, never for its recorder.
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
           signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
FALLBACK_DIR = "/tmp"


class LaunchError(Exception):
    """The user's process could not be started; the message is Slurm's wording."""


def read_spec(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def become_user(spec: dict[str, Any]) -> None:
    """Drop to the job's identity for good (when started as root): groups first, then gid, then uid."""
    uid, gid = int(spec["uid"]), int(spec["gid"])
    if os.geteuid() == 0:
        os.setgroups([int(g) for g in spec.get("groups", [gid])])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # raises rather than leave any id behind


def _open(path: str, flags: int, what: str) -> int:
    try:
        return os.open(path, flags | os.O_CLOEXEC, 0o666)  # the user's umask decides, as for any file they make
    except OSError as exc:
        raise LaunchError(f"Could not open {what} file {path}: {exc.strerror}") from exc


def setup_as_user(spec: dict[str, Any]) -> list[str]:
    """Umask, working directory and standard streams, in the user's name; returns warnings for stderr."""
    warnings = []
    os.umask(int(spec.get("umask", 0o022)) & 0o777)
    work_dir = spec.get("work_dir") or FALLBACK_DIR
    try:
        os.chdir(work_dir)
    except OSError as exc:
        warnings.append(f"slurmstepd: error: couldn't chdir to `{work_dir}': {exc.strerror}: "
                        f"going to {FALLBACK_DIR} instead\n")
        os.chdir(FALLBACK_DIR)
    # always O_APPEND, as Slurm's slurmstepd: tasks sharing a file each write at its end
    append = os.O_APPEND if spec.get("open_mode") == "append" else os.O_APPEND | os.O_TRUNC
    targets = []
    if spec.get("stdin"):
        targets.append((0, _open(spec["stdin"], os.O_RDONLY, "stdin")))
    if spec.get("stdout"):
        out = _open(spec["stdout"], os.O_WRONLY | os.O_CREAT | append, "stdout")
        targets.append((1, out))
        if spec.get("stderr") == spec["stdout"]:
            targets.append((2, out))
    if spec.get("stderr") and spec.get("stderr") != spec.get("stdout"):
        targets.append((2, _open(spec["stderr"], os.O_WRONLY | os.O_CREAT | append, "stderr")))
    for target, fd in targets:
        os.dup2(fd, target)  # dup2 clears close-on-exec on the copy
    for fd in {fd for _, fd in targets}:
        if fd > 2:
            os.close(fd)
    return warnings


def set_limits(limits: dict[str, int]) -> None:
    """The submitting shell's soft limits (PropagateResourceLimits), set once this process is the
    user: never above the node's hard limit (-1: unlimited, as far as that goes)."""
    import resource

    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name}", None)
        if which is None:
            continue
        hard = resource.getrlimit(which)[1]
        if value < 0:
            value = hard
        elif hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (value, hard))


def join_cgroups(spec: dict[str, Any]) -> None:
    """Enter the step's cgroups (files the root agent named from the job's number) while still root:
    this process and all it starts stay there, whatever they do."""
    for path in spec.get("cgroup_procs", ()):
        try:
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            raise LaunchError(f"Could not enter the job's cgroup {path}: {exc.strerror}") from exc


CLONE_NEWNS, CLONE_NEWUTS = 0x00020000, 0x04000000  # sched.h
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18  # sys/mount.h


def enter_node(spec: dict[str, Any]) -> None:
    """A virtual node's identity (wattsched.noded.virtualhost), taken while still root: its name as
    hostname in a UTS namespace of its own, its hosts file over /etc/hosts in a mount namespace of
    its own, its TMPDIR. Where the kernel refuses new namespaces (an agent that is not root), the
    process keeps the host's name and files."""
    name = spec.get("hostname")
    if not name:
        return
    import ctypes
    import socket

    if spec.get("tmp_dir"):
        spec["env"]["TMPDIR"] = str(spec["tmp_dir"])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS | CLONE_NEWNS) != 0:
        return
    socket.sethostname(str(name))
    hosts = str(spec.get("hosts_file") or "")
    # private first: the bind below must not reach the host's own mount table
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0 or \
            (hosts and libc.mount(hosts.encode(), b"/etc/hosts", None, MS_BIND, None) != 0):
        raise LaunchError(f"Could not give node {name} its hosts file: {os.strerror(ctypes.get_errno())}")


def exec_as_user(spec: dict[str, Any]) -> None:
    """Enter the step's cgroups (and a virtual node's name), become the user, set up the task's
    streams, exec: never returns (raises LaunchError)."""
    join_cgroups(spec)
    enter_node(spec)
    if spec.get("cpu_bind"):  # task/affinity: the CPUs the agent chose among the job's
        os.sched_setaffinity(0, [int(c) for c in spec["cpu_bind"]])
    become_user(spec)
    set_limits(spec.get("rlimits") or {})
    for warning in setup_as_user(spec):
        os.write(2, warning.encode())
    if spec.get("cpu_bind_report"):
        mask = hex(sum(1 << int(c) for c in spec["cpu_bind"]))
        os.write(2, f"{spec['cpu_bind_report']} [{os.getpid()}]: mask {mask} set\n".encode())
    run_task_prolog(spec)
    if spec.get("pty"):
        raise SystemExit(run_in_pty(spec))
    if "status_fd" in spec:
        raise SystemExit(run_child(spec))
    _exec(spec)


def receive_file(spec: dict[str, Any]) -> int:
    """sbcast's file, from standard input to its destination, written as the user (bcast.receive);
    why it failed goes to standard error."""
    import bcast  # the fork server's sibling module, imported there while root (forkserver.py)

    become_user(spec)
    os.umask(0o077)  # the file is private until it takes the source's modes
    try:
        bcast.receive(spec)
    except bcast.BcastError as exc:
        os.write(2, f"{exc}\n".encode())
        return 1
    return 0


def serve_pmix(spec: dict[str, Any]) -> int:
    """A step's PMIx server on its node (pmixhost.serve), as the user and, on a virtual node, under
    the node's name (PMIx places ranks by host name); the agent on standard input and output."""
    import pmixhost  # the fork server's sibling module, imported there while root (forkserver.py)

    spec.setdefault("env", {})
    try:
        enter_node(spec)
    except LaunchError as exc:
        os.write(2, f"slurmstepd: error: {exc}\n".encode())
        return 2
    become_user(spec)
    os.umask(0o077)
    with open(0, encoding="utf-8", closefd=False) as source, open(1, "w", encoding="utf-8", closefd=False) as out:
        return pmixhost.serve(spec, source, out)


USER_EPILOG_S = 5  # how long srun --task-epilog may run before it is killed (Slurm's slurmstepd's)


def run_task_prolog(spec: dict[str, Any]) -> None:
    """TaskProlog, then srun's --task-prolog, as the user, before the task: their output lines
    ``export NAME=value`` and ``unset NAME`` change the task's environment, ``print ...`` goes to
    the task's standard output (Slurm's rules); their standard error is the task's."""
    for key, name in (("task_prolog", "TaskProlog"), ("user_task_prolog", "--task-prolog")):
        path = spec.get(key)
        if not path:
            continue
        import tempfile  # only with a task prolog: every task pays for what the step daemon imports

        # its output to a file, not a pipe: what it leaves running in the background keeps a pipe open
        with tempfile.TemporaryFile() as out:
            if not _run_script(path, name, _env(spec), out, None):
                continue
            out.seek(0)
            said = out.read(1 << 20)
        for line in said.decode(errors="replace").splitlines():
            word, _, rest = line.strip().partition(" ")
            if word == "export" and "=" in rest:
                variable, _, value = rest.strip().partition("=")
                spec["env"][variable] = value
            elif word == "unset":
                spec["env"].pop(rest.strip(), None)
            elif word == "print":
                _write_all(1, (rest + "\n").encode())


def run_task_epilog(spec: dict[str, Any]) -> None:
    """srun's --task-epilog (killed after USER_EPILOG_S), then TaskEpilog, as the user (this process
    already is), after the task, with the task's environment, in Slurm's order."""
    for key, name, limit in (("user_task_epilog", "--task-epilog", USER_EPILOG_S),
                             ("task_epilog", "TaskEpilog", None)):
        path = spec.get(key)
        if path:
            _run_script(path, name, {**_env(spec), "SLURM_SCRIPT_CONTEXT": "epilog_task"}, None, limit)


def _run_script(path: str, name: str, env: dict[str, str], out: Any, limit: float | None) -> bool:
    """A task prolog or epilog in a process group of its own, killed whole once it has ended (or
    after ``limit`` seconds), as Slurm's slurmstepd does: nothing it started in the background
    outlives it, or holds the task's output open. False when it could not be run."""
    import subprocess

    try:
        proc = subprocess.Popen([path], env=env, stdin=subprocess.DEVNULL, stdout=out, process_group=0)
    except OSError as exc:
        os.write(2, f"slurmstepd: error: {name} {path}: {exc.strerror}\n".encode())
        return False
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.write(2, f"slurmstepd: error: {name} {path}: killed after {limit} s\n".encode())
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return True


def _env(spec: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in spec["env"].items()}


def run_child(spec: dict[str, Any]) -> int:
    """An srun task: fork it from this small process and wait for it, so that its MaxRSS is its
    own (a process's peak RSS survives exec: were the task the agent's fork, it would carry the
    agent's), then report its status and usage on ``status_fd`` and end as it did."""
    status_fd = int(spec["status_fd"])
    # signals for the task reach it through the group; we ignore them and stay to report. Held
    # back across the fork: one that comes before either side has set its dispositions is then
    # delivered to the task (default action) and dropped here, never the other way round
    held = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_fd)
            _exec(spec, held)
        except BaseException as exc:  # the child must never return into the parent's code
            os.write(2, f"slurmstepd: error: {exc}\n".encode())
        os._exit(2)
    for ignored in IGNORED:
        signal.signal(ignored, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    _drop_kept(spec)
    return _report(pid, status_fd, spec)


def _drop_kept(spec: dict[str, Any]) -> None:
    """The task has forked off with its kept descriptor: ours is closed, so that the task's end is
    its server's end of file."""
    if "keep_fd" in spec:
        with contextlib.suppress(OSError):
            os.close(int(spec.pop("keep_fd")))


def _report(pid: int, status_fd: int, spec: dict[str, Any]) -> int:
    _pid, status, usage = os.wait4(pid, 0)
    run_task_epilog(spec)
    code, sig = (0, os.WTERMSIG(status)) if os.WIFSIGNALED(status) else (os.WEXITSTATUS(status), 0)
    with contextlib.suppress(OSError):
        _write_all(status_fd, json.dumps({"exit_code": code, "signal": sig, "usage": usage_record(usage)}).encode())
        os.close(status_fd)
    if sig:
        if sig != signal.SIGKILL:  # its disposition cannot be set (EINVAL), nor need it be
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return code


def _exec(spec: dict[str, Any], mask: Any = None) -> None:
    """Become the task. ``mask``: the signal mask to restore once the dispositions are the task's
    (signals held back across a fork are then delivered to it)."""
    # the task gets every signal's default action: also SIGPIPE and SIGXFSZ, which Python ignores
    for sig in (*IGNORED, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    argv = [str(a) for a in spec["argv"]]
    spec["env"]["SLURM_TASK_PID"] = str(os.getpid())  # this process is the task from the exec on
    try:
        os.execvpe(argv[0], argv, {str(k): str(v) for k, v in spec["env"].items()})
    except OSError as exc:
        raise LaunchError(f"execve(): {argv[0]}: {exc.strerror}") from exc


def run_in_pty(spec: dict[str, Any]) -> int:
    """srun --pty: run the task on a new pseudo-terminal (its controlling terminal, in a session of
    its own) and relay between it and our stdin/stdout, which lead to srun through the agent.
    Already the user here: the pty is the user's own. Ends as the task did (same code or signal)."""
    import fcntl
    import select
    import struct
    import termios

    master, slave = os.openpty()
    size = struct.pack("HHHH", int(spec["pty"].get("rows", 24)), int(spec["pty"].get("cols", 80)), 0, 0)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.close(master)
            if "status_fd" in spec:
                os.close(int(spec["status_fd"]))
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            _exec(spec)
        except BaseException as exc:  # the child must never return into the relay
            os.write(2, f"slurmstepd: error: {exc}\r\n".encode())
        os._exit(1)
    os.close(slave)
    _drop_kept(spec)
    sources = [0, master]
    while master in sources:
        readable, _, _ = select.select(sources, [], [])
        if master in readable:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other side has gone
                data = b""
            if not data:
                sources.remove(master)
            else:
                _write_all(1, data)
        if 0 in readable:
            data = os.read(0, 65536)
            if data:
                _write_all(master, data)
            else:  # srun's input ended: as if the user typed Ctrl-D
                sources.remove(0)
                _write_all(master, b"\x04")
    if "status_fd" in spec:
        return _report(pid, int(spec["status_fd"]), spec)
    _pid, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def proc_start(pid: int) -> int:
    """A process's start time in clock ticks since boot (0 if it is gone): with the pid, it names one
    process, never a later one that reuses the number."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def write_private(path: str, data: dict[str, Any]) -> None:
    """Atomically write a root-owned record (0600)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def usage_record(usage: Any) -> dict[str, Any]:
    """A reaped process's rusage as a task's usage (wattsched.api.TaskUsage's fields); block counts
    are in 512-byte units (getrusage(2))."""
    return {"user_cpu_s": usage.ru_utime, "system_cpu_s": usage.ru_stime, "max_rss_kb": usage.ru_maxrss,
            "disk_read_b": usage.ru_inblock * 512, "disk_write_b": usage.ru_oublock * 512,
            "pages": usage.ru_majflt}


def supervise(spec: dict[str, Any]) -> int:
    """Run one batch script as its user; record its pid, then its end, in the root-owned spool."""
    spool = spec["spool"]
    for ignored in IGNORED:
        signal.signal(ignored, signal.SIG_IGN)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        os.close(go_w)
        try:
            os.setpgid(0, 0)  # the script's own process group: what the agent signals
            if os.read(go_r, 1) != b"x":  # wait until the parent has recorded us (EOF: it died, so do we)
                os._exit(1)
            os.close(go_r)
            exec_as_user(spec)
        except LaunchError as exc:
            os.write(err_w, str(exc).encode()[:1000])
        except BaseException as exc:  # anything before the exec is a launch failure
            os.write(err_w, f"launch failed: {exc}".encode()[:1000])
        os._exit(1)
    os.close(err_w)
    os.close(go_r)
    write_private(os.path.join(spool, "script.pid"), {"pid": pid, "start": proc_start(pid)})
    os.write(go_w, b"x")
    os.close(go_w)
    message = b""
    while chunk := os.read(err_r, 4096):
        message += chunk
    os.close(err_r)
    _pid, status, usage = os.wait4(pid, 0)
    if spec.get("task_epilog"):
        _batch_task_epilog(spec)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # what the script left in its group ends with it, as in Slurm
    code, sig = (0, os.WTERMSIG(status)) if os.WIFSIGNALED(status) else (os.WEXITSTATUS(status), 0)
    record = {"exit_code": code, "signal": sig, "usage": usage_record(usage)}
    if message:
        record.update(exit_code=1, signal=0, error=message.decode(errors="replace"))
    write_private(os.path.join(spool, "status"), record)
    return 0


def _batch_task_epilog(spec: dict[str, Any]) -> None:
    """TaskEpilog after a batch script: in a child that joins the step, becomes the user and appends
    to the script's output (the supervisor stays root)."""
    pid = os.fork()
    if pid == 0:
        try:
            join_cgroups(spec)
            enter_node(spec)
            become_user(spec)
            setup_as_user(dict(spec, stdin="", open_mode="append"))
            run_task_epilog(spec)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def preload() -> None:
    """Import now, as root, every module the code after the change of identity may need: as the user
    the interpreter's own files may be out of reach (a Python under a private folder, as pyenv's in
    root's home). Called once, by the fork server, so every daemon it forks has them all."""
    import ctypes  # noqa: F401  a virtual node's hostname
    import fcntl  # noqa: F401  srun --pty
    import resource  # noqa: F401  os.wait4 builds the task's usage with it
    import select  # noqa: F401
    import socket  # noqa: F401
    import struct  # noqa: F401
    import subprocess  # noqa: F401  TaskProlog, TaskEpilog
    import termios  # noqa: F401


def run(mode: str, spec_fd: int, status_fd: int | None = None, keep_fd: int | None = None) -> int:
    """One step daemon, as :mod:`wattsched.noded.forkserver` forks it: ``batch`` supervises a
    script, ``exec`` becomes a task, ``bcast`` writes sbcast's file as the user, ``pmix`` serves a
    step's PMIx clients on its node; ``status_fd``, an
    exec-mode task's report pipe; ``keep_fd``, a descriptor the task inherits (its PMI
    connection), named to it by ``spec["keep_fd_env"]``."""
    spec = read_spec(spec_fd)
    if status_fd is not None:
        spec["status_fd"] = status_fd
    if keep_fd is not None:
        os.set_inheritable(keep_fd, True)
        spec["keep_fd"] = keep_fd
        spec["env"][str(spec["keep_fd_env"])] = str(keep_fd)
    if mode == "batch":
        return supervise(spec)
    if mode == "bcast":
        return receive_file(spec)
    if mode == "pmix":
        return serve_pmix(spec)
    try:
        exec_as_user(spec)
    except (LaunchError, OSError) as exc:
        os.write(2, f"slurmstepd: error: {exc}\n".encode())
    return 2

"""srun: run a parallel job step, inside an allocation or in a new one, streaming its output.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun asks the controller for a step,
then asks each node's agent to start that node's tasks and prints what they write, with
``-l`` labels. Outside one it first creates an allocation (an interactive job), waits for
it, runs step 0 in it and releases it with the step's exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal as signal_mod
import sys
import threading
import time

from wattsched import jsonwire, rlimits
from wattsched.cli import jobopts as o
from wattsched.cli.common import Client, CLIError, exchange, host_port, http_request, stream
from wattsched.cli.options import Command, run

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any


class StepControl:
    """srun's word to every node of its step while it runs: MPI fence results, and the step's end
    for a task's failure (srun -K, an MPI abort), which srun announces once as Slurm's does."""

    def __init__(self, client: Client, job_id: int, step_id: int, credential: str,
                 placements: list[dict[str, Any]]) -> None:
        self.client, self.job_id, self.step_id, self.credential = client, job_id, step_id, credential
        self.placements = placements
        self.lock = threading.Lock()
        self.terminated = False

    def terminate(self, reason: str, skip: str = "", kill: bool = False) -> None:
        """End the step's tasks on every node (but ``skip``, where they already end): SIGTERM then
        SIGKILL, or with ``kill`` SIGKILL at once."""
        with self.lock:
            if self.terminated:
                return
            self.terminated = True
        sys.stderr.write(f"srun: Terminating StepId={self.job_id}.{self.step_id}\n")
        self.post_all("/v1/steps/terminate", {"reason": reason[:1024], "signal": signal_mod.SIGKILL if kill else 0},
                      skip)

    def signal(self, sig: int) -> None:
        """Send the step's tasks ``sig`` on every node (Ctrl-C's SIGINT, its forced end's SIGKILL)."""
        self.post_all("/v1/steps/terminate", {"reason": "srun was interrupted", "signal": sig})

    def post_all(self, path: str, fields: dict[str, Any], skip: str = "") -> None:
        for placement in self.placements:
            if placement["node"] == skip:
                continue
            host, port = host_port(placement["agent_url"])
            body = {"job_id": self.job_id, "step_id": self.step_id, "node": placement["node"],
                    "credential": self.credential, **fields}
            try:
                status, answer = exchange(host, port, http_request("POST", host, port, path, self.client.token(),
                                                                   body), 60)
            except OSError as exc:
                sys.stderr.write(f"srun: error: {placement['node']}: {exc}\n")
                continue
            if status != 200:
                why = answer[:200].decode(errors="replace")
                sys.stderr.write(f"srun: error: {placement['node']}: {why}\n")


class PmiRelay:
    """srun's part in an MPI step (srun --mpi): each node's MPI server sends its contribution to a
    fence up its task stream; once every node's has come, the union goes to every node's agent. An
    abort on one node ends the step on all the others."""

    def __init__(self, control: StepControl, kind: str) -> None:
        self.control, self.kind = control, kind
        self.lock = threading.Lock()
        self.fences: dict[int, dict[str, dict[str, Any]]] = {}
        self.aborted = False

    def receive(self, node: str, message: dict[str, Any]) -> None:
        if message.get("pmi") == "fence":
            seq = int(message.get("seq", 0))
            with self.lock:
                parts = self.fences.setdefault(seq, {})
                parts[node] = message
                if len(parts) < len(self.control.placements):
                    return
                del self.fences[seq]
            union: dict[str, Any] = {"pmi": "fence", "seq": seq, "kvs": {}, "blobs": {}}
            for part in parts.values():  # PMI's puts, or PMIx's packed data by node
                union["kvs"].update(part.get("kvs") or {})
                union["blobs"].update(part.get("blobs") or {})
            self.control.post_all("/v1/steps/pmi", {"message": union})
        elif message.get("pmi") == "abort":
            with self.lock:
                if self.aborted or self.control.terminated:
                    return
                self.aborted = True
            reason = str(message.get("reason", ""))
            sys.stderr.write(f"srun: error: mpi/{self.kind}: {reason}\n")
            self.control.terminate(reason, skip=node)


class Interrupts:
    """Ctrl-C in srun, as Slurm's: the first prints the tasks' states ("one more within 1 sec to
    abort"); a second within a second (or the first with --quit-on-interrupt) sends the tasks SIGINT
    and forces the step's end (SIGKILL); with -X/--disable-status each is sent on to the tasks."""

    def __init__(self, streams: TaskStreams, quit_at_once: bool, no_status: bool) -> None:
        self.streams, self.quit_at_once, self.no_status = streams, quit_at_once, no_status
        self.last = -10.0
        self.forced = False

    def __call__(self, _signum: int, _frame: object) -> None:
        control = self.streams.control
        step = f"StepId={control.job_id}.{control.step_id}"
        now = time.monotonic()
        if self.quit_at_once or now - self.last < 1.0:
            if self.forced:
                sys.stderr.write("srun: job abort in progress\n")
                return
            self.forced = True
            sys.stderr.write(f"srun: sending Ctrl-C to {step}\nsrun: forcing job termination\n")
            sys.stderr.flush()
            threading.Thread(target=self._force, daemon=True).start()  # (not in a signal handler)
            return
        if self.no_status:
            sys.stderr.write(f"srun: sending Ctrl-C to {step}\n")
            threading.Thread(target=control.signal, args=(signal_mod.SIGINT,), daemon=True).start()
        else:
            sys.stderr.write("srun: interrupt (one more within 1 sec to abort)\n" + self.streams.status())
        sys.stderr.flush()
        self.last = now

    def _force(self) -> None:
        control = self.streams.control
        control.signal(signal_mod.SIGINT)
        control.signal(signal_mod.SIGKILL)


class TaskStreams:
    """Collects task output from all nodes and prints it line by line, labelled with -l. With
    ``kill_bad`` (srun -K) the first task that fails ends the step on every node."""

    def __init__(self, label: bool, ntasks: int, control: StepControl, kill_bad: bool, max_wait: int = 0):
        self.label, self.ntasks = label, ntasks
        self.width = len(str(max(0, ntasks - 1)))
        self.lock = threading.Lock()
        self.exits: dict[int, tuple[int, int]] = {}
        self.told: set[int] = set()  # tasks whose end is already said
        self.errors: list[str] = []
        self.control, self.kill_bad, self.max_wait = control, kill_bad, max_wait
        self.shown: dict[int, set[int] | None] = {1: None, 2: None}  # by stream, the tasks printed (None: all)
        self.aborted = False  # the job ended under the step
        self.abort_wait_s = 32  # Slurm's KillWait + 2, set from the site's KillWait

    def first_exit(self) -> None:
        """srun -W: the step has ``max_wait`` seconds from its first task's end to finish."""
        timer = threading.Timer(self.max_wait, self.out_of_time)
        timer.daemon = True
        timer.start()

    def out_of_time(self) -> None:
        """Slurm's words when -W's time is up with tasks still running, then the step's end."""
        with self.lock:
            if len(self.exits) >= self.ntasks or self.control.terminated:
                return
            sys.stderr.write(f"srun: First task exited {self.max_wait}s ago\n" + self.status())
            sys.stderr.flush()
        self.control.terminate("the first task exited --wait seconds ago", kill=True)  # Slurm's SIGKILL

    def status(self) -> str:
        """Slurm's lines of the tasks' states: running, exited abnormally, exited."""
        exits = dict(self.exits)
        step = f"StepId={self.control.job_id}.{self.control.step_id}"
        groups = (("running", [t for t in range(self.ntasks) if t not in exits]),
                  ("exited abnormally", [t for t, (code, sig) in exits.items() if code or sig]),
                  ("exited", [t for t, (code, sig) in exits.items() if not code and not sig]))
        return "".join(f"srun: {step} task{'s' if len(tasks) > 1 else ''} {task_ranges(tasks)}: {what}\n"
                       for what, tasks in groups if tasks)

    def write(self, task: int, fd_no: int, data: str) -> None:
        shown = self.shown.get(fd_no)
        if shown is not None and task not in shown:  # srun -o N: the other tasks' output is discarded
            return
        stream = sys.stdout if fd_no == 1 else sys.stderr
        if self.label:
            lines = data.splitlines(keepends=True)
            data = "".join(f"{task:>{self.width}}: {line}" for line in lines)
        with self.lock:
            stream.write(data)
            stream.flush()

    def pump(self, client: Client, placement: dict[str, Any], body: dict[str, Any],
             relay: PmiRelay | None = None) -> None:
        host, port = host_port(placement["agent_url"])
        request = http_request("POST", host, port, "/v1/steps/launch", client.token(), body)
        try:
            for line in stream(host, port, request):
                msg = jsonwire.loads(line)
                if "exit" in msg:
                    with self.lock:
                        first = not self.exits
                        self.exits[msg["task"]] = (msg["exit"], msg["signal"])
                    if first and self.max_wait > 0:
                        self.first_exit()
                    if self.kill_bad and (msg["exit"] or msg["signal"]) and not self.control.terminated:
                        with self.lock:
                            self.told.add(msg["task"])
                            sys.stderr.write(task_end(placement["node"], [msg["task"]], msg["exit"], msg["signal"]))
                        self.control.terminate(f"task {msg['task']} failed")
                elif "pmi" in msg:
                    if relay is not None:
                        relay.receive(placement["node"], msg["pmi"])
                elif "aborted" in msg:  # the job ends under the step (scancel, time limit): said once
                    with self.lock:
                        if not self.aborted:
                            self.aborted = True
                            sys.stderr.write(f"srun: Job step aborted: Waiting up to {self.abort_wait_s} seconds "
                                             "for job step to finish.\n")
                            sys.stderr.flush()
                elif "stepd" in msg:  # the step daemon's own words (Slurm's slurmstepd lines)
                    with self.lock:
                        sys.stderr.write(msg["stepd"])
                        sys.stderr.flush()
                else:
                    self.write(msg["task"], msg["fd"], msg["data"])
        except (CLIError, OSError, ValueError) as exc:
            self.errors.append(f"{placement['node']}: {exc}")


COMMAND = Command("srun", "[OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] executable(N) "
                  "[args(N)...]", o.job_options("srun"), stop_at_operand=True, operand_usage="executable [args...]")


def srun(argv: list[str]) -> int:
    """Run a parallel job step; its exit code (128 + signal when a task was killed)."""
    opts, command = COMMAND.parse(argv)
    in_allocation = bool(opts.get("jobid")) or os.environ.get("SLURM_JOB_ID", "").isdigit()
    variables = [(name, option) for name, option in o.INPUT_VARIABLES["srun"]
                 if not (in_allocation and name in o.ALLOCATION_VARIABLES)]
    opts = {**COMMAND.from_environment(variables), **opts}  # the command line wins
    if opts.get("mpi") == "list":
        from wattsched.plugins import mpi

        sys.stdout.write(mpi.listing())
        return 0
    if not command:
        raise CLIError("No command given to execute.")
    if opts.get("verbose"):
        sys.stderr.write(COMMAND.defined_options(opts))
    opts["command"] = command
    label, unbuffered, quiet = bool(opts.get("label")), bool(opts.get("unbuffered")), bool(opts.get("quiet"))
    client = Client.for_options(opts)
    opts["mpi"] = mpi_type(opts.get("mpi"), client.config.mpi_default)
    jobid = opts.get("jobid")
    inside = jobid or (int(os.environ["SLURM_JOB_ID"]) if os.environ.get("SLURM_JOB_ID", "").isdigit() else None)
    opts["kill_on_bad_exit"] = kill_on_bad_exit(opts, client.config.kill_on_bad_exit)
    opts["max_wait"] = max_wait(opts, client.config.wait_time_s)
    if opts.get("multi_prog"):
        multi_prog(opts, command, inside is not None)
    own_job = None
    if opts.get("no_allocate"):
        return run_step(client, 0, opts, command, label, unbuffered, False, no_allocation=True)
    if opts.get("test_only"):  # a new allocation's plan: none is made
        if inside is not None:
            raise CLIError("--test-only plans a new allocation; it does not apply to a step of job "
                           f"{inside}")
        return o.will_run(client, request_body(opts, command, False), "srun")
    if inside is None:
        own_job = allocate(client, opts, "immediate" in opts, quiet)
        job_id = own_job
    else:
        job_id = inside
    code = 1
    interrupted = False
    try:
        code = run_step(client, job_id, opts, command, label, unbuffered, own_job is not None)
    except KeyboardInterrupt:
        interrupted = True
        sys.stderr.write("srun: interrupted, terminating the job step\n")
        code = 128 + signal_mod.SIGINT
    finally:
        if own_job is not None:
            try:
                if interrupted:
                    client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(own_job)]})
                else:
                    client.request("POST", f"/v1/jobs/{own_job}/allocation/complete",
                                   {"exit_code": min(code, 255), "term_signal": 0})
            except CLIError as exc:
                sys.stderr.write(f"srun: error: releasing allocation {own_job}: {exc}\n")
    return code


# what srun says before "queued and waiting" when the power cap holds a job back (Hautreux 2013)
POWER_MESSAGES = {"PowerNotAvail": "Required power not available now",
                  "PowerReserved": "Required power at least partially reserved"}


def allocate(client: Client, opts: dict[str, Any], immediate: bool, quiet: bool, prog: str = "srun",
             command: list[str] | None = None) -> int:
    """Create an interactive allocation and wait until it runs; its job id. ``prog`` words the
    messages as that command does (srun: "job N queued and waiting for resources"; salloc also
    "Granted job allocation N"). --immediate: the controller refuses a job it cannot start at
    once; --immediate=N: the job waits N seconds at most, then is cancelled (Slurm's rule)."""
    command = command if command is not None else opts["command"]
    text = str(opts.get("immediate") or "") if immediate else ""
    wait_s = int(text) if text.isdigit() else 0
    body = request_body(opts, command, immediate and not wait_s)
    try:
        reply = client.request("POST", "/v1/jobs", body)
    except CLIError as exc:
        raise CLIError(f"Unable to allocate resources: {exc}".replace(
            "Unable to allocate resources: Unable to allocate resources", "Unable to allocate resources")) from exc
    job_id = reply["job_id"]
    announced = False
    deadline = time.monotonic() + wait_s
    # its state as the submission left it: a job placed at once is not asked about again
    job: dict[str, Any] | None = reply if reply.get("state") else None
    try:
        while True:
            if job is None:
                job = client.request("GET", "/v1/jobs", params={"job": [str(job_id)]})["jobs"][0]
            if job["state"] == "RUNNING":
                break
            if job["state"] not in ("PENDING", "CONFIGURING"):  # CONFIGURING: its nodes are powering up
                raise CLIError(f"Job allocation {job_id} has been revoked.")
            if wait_s and job["state"] == "PENDING" and time.monotonic() >= deadline:
                client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(job_id)]})
                raise CLIError("Unable to allocate resources: "
                               + POWER_MESSAGES.get(job["reason"], "Requested nodes are busy"))
            if not announced and not quiet:
                why = POWER_MESSAGES.get(job["reason"])
                if prog == "salloc":
                    sys.stderr.write(f"salloc: Pending job allocation {job_id}\n")
                if why:
                    sys.stderr.write(f"{prog}: {why}\n")
                sys.stderr.write(f"{prog}: job {job_id} queued and waiting for resources\n")
                announced = True
            time.sleep(0.2)
            job = None
    except KeyboardInterrupt:
        client.request("POST", "/v1/jobs/cancel", {"job_ids": [str(job_id)]})
        sys.stderr.write(f"{prog}: Job allocation {job_id} has been revoked\n")
        raise SystemExit(1) from None
    if announced and not quiet:
        sys.stderr.write(f"{prog}: job {job_id} has been allocated resources\n")
    if prog == "salloc" and not quiet:
        sys.stderr.write(f"salloc: Granted job allocation {job_id}\n")
    return job_id


def request_body(opts: dict[str, Any], command: list[str], immediate: bool) -> dict[str, Any]:
    """An interactive allocation's submission (srun, salloc), named after its command by default."""
    name = opts.get("job_name") or (os.path.basename(command[0]) if command else "interactive")
    return o.submission(opts, script=None, interactive=True, immediate=immediate, name=name,
                        command=" ".join(command))


def truncate_outputs(file_patterns: list[str], step: dict[str, Any], job_id: int, job_name: str,
                     work_dir: str) -> None:
    """--open-mode=truncate for the step's -o/-e files, done once here, as the user, before any task
    runs: each task would otherwise empty a file its neighbours had begun to fill (many tasks, and
    many nodes on a shared file system, write to one). The tasks then append. A file that cannot be
    opened is left to the task that opens it to report."""
    import pwd

    from wattsched import patterns

    user = pwd.getpwuid(os.getuid()).pw_name
    done: set[str] = set()
    for node_index, placement in enumerate(step["placements"]):
        for task in placement["task_ids"]:
            for pattern in filter(None, file_patterns):
                path = patterns.expand(pattern, job_id=job_id, job_name=job_name, user=user, node=placement["node"],
                                       array_job_id=step["array_job_id"], array_task_id=step["array_task_id"],
                                       step_id=str(step["step_id"]), task_id=task, node_id=node_index,
                                       work_dir=work_dir)
                if path in done:
                    continue
                done.add(path)
                with contextlib.suppress(OSError):  # (O_NONBLOCK: not waiting on a FIFO no one reads)
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY, 0o666))


def launch_address(host: str, port: int) -> str:
    """The address of this host that reaches the controller (SLURM_LAUNCH_NODE_IPADDR): a UDP socket
    connected to it says which, without sending anything."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def job_information(client: Client, job_id: int) -> None:
    """srun -v's line on the allocation: its nodes and their CPUs, runs of equal counts as Slurm
    groups them (``jobid 7: nodes(3):`n[01-03]', cpu counts: 4(x2),2(x1)``)."""
    job = client.request("GET", "/v1/jobs", params={"job": [str(job_id)], "detail": "true"})["jobs"][0]
    groups: list[list[int]] = []
    for cpus in job["alloc_cpus"].values():
        if groups and groups[-1][0] == cpus:
            groups[-1][1] += 1
        else:
            groups.append([cpus, 1])
    counts = ",".join(f"{cpus}(x{reps})" for cpus, reps in groups)
    sys.stderr.write(f"srun: jobid {job_id}: nodes({len(job['alloc_cpus'])}):`{job['node_list']}', "
                     f"cpu counts: {counts}\n")


def step_hosts(expression: str | None) -> list[str]:
    """srun -w/-x's hosts (a host list expression, or a file of them where it names a path)."""
    if not expression:
        return []
    from wattsched import hostlist

    if "/" in expression:
        expression = o.read_nodefile(expression)
    try:
        return hostlist.expand(expression)
    except ValueError as exc:
        raise CLIError(f"Invalid node name specified: {exc}") from exc


def mpi_type(requested: str | None, default: str) -> str:
    """The step's MPI type (--mpi, else SLURM_MPI_TYPE, else MpiDefault), checked before any
    allocation as Slurm's srun does. No plugin code is imported for ``none``, the common case."""
    if (requested or default or "none") in ("none", "openmpi"):
        return "none"
    from wattsched.plugins import mpi

    try:
        return mpi.resolve(requested, default)
    except mpi.MpiError as exc:
        raise CLIError(str(exc)) from exc


def no_allocation_step(client: Client, opts: dict[str, Any]) -> dict[str, Any]:
    """srun -Z: tasks on the nodes -w names, with no job (root's), checked as Slurm's srun checks it."""
    if not opts.get("nodelist"):
        raise CLIError("must specify a node list with -Z, --no-allocate.")
    if opts.get("exclude"):
        raise CLIError("can not specify --exclude list with -Z, --no-allocate.")
    if opts.get("relative") is not None:
        raise CLIError("do not specify -r,--relative with -Z,--no-allocate.")
    if not opts.get("quiet"):
        sys.stderr.write("srun: do not allocate resources\n")
    return client.request("POST", "/v1/steps/noalloc", {"nodelist": step_hosts(opts["nodelist"]),
                                                         "ntasks": opts.get("ntasks")})


def run_step(client: Client, job_id: int, opts: dict[str, Any], command: list[str], label: bool,
             unbuffered: bool, new_allocation: bool, no_allocation: bool = False) -> int:
    nodes_min, nodes_max = o.node_range(opts.get("nodes"))
    if nodes_max > nodes_min:  # a range: as many of the allocation's nodes as it may have, as Slurm's
        held = os.environ.get("SLURM_JOB_NUM_NODES", "")
        nodes_min = max(nodes_min, min(nodes_max, int(held) if held.isdigit() else nodes_min))
    req = {"name": opts.get("job_name") or os.path.basename(command[0]),
           "ntasks": opts.get("ntasks"), "nodes": nodes_min if opts.get("nodes") else None,
           "ntasks_per_node": opts.get("ntasks_per_node") or 0, "cpus_per_task": opts.get("cpus_per_task") or 1,
           "nodelist": step_hosts(opts.get("nodelist")), "exclude": step_hosts(opts.get("exclude"))}
    if new_allocation:  # the allocation was sized for this step: use all of it
        req.update(ntasks=None, nodes=None, ntasks_per_node=0, cpus_per_task=1, nodelist=[], exclude=[])
    req["arbitrary"] = o.arbitrary_hosts(opts) or []
    if opts.get("verbose") and not no_allocation:
        job_information(client, job_id)
    req["overlap"] = bool(opts.get("overlap"))
    debug_level = {"slurmd_debug": slurmd_debug(opts["slurmd_debug"])} if opts.get("slurmd_debug") else {}
    if no_allocation:
        step = no_allocation_step(client, opts)
        job_id = step["job_id"]
    else:
        step = create_step(client, job_id, req, "immediate" in opts, bool(opts.get("verbose")))
    job_name = str(os.environ.get("SLURM_JOB_NAME", req["name"]) if not new_allocation else req["name"])
    open_mode = opts.get("open_mode") or "truncate"
    (out_tasks, out_pattern), (err_tasks, err_pattern) = (output_targets(opts.get(key), step["ntasks"], option)
                                                          for key, option in (("output", "--output"),
                                                                              ("error", "--error")))
    if (out_pattern or err_pattern) and not open_mode.lower().startswith("a"):
        truncate_outputs([out_pattern, err_pattern], step, job_id, job_name,
                         os.path.abspath(opts.get("chdir") or os.getcwd()))
        open_mode = "append"  # (the tasks then all write at the end of what is there: nothing of another's lost)
    if opts.get("verbose"):
        for placement in step["placements"]:
            sys.stderr.write(f"srun: launching StepId={job_id}.{step['step_id']} on host {placement['node']}, "
                             f"{len(placement['task_ids'])} tasks: {task_ranges(placement['task_ids'])}\n")
    env = o.job_environment(opts.get("export"))
    if new_allocation:
        env.update(step["job_environment"])
    env["SLURM_MPI_TYPE"] = opts["mpi"]
    env["SLURM_LAUNCH_NODE_IPADDR"] = env["SLURM_SRUN_COMM_HOST"] = launch_address(client.host, client.port)
    control = StepControl(client, job_id, step["step_id"], step["credential"], step["placements"])
    streams = TaskStreams(label, step["ntasks"], control, opts["kill_on_bad_exit"], opts["max_wait"])
    streams.shown = {1: out_tasks, 2: err_tasks}
    streams.abort_wait_s = client.config.kill_wait_s + 2  # (Slurm's STEP_ABORT_TIME is 2 s)
    work_dir = os.path.abspath(opts.get("chdir") or os.getcwd())
    pty = "pty" in opts
    fed, pattern = stdin_targets(opts.get("input"), step["ntasks"], pty)
    rows, cols = terminal_size() if pty else (24, 80)
    cpu_bind = opts.get("cpu_bind") or ""
    if cpu_bind:  # (checked here, where the user can mend it; cpubind's dataclasses cost ~5 ms to import)
        from wattsched import cpubind

        try:
            cpubind.parse(cpu_bind)
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
    threads = []
    targets = []
    relay = PmiRelay(control, opts["mpi"]) if opts["mpi"] != "none" else None
    for placement in step["placements"]:
        body = {"job_id": job_id, "step_id": step["step_id"], "node": placement["node"],
                "credential": step["credential"], "argv": command, "environment": env, "work_dir": work_dir,
                "label": label and not pty, "unbuffered": unbuffered or pty, "output": out_pattern,
                "error": err_pattern, "open_mode": open_mode, "job_name": job_name,
                "array_job_id": step["array_job_id"], "array_task_id": step["array_task_id"],
                "input": pattern, "stdin_tasks": [t for t in placement["task_ids"] if t in fed],
                "pty": pty, "rows": rows, "cols": cols, "cpu_bind": cpu_bind, "mpi": opts["mpi"],
                "multi_prog": opts.get("multi_prog_text", ""), "preserve_env": bool(opts.get("preserve_env")),
                "rlimits": rlimits.current(), **debug_level,
                **{key: os.path.abspath(opts[key]) for key in ("task_prolog", "task_epilog") if opts.get(key)}}
        if body["stdin_tasks"] or (pty and 0 in placement["task_ids"]):
            targets.append(placement)
        thread = threading.Thread(target=streams.pump, args=(client, placement, body, relay), daemon=True)
        thread.start()
        threads.append(thread)
    if targets:
        forwarder = StdinForwarder(client, job_id, step["step_id"], step["credential"], targets, threads)
        threading.Thread(target=forwarder.run, name="stdin", daemon=True).start()
    interrupts = Interrupts(streams, bool(opts.get("quit_on_interrupt")), bool(opts.get("disable_status")))
    previous = signal_mod.signal(signal_mod.SIGINT, interrupts)
    try:
        with RawTerminal(pty):
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
    finally:
        signal_mod.signal(signal_mod.SIGINT, previous)
    for message in streams.errors:
        sys.stderr.write(f"srun: error: {message}\n")
    code, sig = 0, 0
    task_nodes = {t: p["node"] for p in step["placements"] for t in p["task_ids"]}
    # Slurm's srun is quiet on the signals it sent (but under -v)
    cancelled = (relay is not None and relay.aborted) or (interrupts.forced and not opts.get("verbose"))
    ended: dict[tuple[str, int, int], list[int]] = {}  # a node's tasks that ended alike: one line, as Slurm's
    for task, (exit_code, term_signal) in sorted(streams.exits.items()):
        if task not in streams.told and (exit_code or (term_signal and not cancelled)):
            ended.setdefault((task_nodes.get(task, "?"), exit_code, term_signal), []).append(task)
        code, sig = max(code, exit_code), max(sig, term_signal)
    for (node, exit_code, term_signal), tasks in ended.items():
        sys.stderr.write(task_end(node, tasks, exit_code, term_signal))
    if streams.errors or len(streams.exits) < step["ntasks"]:
        code = max(code, 1)
    done = {"exit_code": min(code, 255), "term_signal": sig}  # the tasks' usage comes from the agents
    if not no_allocation:  # (a step of no job: the controller keeps nothing of it)
        client.request("POST", f"/v1/jobs/{job_id}/steps/{step['step_id']}/complete", done)
    return code if not sig else 128 + sig


def task_end(node: str, tasks: list[int], exit_code: int, term_signal: int) -> str:
    """srun's line for a node's tasks that failed alike: their exit code, or their signal as
    strsignal(3) words it (``task 3``, ``tasks 0,2-9``)."""
    which = f"task{'s' if len(tasks) > 1 else ''} {task_ranges(tasks)}"
    if term_signal:
        return f"srun: error: {node}: {which}: {signal_mod.strsignal(term_signal) or f'Signal {term_signal}'}\n"
    return f"srun: error: {node}: {which}: Exited with exit code {exit_code}\n"


def slurmd_debug(level: str) -> int:
    """srun --slurmd-debug: the step daemon's log level (a name or Slurm's number) for its lines on
    the tasks' standard error; root's alone (Slurm's: root and SlurmUser), but error, the default.
    (Asked for only with the option: the configuration module costs a command ~50 ms to import.)"""
    from wattsched.config import LOG_LEVELS

    text = level.strip().lower()
    index = int(text) if text.isdigit() else LOG_LEVELS.index(text) if text in LOG_LEVELS else -1
    if not 0 <= index < len(LOG_LEVELS):
        raise CLIError(f"Invalid --slurmd-debug level: {level} ({', '.join(LOG_LEVELS)})")
    if os.getuid() != 0 and LOG_LEVELS[index] != "error":
        raise CLIError("Use of --slurmd-debug is allowed only for root and SlurmUser(root)")
    return index


def kill_on_bad_exit(opts: dict[str, Any], default: bool) -> bool:
    """srun -K[0|1] (or SLURM_KILL_BAD_EXIT), else KillOnBadExit: end the step at a task's failure."""
    value = opts.get("kill_on_bad_exit")
    return default if value is None else bool(value)


def max_wait(opts: dict[str, Any], default: int) -> int:
    """srun -W seconds (or SLURM_WAIT), else WaitTime: how long the other tasks have once the first
    has ended; 0, no limit."""
    value = opts.get("wait")
    return max(0, default if value is None else int(value))


def task_ranges(tasks: list[int]) -> str:
    """Task ids as Slurm's bit_fmt writes them: ``0-2,5``."""
    runs: list[list[int]] = []
    for task in sorted(tasks):
        if runs and runs[-1][1] == task - 1:
            runs[-1][1] = task
        else:
            runs.append([task, task])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def multi_prog(opts: dict[str, Any], command: list[str], inside: bool) -> None:
    """srun --multi-prog: read and check the MPMD file the command names (srun runs as the user, who
    names it), fixing the step's task count; its text goes to each node with the launch."""
    from wattsched import multiprog

    path = command[0]
    try:
        with open(path, "rb") as handle:
            data = handle.read(multiprog.MAX_BYTES + 1)
    except OSError as exc:
        raise CLIError(f"Could not open multi_prog config file {path}") from exc
    if len(data) > multiprog.MAX_BYTES:
        raise CLIError(f"Multi_prog config file {path} is too large")
    text = data.decode(errors="replace")
    ntasks = opts.get("ntasks")
    if ntasks is None and inside and os.environ.get("SLURM_NTASKS", "").isdigit():
        ntasks = int(os.environ["SLURM_NTASKS"])  # as Slurm's srun takes its -n inside an allocation
    try:
        opts["ntasks"] = multiprog.validate(text, ntasks, path)
    except multiprog.MultiProgError as exc:
        raise CLIError(str(exc).replace("\n", "\nsrun: error: ")) from exc
    opts["multi_prog_text"] = text


def create_step(client: Client, job_id: int, req: dict[str, Any], immediate: bool, verbose: bool) -> dict[str, Any]:
    """The step, once the CPUs it needs are free of the job's other steps: while they are busy,
    srun waits and asks again, as Slurm's does (srun -I fails at once)."""
    tries = 0
    while True:
        try:
            step = client.request("POST", f"/v1/jobs/{job_id}/steps", req)
        except CLIError as exc:
            if exc.status != 409 or "busy" not in str(exc) or immediate:
                if exc.status == 409 and immediate:
                    raise CLIError(f"Unable to create step for job {job_id}: {exc}") from exc
                raise
            if tries == 0 and verbose:
                sys.stderr.write(f"srun: Job {job_id} step creation temporarily disabled, retrying ({exc})\n")
            time.sleep(min(1.0, 0.1 * 2 ** min(tries, 4)))  # a step's end frees its CPUs: ask again soon
            tries += 1
            continue
        if tries:
            sys.stderr.write(f"srun: Step created for StepId={job_id}.{step['step_id']}\n")
        return step


def output_targets(mode: str | None, ntasks: int, option: str) -> tuple[set[int] | None, str]:
    """srun -o/--output (and -e/--error): the tasks whose stream srun prints (None: all, Slurm's
    default ``all``; a task id: that task's alone, the others' discarded) and the file pattern the
    tasks write to instead (``none``: /dev/null)."""
    text = (mode or "all").strip()
    if text.lower() == "all":
        return None, ""
    if text.lower() == "none":
        return None, "/dev/null"
    if text.isdigit():
        if int(text) >= ntasks:
            raise CLIError(f"{option}: task {text} is not part of this step of {ntasks} task(s)")
        return {int(text)}, ""
    return None, text


def stdin_targets(mode: str | None, ntasks: int, pty: bool) -> tuple[set[int], str]:
    """srun -i/--input: the tasks fed srun's stdin (``all``, Slurm's default: each task gets all of
    it; ``none``; a task id) or a file pattern the tasks open themselves; with --pty, task 0 (on its
    terminal)."""
    if pty:
        return {0}, ""
    text = (mode or "all").strip()
    if text.lower() == "all":
        return set(range(ntasks)), ""
    if text.lower() == "none":
        return set(), ""
    if text.isdigit():
        if int(text) >= ntasks:
            raise CLIError(f"--input: task {text} is not part of this step of {ntasks} task(s)")
        return {int(text)}, ""
    return set(), text


def terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(0)
    except OSError:
        return 24, 80
    return max(1, size.lines), max(1, size.columns)


class RawTerminal:
    """srun --pty on a terminal: ours passes every key through untouched (the task's terminal does
    the editing and echoing) until the step ends. (A class rather than contextlib's decorator, whose
    import costs every srun ~3 ms.)"""

    def __init__(self, pty: bool) -> None:
        self.active = pty and os.isatty(0)
        self.saved: list[Any] = []

    def __enter__(self) -> None:
        if self.active:
            import termios
            import tty

            self.saved = termios.tcgetattr(0)
            tty.setraw(0, termios.TCSANOW)  # not TCSAFLUSH: keys typed ahead belong to the task

    def __exit__(self, *_exc: object) -> None:
        if self.active:
            import termios

            termios.tcsetattr(0, termios.TCSADRAIN, self.saved)


class StdinForwarder:
    """Reads srun's stdin and posts it, base64, to the agents of the tasks that read it, until EOF
    (which they get too) or the step ends."""

    def __init__(self, client: Client, job_id: int, step_id: int, credential: str,
                 placements: list[dict[str, Any]], pumps: list[threading.Thread]):
        self.client, self.job_id, self.step_id, self.credential = client, job_id, step_id, credential
        self.placements, self.pumps = placements, pumps

    def run(self) -> None:
        import binascii  # (base64's module imports re)

        while True:
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            text = binascii.b2a_base64(data, newline=False).decode()
            for placement in self.placements:
                self._post(placement, {"job_id": self.job_id, "step_id": self.step_id, "node": placement["node"],
                                       "credential": self.credential, "data": text, "eof": not data})
            if not data:
                return

    def _post(self, placement: dict[str, Any], body: dict[str, Any]) -> None:
        """Deliver one piece; until the agent has started the tasks it answers "not yet"."""
        host, port = host_port(placement["agent_url"])
        request = http_request("POST", host, port, "/v1/steps/stdin", self.client.token(), body)
        while any(p.is_alive() for p in self.pumps):
            try:
                status, answer = exchange(host, port, request, 60)
                accepted = status == 200 and jsonwire.loads(answer or b"{}").get("accepted")
            except (OSError, ValueError):
                accepted = False
            if accepted:
                return
            time.sleep(0.05)


def main() -> None:
    # Ctrl-C ends the step and gives the allocation back even where a shell started us with SIGINT
    # ignored (a background job of a script): Slurm's srun sets its own handler too
    signal_mod.signal(signal_mod.SIGINT, signal_mod.default_int_handler)
    run("srun", lambda: srun(sys.argv[1:]))

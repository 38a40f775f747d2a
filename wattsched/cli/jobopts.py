"""Options that sbatch and srun share, declared once, and how they become a submission."""

from __future__ import annotations

import os
import sys

from wattsched import rlimits
from wattsched.cli.common import CLIError
from wattsched.cli.options import NO, OPT, REQ, STANDARD, Opt, ignored, refused

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from typing import Any

_GPU_BINDING = "GPU binding by socket is not supported; use --gpus-per-node or --gpus-per-task"


def job_options(prog: str) -> list[Opt | str]:
    """The options sbatch, srun and salloc share (Slurm's slurm_opt.c), with each command's own."""
    batch, step, alloc = prog == "sbatch", prog == "srun", prog == "salloc"
    table: list[Opt | str] = [
        "Parallel run options:",
        Opt("A", "account", REQ, "charge job to specified account", metavar="name"),
        Opt("q", "qos", REQ, "quality of service", metavar="qos"),
        Opt(None, "acctg-freq", REQ, "frequency of energy/task sampling: energy=N,task=N (s)",
            metavar="<datatype>=<interval>"),
        *([Opt("a", "array", REQ, "job array index values", metavar="indexes")] if batch else []),
        Opt("b", "begin", REQ, "defer job until HH:MM MM/DD/YY", metavar="time"),
        Opt(None, "comment", REQ, "arbitrary comment", metavar="name"),
        Opt(None, "cpu-freq", REQ, "requested cpu frequency (and governor)", metavar="min[-max[:gov]]"),
        Opt("c", "cpus-per-task", REQ, "number of cpus required per task", metavar="ncpus", kind="int"),
        Opt("d", "dependency", REQ, "defer job until condition on jobid is satisfied", metavar="type:jobid[:time]"),
        Opt(None, "deadline", REQ, "remove the job if no ending possible before this deadline "
            "(start > (deadline - time[-min]))", metavar="time"),
        Opt("D", "chdir", REQ, "change working directory", metavar="path"),
        Opt(None, "energy-policy", REQ, "energy policy: monitoring, min_energy or min_time (wattsched)",
            metavar="policy"),
        Opt("e", "error", REQ, "file for batch script's standard error" if batch else "location of stderr "
            "redirection", metavar="err"),
        Opt(None, "export", REQ, "specify environment variables to export", metavar="names"),
        Opt("H", "hold", NO, "submit job in held state"),
        Opt("i", "input", REQ, "file for batch script's standard input" if batch else "location of stdin "
            "redirection: a task id, all, none, or a file pattern (default: task 0)", metavar="in"),
        Opt("J", "job-name", REQ, "name of job", metavar="jobname"),
        Opt("M", "clusters", REQ, "comma separated list of clusters to issue commands to (this one, or all)",
            metavar="names"),
        Opt(None, "nice", OPT, "decrease scheduling priority by value", metavar="value", const="100"),
        Opt("N", "nodes", REQ, "number of nodes on which to run (N = min[-max])", metavar="N"),
        Opt("n", "ntasks", REQ, "number of tasks to run", metavar="ntasks", kind="int"),
        Opt("o", "output", REQ, "file for batch script's standard output" if batch else "location of stdout "
            "redirection", metavar="out"),
        Opt(None, "open-mode", REQ, "append or truncate output files", metavar="{append|truncate}"),
        Opt("p", "partition", REQ, "partition requested", metavar="partition"),
        Opt(None, "power-fit", NO, "under a power cap, may run at a lower CPU frequency to start sooner "
            "(wattsched)"),
        Opt(None, "profile", REQ, "enable acct_gather_profile for detailed data", metavar="value"),
        Opt("Q", "quiet", NO, "quiet mode (suppress informational messages)"),
        Opt(None, "reservation", REQ, "allocate resources from named reservation", metavar="name"),
        Opt(None, "signal", REQ, "send signal when time limit within time seconds", metavar="[R:]num[@time]"),
        Opt("t", "time", REQ, "time limit", metavar="minutes"),
        Opt("v", "verbose", NO, "verbose mode (multiple -v's increase verbosity)", kind="count"),
        Opt(None, "wckey", REQ, "wckey to run job under", metavar="wckey"),
        *([Opt(None, "parsable", NO, "outputs only the jobid and cluster name (if present), separated by "
               "semicolon, only on successful submission."),
           Opt(None, "requeue", NO, "if set, permit the job to be requeued", dest="requeue"),
           Opt(None, "no-requeue", NO, "if set, do not permit the job to be requeued", dest="requeue",
               const=False),
           Opt(None, "test-only", NO, "validate the batch script and return an estimate of when the job "
               "would be scheduled to run; nothing is submitted"),
           Opt("W", "wait", NO, "wait for completion of submitted job"),
           Opt(None, "wrap", REQ, "wrap command string in a sh script and submit", metavar="command string"),
           ] if batch else []),
        *([Opt("l", "label", NO, "prepend task number to lines of stdout/err"),
           Opt("u", "unbuffered", NO, "do not line-buffer stdout/err"),
           Opt("I", "immediate", OPT, "exit if resources are not immediately available", metavar="secs",
               const="0"),
           Opt(None, "jobid", REQ, "run under already allocated job", metavar="id", kind="int"),
           Opt(None, "cpu-bind", REQ, "Bind tasks to CPUs", metavar="type"),
           Opt(None, "pty", OPT, "run task zero in pseudo terminal", metavar="fd"),
           ] if step else []),
        *([Opt("I", "immediate", OPT, "exit if resources are not immediately available", metavar="secs",
               const="0")] if alloc else []),
        "Constraint options:",
        Opt("C", "constraint", REQ, "specify a list of constraints", metavar="list"),
        Opt("F", "nodefile", REQ, "request a specific list of hosts, read from a file", metavar="filename"),
        Opt(None, "mem", REQ, "minimum amount of real memory", metavar="MB"),
        Opt("w", "nodelist", REQ, "request a specific list of hosts", metavar="hosts..."),
        Opt("x", "exclude", REQ, "exclude a specific list of hosts", metavar="hosts..."),
        "Consumable resources related options:",
        Opt(None, "exclusive", OPT, "allocate nodes in exclusive mode", metavar="user|mcs|topo"),
        Opt(None, "mem-per-cpu", REQ, "maximum amount of real memory per allocated cpu required by the job",
            metavar="MB"),
        Opt(None, "gres", REQ, "required generic resources", metavar="list"),
        "GPU scheduling options:",
        Opt("G", "gpus", REQ, "count of GPUs required for the job", metavar="n"),
        Opt(None, "gpus-per-node", REQ, "number of GPUs required per allocated node", metavar="n"),
        Opt(None, "gpus-per-task", REQ, "number of GPUs required per spawned task", metavar="n"),
        Opt(None, "ntasks-per-node", REQ, "number of tasks to invoke on each node", metavar="n", kind="int"),
        ignored(None, "bb", REQ), ignored(None, "bbf", REQ),
        ignored("B", "extra-node-info", REQ), ignored(None, "cluster-constraint", REQ),
        ignored(None, "contiguous", NO), ignored("S", "core-spec", REQ), ignored(None, "cores-per-socket", REQ),
        ignored(None, "delay-boot", REQ), ignored(None, "extra", REQ),
        ignored(None, "get-user-env", OPT), ignored(None, "gpu-freq", REQ),
        Opt(None, "gpu-bind", REQ, "task to gpu binding options", metavar="..."),
        ignored(None, "gres-flags", REQ), ignored(None, "hint", REQ),
        Opt("k", "no-kill", OPT, "do not kill job on node failure", metavar="on|off"),
        Opt(None, "mail-type", REQ, "notify on state change: BEGIN, END, FAIL or ALL", metavar="type"),
        Opt(None, "mail-user", REQ, "who to send email notification for job state changes", metavar="user"),
        ignored(None, "mcs-label", REQ),
        ignored(None, "mem-bind", REQ), ignored(None, "network", REQ), ignored(None, "ntasks-per-core", REQ),
        ignored(None, "ntasks-per-socket", REQ), ignored("s", "oversubscribe", NO),
        Opt("O", "overcommit", NO, "overcommit resources: CPUs as for one task per node"),
        ignored(None, "oom-kill-step", OPT), ignored(None, "prefer", REQ), ignored(None, "priority", REQ),
        ignored(None, "power", REQ), ignored(None, "reboot", NO), ignored(None, "segment", REQ),
        ignored(None, "sockets-per-node", REQ), ignored(None, "spread-job", NO), ignored(None, "stepmgr", NO),
        ignored(None, "switches", REQ), ignored(None, "thread-spec", REQ), ignored(None, "threads-per-core", REQ),
        ignored(None, "time-min", REQ),
        Opt(None, "tmp", REQ, "minimum amount of temporary disk", metavar="MB"),
        Opt(None, "tres-bind", REQ, "task to tres binding options", metavar="..."),
        Opt("m", "distribution", REQ, "distribution method for processes to nodes (arbitrary: as SLURM_HOSTFILE "
            "lists them; the others lay tasks out by block)", metavar="type"),
        *([Opt(None, "test-only", NO, "validate the request and report when the job would start; nothing "
               "is run")] if not batch else []),
        ignored(None, "use-min-nodes", NO), ignored(None, "wait-all-nodes", REQ),
        ignored(None, "propagate", OPT) if not alloc else ignored(None, "bell", NO),
        *([ignored(None, "ignore-pbs", NO), ignored(None, "kill-on-invalid-dep", REQ)] if batch else []),
        *([Opt("X", "disable-status", NO, "Disable Ctrl-C status feature: each Ctrl-C goes to the tasks"),
           Opt("E", "preserve-env", NO, "env vars for node and task counts override command-line flags"),
           Opt("K", "kill-on-bad-exit", OPT, "kill the job if any task terminates with a non-zero exit code",
               kind="int", const=1, metavar="0|1"),
           ignored("T", "threads", REQ),
           Opt("W", "wait", REQ, "seconds to wait after first task exits before killing job", metavar="sec",
               kind="int"),
           Opt(None, "mpi", REQ, "type of MPI being used", metavar="type"),
           Opt(None, "multi-prog", NO, "if set the program name specified is the configuration specification "
               "for multiple programs"),
           Opt(None, "overlap", NO, "share the CPUs other steps of the job hold (steps hold only their tasks' CPUs)"),
           ignored(None, "exact", NO), ignored("r", "relative", REQ),
           ignored(None, "send-libs", OPT), Opt(None, "slurmd-debug", REQ, "slurmd debug level", metavar="level"),
           ignored(None, "compress", OPT),
           ignored(None, "accel-bind", REQ), Opt(None, "quit-on-interrupt", NO, "quit on single Ctrl-C"),
           ignored(None, "whole", NO),
           ignored(None, "external-launcher", NO), ignored(None, "resv-ports", OPT)] if step else []),
        *([ignored(None, "no-bell", NO), ignored("K", "kill-command", OPT),
           Opt(None, "no-shell", NO, "immediately exit after allocating resources, without running a command")]
          if alloc else []),
        refused(None, "gpus-per-socket", REQ, _GPU_BINDING),
        refused(None, "cpus-per-gpu", REQ, "--cpus-per-gpu is not supported; use -c with --gpus-per-task"),
        refused(None, "mem-per-gpu", REQ, "--mem-per-gpu is not supported; use --mem"),
        refused(None, "ntasks-per-gpu", REQ, "--ntasks-per-gpu is not supported; use --gpus-per-task"),
        refused(None, "tres-per-task", REQ, "per-task TRES requests are not supported"),
        Opt("L", "licenses", REQ, "required license, comma separated", metavar="names"),
        Opt(None, "mincpus", REQ, "minimum number of logical processors per node", metavar="n", kind="int"),
        refused(None, "container", REQ, "containers (oci.conf) are not supported"),
        refused(None, "container-id", REQ, "containers (oci.conf) are not supported"),
        refused(None, "uid", REQ, "jobs run as the submitting user only"),
        refused(None, "gid", REQ, "jobs run with the submitting user's group only"),
        *([refused(None, "batch", REQ, "batch host features are not supported"),
           refused(None, "export-file", REQ, "--export-file is not supported; use --export")] if batch else []),
        *([Opt("Z", "no-allocate", NO, "don't allocate resources (root's: run on the nodes -w names)"),
           refused(None, "prolog", REQ, "srun --prolog is not supported"),
           refused(None, "epilog", REQ, "srun --epilog is not supported"),
           Opt(None, "task-prolog", REQ, "run \"program\" before launching task", metavar="program"),
           Opt(None, "task-epilog", REQ, "run \"program\" after launching task", metavar="program"),
           refused(None, "bcast", OPT, "sbcast/--bcast is not supported"),
           refused(None, "het-group", REQ, "heterogeneous jobs are not supported"),
           refused(None, "x11", OPT, "X11 forwarding is not supported")] if step else []),
        *([refused(None, "x11", OPT, "X11 forwarding is not supported")] if alloc else []),
        "Help options:",
        *STANDARD,
    ]
    return table


# Slurm's input environment variables (sbatch(1), salloc(1), srun(1): INPUT ENVIRONMENT VARIABLES), each
# with the option it stands for, in Slurm's order (a later one of the same option wins). sbatch reads
# them over the script's #SBATCH lines and under its command line; salloc and srun under theirs.
INPUT_VARIABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "sbatch": (
        ("SBATCH_ACCOUNT", "-A"), ("SBATCH_ARRAY_INX", "-a"), ("SBATCH_ACCTG_FREQ", "--acctg-freq"),
        ("SBATCH_BATCH", "--batch"), ("SBATCH_BURST_BUFFER", "--bb"),
        ("SBATCH_CLUSTER_CONSTRAINT", "--cluster-constraint"), ("SBATCH_CLUSTERS", "-M"), ("SLURM_CLUSTERS", "-M"),
        ("SBATCH_CONTAINER", "--container"), ("SBATCH_CONTAINER_ID", "--container-id"), ("SBATCH_CONSTRAINT", "-C"),
        ("SBATCH_CORE_SPEC", "-S"), ("SBATCH_CPU_FREQ_REQ", "--cpu-freq"), ("SBATCH_CPUS_PER_GPU", "--cpus-per-gpu"),
        ("SBATCH_DELAY_BOOT", "--delay-boot"), ("SBATCH_DISTRIBUTION", "-m"), ("SBATCH_EXCLUSIVE", "--exclusive"),
        ("SBATCH_EXPORT", "--export"), ("SBATCH_GET_USER_ENV", "--get-user-env"), ("SBATCH_GRES", "--gres"),
        ("SBATCH_GRES_FLAGS", "--gres-flags"), ("SBATCH_GPUS", "-G"), ("SBATCH_GPU_BIND", "--gpu-bind"),
        ("SBATCH_GPU_FREQ", "--gpu-freq"), ("SBATCH_GPUS_PER_NODE", "--gpus-per-node"),
        ("SBATCH_GPUS_PER_SOCKET", "--gpus-per-socket"), ("SBATCH_GPUS_PER_TASK", "--gpus-per-task"),
        ("SLURM_HINT", "--hint"), ("SBATCH_HINT", "--hint"), ("SBATCH_JOB_NAME", "-J"),
        ("SBATCH_MEM_BIND", "--mem-bind"), ("SBATCH_MEM_PER_CPU", "--mem-per-cpu"),
        ("SBATCH_MEM_PER_GPU", "--mem-per-gpu"), ("SBATCH_MEM_PER_NODE", "--mem"), ("SBATCH_NETWORK", "--network"),
        ("SBATCH_NO_KILL", "-k"), ("SBATCH_NO_REQUEUE", "--no-requeue"), ("SBATCH_OPEN_MODE", "--open-mode"),
        ("SBATCH_OVERCOMMIT", "-O"), ("SBATCH_PARTITION", "-p"), ("SBATCH_PROFILE", "--profile"), ("SBATCH_QOS", "-q"),
        ("SBATCH_REQ_SWITCH", "--switches"), ("SBATCH_REQUEUE", "--requeue"), ("SBATCH_RESERVATION", "--reservation"),
        ("SBATCH_SIGNAL", "--signal"), ("SBATCH_SPREAD_JOB", "--spread-job"), ("SBATCH_THREAD_SPEC", "--thread-spec"),
        ("SBATCH_THREADS_PER_CORE", "--threads-per-core"), ("SBATCH_TIMELIMIT", "-t"),
        ("SBATCH_TRES_BIND", "--tres-bind"), ("SBATCH_TRES_PER_TASK", "--tres-per-task"),
        ("SBATCH_USE_MIN_NODES", "--use-min-nodes"), ("SBATCH_WAIT", "-W"),
        ("SBATCH_WAIT_ALL_NODES", "--wait-all-nodes"), ("SBATCH_WAIT4SWITCH", "--switches"),
        ("SBATCH_WCKEY", "--wckey"), ("SBATCH_ERROR", "-e"), ("SBATCH_INPUT", "-i"), ("SBATCH_OUTPUT", "-o"),
    ),
    "salloc": (
        ("SALLOC_ACCOUNT", "-A"), ("SALLOC_ACCTG_FREQ", "--acctg-freq"), ("SALLOC_BELL", "--bell"),
        ("SALLOC_BURST_BUFFER", "--bb"), ("SALLOC_CLUSTER_CONSTRAINT", "--cluster-constraint"),
        ("SALLOC_CLUSTERS", "-M"), ("SLURM_CLUSTERS", "-M"), ("SALLOC_CONTAINER", "--container"),
        ("SALLOC_CONTAINER_ID", "--container-id"), ("SALLOC_CONSTRAINT", "-C"), ("SALLOC_CORE_SPEC", "-S"),
        ("SALLOC_CPU_FREQ_REQ", "--cpu-freq"), ("SALLOC_CPUS_PER_GPU", "--cpus-per-gpu"), ("SALLOC_DEBUG", "-v"),
        ("SALLOC_DELAY_BOOT", "--delay-boot"), ("SALLOC_EXCLUSIVE", "--exclusive"), ("SALLOC_GPUS", "-G"),
        ("SALLOC_GPU_BIND", "--gpu-bind"), ("SALLOC_GPU_FREQ", "--gpu-freq"),
        ("SALLOC_GPUS_PER_NODE", "--gpus-per-node"), ("SALLOC_GPUS_PER_SOCKET", "--gpus-per-socket"),
        ("SALLOC_GPUS_PER_TASK", "--gpus-per-task"), ("SALLOC_GRES", "--gres"), ("SALLOC_GRES_FLAGS", "--gres-flags"),
        ("SALLOC_IMMEDIATE", "-I"), ("SALLOC_HINT", "--hint"), ("SLURM_HINT", "--hint"), ("SALLOC_KILL_CMD", "-K"),
        ("SALLOC_MEM_BIND", "--mem-bind"), ("SALLOC_MEM_PER_CPU", "--mem-per-cpu"),
        ("SALLOC_MEM_PER_GPU", "--mem-per-gpu"), ("SALLOC_MEM_PER_NODE", "--mem"), ("SALLOC_NETWORK", "--network"),
        ("SALLOC_NO_BELL", "--no-bell"), ("SALLOC_NO_KILL", "-k"), ("SALLOC_OVERCOMMIT", "-O"),
        ("SALLOC_PARTITION", "-p"), ("SALLOC_PROFILE", "--profile"), ("SALLOC_QOS", "-q"),
        ("SALLOC_REQ_SWITCH", "--switches"), ("SALLOC_RESERVATION", "--reservation"), ("SALLOC_SIGNAL", "--signal"),
        ("SALLOC_SPREAD_JOB", "--spread-job"), ("SALLOC_THREAD_SPEC", "--thread-spec"),
        ("SALLOC_THREADS_PER_CORE", "--threads-per-core"), ("SALLOC_TIMELIMIT", "-t"),
        ("SALLOC_TRES_BIND", "--tres-bind"), ("SALLOC_TRES_PER_TASK", "--tres-per-task"),
        ("SALLOC_USE_MIN_NODES", "--use-min-nodes"), ("SALLOC_WAIT_ALL_NODES", "--wait-all-nodes"),
        ("SALLOC_WAIT4SWITCH", "--switches"), ("SALLOC_WCKEY", "--wckey"),
    ),
    "srun": (
        ("SLURM_ACCOUNT", "-A"), ("SLURM_ACCTG_FREQ", "--acctg-freq"), ("SLURM_BCAST", "--bcast"),
        ("SLURM_BURST_BUFFER", "--bb"), ("SLURM_CLUSTERS", "-M"), ("SLURM_CLUSTER_CONSTRAINT", "--cluster-constraint"),
        ("SLURM_COMPRESS", "--compress"), ("SLURM_CONSTRAINT", "-C"), ("SLURM_CORE_SPEC", "-S"),
        ("SLURM_CPUS_PER_TASK", "-c"), ("SLURM_CPU_BIND", "--cpu-bind"), ("SLURM_CPU_FREQ_REQ", "--cpu-freq"),
        ("SLURM_CPUS_PER_GPU", "--cpus-per-gpu"), ("SLURM_DELAY_BOOT", "--delay-boot"), ("SLURM_DEPENDENCY", "-d"),
        ("SLURM_DISABLE_STATUS", "-X"), ("SLURM_DISTRIBUTION", "-m"), ("SLURM_EPILOG", "--epilog"),
        ("SLURM_EXACT", "--exact"), ("SLURM_EXCLUSIVE", "--exclusive"), ("SLURM_EXPORT_ENV", "--export"),
        ("SRUN_EXPORT_ENV", "--export"), ("SLURM_EXTERNAL_LAUNCHER", "--external-launcher"), ("SLURM_GPUS", "-G"),
        ("SLURM_GPU_BIND", "--gpu-bind"), ("SLURM_GPU_FREQ", "--gpu-freq"), ("SLURM_GPUS_PER_NODE", "--gpus-per-node"),
        ("SLURM_GPUS_PER_SOCKET", "--gpus-per-socket"), ("SLURM_GPUS_PER_TASK", "--gpus-per-task"),
        ("SLURM_GRES", "--gres"), ("SLURM_GRES_FLAGS", "--gres-flags"), ("SLURM_HINT", "--hint"),
        ("SLURM_JOB_NAME", "-J"), ("SLURM_JOB_NUM_NODES", "-N"), ("SLURM_KILL_BAD_EXIT", "-K"),
        ("SLURM_LABELIO", "-l"), ("SLURM_MEM_BIND", "--mem-bind"), ("SLURM_MEM_PER_CPU", "--mem-per-cpu"),
        ("SLURM_MEM_PER_GPU", "--mem-per-gpu"), ("SLURM_MEM_PER_NODE", "--mem"), ("SLURM_MPI_TYPE", "--mpi"),
        ("SLURM_NCORES_PER_SOCKET", "--cores-per-socket"), ("SLURM_NETWORK", "--network"), ("SLURM_NO_KILL", "-k"),
        ("SLURM_NPROCS", "-n"), ("SLURM_NTASKS", "-n"), ("SLURM_NSOCKETS_PER_NODE", "--sockets-per-node"),
        ("SLURM_NTASKS_PER_CORE", "--ntasks-per-core"), ("SLURM_NTASKS_PER_NODE", "--ntasks-per-node"),
        ("SLURM_NTASKS_PER_GPU", "--ntasks-per-gpu"), ("SLURM_OPEN_MODE", "--open-mode"), ("SLURM_OVERCOMMIT", "-O"),
        ("SLURM_OVERLAP", "--overlap"), ("SLURM_PARTITION", "-p"), ("SLURM_POWER", "--power"),
        ("SLURM_PROFILE", "--profile"), ("SLURM_PROLOG", "--prolog"), ("SLURM_QOS", "-q"), ("SLURM_REMOTE_CWD", "-D"),
        ("SLURM_REQ_SWITCH", "--switches"), ("SLURM_RESERVATION", "--reservation"),
        ("SLURM_RESV_PORTS", "--resv-ports"), ("SLURM_SEND_LIBS", "--send-libs"), ("SLURM_SIGNAL", "--signal"),
        ("SLURM_SPREAD_JOB", "--spread-job"), ("SLURM_SRUN_MULTI", "--multi-prog"), ("SLURM_STDERRMODE", "-e"),
        ("SLURM_STDINMODE", "-i"), ("SLURM_STDOUTMODE", "-o"), ("SLURM_TASK_EPILOG", "--task-epilog"),
        ("SLURM_TASK_PROLOG", "--task-prolog"), ("SLURM_THREAD_SPEC", "--thread-spec"), ("SLURM_THREADS", "-T"),
        ("SLURM_THREADS_PER_CORE", "--threads-per-core"), ("SLURM_TIMELIMIT", "-t"), ("SLURM_TRES_BIND", "--tres-bind"),
        ("SLURM_TRES_PER_TASK", "--tres-per-task"), ("SLURM_UNBUFFEREDIO", "-u"),
        ("SLURM_USE_MIN_NODES", "--use-min-nodes"), ("SLURM_WAIT", "-W"), ("SLURM_WAIT4SWITCH", "--switches"),
        ("SLURM_WCKEY", "--wckey"), ("SLURM_WORKING_DIR", "-D"), ("SLURMD_DEBUG", "--slurmd-debug"),
        ("SRUN_CONTAINER", "--container"), ("SRUN_CONTAINER_ID", "--container-id"), ("SRUN_ERROR", "-e"),
        ("SRUN_INPUT", "-i"), ("SRUN_OUTPUT", "-o"),
    ),
}
# What a job's own environment sets among srun's variables: inside an allocation, the step takes the
# job's shape from the job itself (wattsched.controller.steps), so srun reads these only outside one.
# (Slurm's srun reads them inside too, and then reconciles them with its options case by case.)
ALLOCATION_VARIABLES = frozenset({
    "SLURM_CPUS_PER_TASK", "SLURM_CPU_FREQ_REQ", "SLURM_EXPORT_ENV", "SLURM_GPUS", "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE",
    "SLURM_NPROCS", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"})


def arbitrary_hosts(opts: dict[str, Any]) -> list[str] | None:
    """-m arbitrary: each task's node, in task order, as SLURM_HOSTFILE lists them (names separated
    by newlines, commas or spaces; with -n, its first n); None for any other distribution, checked
    as Slurm reads it (block, cyclic, plane=N, arbitrary or *, then :node:socket:core levels)."""
    given = opts.get("distribution")
    if not given:
        return None
    first = given.split(",")[0]
    levels = first.split(":")
    kind = levels[0].lower()
    known = kind in ("*", "block", "cyclic", "arbitrary", "plane") or (kind.startswith("plane=") and kind[6:].isdigit())
    if not known or len(levels) > 3 or any(level.lower() not in ("*", "block", "cyclic", "fcyclic")
                                           for level in levels[1:]):
        raise CLIError("Invalid --distribution specification")
    if kind != "arbitrary":
        return None
    path = os.environ.get("SLURM_HOSTFILE")
    if not path:
        raise CLIError("--distribution=arbitrary needs SLURM_HOSTFILE, the file listing each task's node")
    import re

    from wattsched import hostlist

    hosts = []
    for entry in re.split(r",(?![^\[]*\])", read_nodefile(path)):  # commas outside brackets
        try:
            hosts.extend(hostlist.expand(entry) if entry else [])
        except hostlist.HostlistError as exc:
            raise CLIError(f"SLURM_HOSTFILE {path}: {exc}") from exc
    if not hosts:
        raise CLIError(f"SLURM_HOSTFILE {path} lists no host")
    ntasks = opts.get("ntasks")
    if ntasks is not None and ntasks > len(hosts):
        raise CLIError(f"SLURM_HOSTFILE {path} lists {len(hosts)} hosts, fewer than the {ntasks} tasks asked for")
    return hosts[:ntasks] if ntasks is not None else hosts


def read_nodefile(path: str) -> str:
    """-F/--nodefile: the hosts listed in a file (names, commas or whitespace), as a node list."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"Unable to open nodefile {path}: {exc}") from exc
    return ",".join(text.split())


# shlex.quote's rule, without importing shlex (and re, enum with it: ~8 ms for every sbatch)
_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")


def shell_quote(word: str) -> str:
    """A word as the shell reads it back (shlex.quote's output)."""
    if word and all(c in _SHELL_SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def node_range(text: str | None) -> tuple[int, int]:
    """-N's (minimum, maximum) nodes (wattsched.nodecount); a maximum of 0: none beyond the minimum."""
    if not text:
        return 1, 0
    from wattsched import nodecount

    try:
        low, high = nodecount.parse(text)
    except nodecount.NodeCountError as exc:
        raise CLIError(str(exc)) from exc
    if low < 1:
        raise CLIError(f'"{text}" is not a valid node count')
    return low, high


def memory(text: str | None, flag: str) -> int:
    if not text:
        return 0
    from wattsched import timefmt

    try:
        return timefmt.parse_mem_mb(text)
    except timefmt.TimeFormatError as exc:
        raise CLIError(f"Invalid {flag} specification: {text}") from exc


def environment(export: str | None) -> dict[str, str]:
    """--export: ALL (default), NONE, or a list of names and NAME=value, with or without ALL."""
    if not export or export.upper() == "ALL":
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in export.split(","):
        if item.upper() == "ALL":
            env.update(os.environ)
        elif item.upper() == "NONE":
            continue
        elif "=" in item:
            name, value = item.split("=", 1)
            env[name] = value
        elif item in os.environ:
            env[item] = os.environ[item]
    return env


def job_environment(export: str | None) -> dict[str, str]:
    """The environment a job gets: --export's, with the submitter's umask as SLURM_UMASK (as in Slurm)
    and without credentials."""
    from wattsched.auth import SECRET_ENV

    env = environment(export)
    for name in SECRET_ENV:
        env.pop(name, None)
    mask = os.umask(0)
    os.umask(mask)
    env.setdefault("SLURM_UMASK", f"{mask:04o}")
    return env


def no_kill(value: Any) -> bool:
    """-k/--no-kill[=on|off]: given alone, on (its value is then True); "off" turns it off, as Slurm's."""
    if value is None or value is True:
        return value is True
    word = str(value).strip().lower()
    if word not in ("on", "off", "yes", "no", "1", "0"):
        raise CLIError(f"Invalid --no-kill specification: {value}")
    return word in ("on", "yes", "1")


def nice(text: str | None) -> int:
    """--nice[=adjustment]: Slurm's bounds (+-2147483645); no value means 100."""
    if text is None:
        return 0
    value = text.strip()
    if not value.lstrip("+-").isdigit() or abs(int(value)) > 2147483645:
        raise CLIError(f"Invalid --nice value: {text}")
    return int(value)


def tres_bind(opts: dict[str, Any]) -> str:
    """--tres-bind as given (the controller checks it), or --gpu-bind as its gres/gpu binding, checked
    here as Slurm's commands check it."""
    if opts.get("gpu_bind") is None:
        return opts.get("tres_bind") or ""
    from wattsched import tresbind

    binding = f"gres/gpu:{opts['gpu_bind']}"
    if not tresbind.valid(binding):
        raise CLIError(f"Invalid --gpu-bind argument: {opts['gpu_bind']}")
    return binding


def submission(opts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The JSON body of a submission from the shared options (unset ones are left out)."""
    nodes_min, nodes_max = node_range(opts.get("nodes"))
    mem_mb, mem_cpu_mb = memory(opts.get("mem"), "--mem"), memory(opts.get("mem_per_cpu"), "--mem-per-cpu")
    if mem_mb and mem_cpu_mb:
        raise CLIError("--mem and --mem-per-cpu are mutually exclusive.")
    open_mode = (opts.get("open_mode") or "truncate").lower()
    if open_mode not in ("append", "truncate", "a", "t"):
        raise CLIError(f"Invalid --open-mode specification: {opts.get('open_mode')}")
    work_dir = os.path.abspath(opts.get("chdir") or os.getcwd())
    arbitrary = arbitrary_hosts(opts)  # -m arbitrary: the job's nodes and tasks as SLURM_HOSTFILE lists them
    body: dict[str, Any] = {
        "name": opts.get("job_name") or "",
        "work_dir": work_dir,
        "environment": job_environment(opts.get("export")),
        "submit_host": os.uname().nodename.split(".")[0],
        "submit_line": " ".join(shell_quote(a) for a in [os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "account": opts.get("account") or "",
        "qos": opts.get("qos") or "",
        "partition": opts.get("partition") or "",
        "nodes_min": nodes_min, "nodes_max": nodes_max,
        "ntasks": opts.get("ntasks") if arbitrary is None else len(arbitrary),
        "ntasks_per_node": opts.get("ntasks_per_node") or 0,
        "cpus_per_task": opts.get("cpus_per_task") or 1,
        "mem_per_node_mb": mem_mb, "mem_per_cpu_mb": mem_cpu_mb,
        "min_cpus_per_node": opts.get("mincpus") or 0, "tmp_mb": memory(opts.get("tmp"), "--tmp"),
        "rlimits": rlimits.current(),  # the site's PropagateResourceLimits chooses among them
        "time_limit": opts.get("time"),
        "begin": opts.get("begin"),
        "deadline": opts.get("deadline"),
        "dependency": opts.get("dependency") or "",
        "hold": bool(opts.get("hold")),
        "exclusive": bool(opts.get("exclusive")),
        "overcommit": bool(opts.get("overcommit")),
        "no_kill": no_kill(opts.get("no_kill")),
        "mail_type": opts.get("mail_type") or "", "mail_user": opts.get("mail_user") or "",
        "nodelist": opts.get("nodelist") or (read_nodefile(opts["nodefile"]) if opts.get("nodefile") else "")
        or ",".join(dict.fromkeys(arbitrary or ())),
        "exclude": opts.get("exclude") or "",
        "constraint": opts.get("constraint") or "",
        "output": opts.get("output") or "",
        "error": opts.get("error") or "",
        "input": opts.get("input") or "/dev/null",
        "open_mode": "append" if open_mode.startswith("a") else "truncate",
        "signal": opts.get("signal") or "",
        "comment": opts.get("comment") or "",
        "nice": nice(opts.get("nice")),
        "reservation": opts.get("reservation") or "",
        "wckey": opts.get("wckey") or "",
        "cpu_freq": opts.get("cpu_freq") or "",
        "power_fit": bool(opts.get("power_fit")),
        "energy_policy": opts.get("energy_policy") or "",
        "profile": opts.get("profile") or "",
        "acctg_freq": opts.get("acctg_freq") or "",
        "gres": opts.get("gres") or "", "gpus": opts.get("gpus") or "",
        "gpus_per_node": opts.get("gpus_per_node") or "", "gpus_per_task": opts.get("gpus_per_task") or "",
        "tres_bind": tres_bind(opts),
        "licenses": opts.get("licenses") or "",
        # one per command: sent again to a backup controller, it finds the jobs already made
        "submit_key": os.urandom(16).hex(),
    }
    body.update(extra)
    return body


def will_run(client: Any, body: dict[str, Any], prog: str) -> int:
    """--test-only (sbatch, srun, salloc): nothing is submitted; Slurm's "Job N to start at T using C
    processors on nodes X in partition P", and ours, what the same job's earlier runs let expect."""
    from wattsched import hostlist, timefmt

    try:
        reply = client.request("POST", "/v1/jobs", dict(body, test_only=True))
    except CLIError as exc:
        raise CLIError(f"Job submission failed: {exc}") from exc
    plan = reply["will_run"]
    if plan["start_time"] is None:
        raise CLIError(f"Job {reply['job_id']} can not be scheduled now: {plan['reason'] or 'Resources'}")
    where = f" on nodes {hostlist.compress(plan['nodes'])}" if plan["nodes"] else ""
    sys.stderr.write(f"{prog}: Job {reply['job_id']} to start at {timefmt.ts_str(plan['start_time'])} using "
                     f"{plan['cpus']} processors{where} in partition {plan['partition']}\n")
    if plan.get("expected_runs"):
        run_time = timefmt.elapsed_str(round(plan["expected_elapsed_s"]))
        sys.stderr.write(f"{prog}: Job {reply['job_id']} expected to run {run_time} and use "
                         f"{plan['expected_energy_j'] / 1000:.1f} kJ at {plan['expected_watts']:.0f} W "
                         + ("(as its last run)\n" if plan["expected_runs"] == 1 else
                            f"(the mean of its last {plan['expected_runs']} runs)\n"))
    return 0

"""sgather: the counterpart of sbcast, as Slurm's (its contribs/sgather): from inside a job, copy
SOURCE from every node of the job to DEST.<node> here.

A step with one task per node (as many nodes at once as the fanout, -F, says) sends each node's
file back through srun's output, base64 on one line with its node, mode and times (-C gzips it on
the wire, -r sends a directory as a tar archive); sgather writes each as DEST.<node>, with the
source's modes and, with -p, its times. The source is removed afterwards unless -k; a node without
it is an error unless -f. Everything runs as the user: the tasks read their files, sgather writes
its own.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys

from wattsched.cli.common import CLIError
from wattsched.cli.options import NO, REQ, Command, Opt, run, standard

COMMAND = Command("sgather", "[-CfFkprtvV] SOURCE DEST", [
    Opt("C", "compress", NO, "compress the file being transmitted"),
    Opt("f", "force", NO, "ignore nonexistent source file"),
    Opt("F", "fanout", REQ, "specify message fanout", metavar="num", kind="int"),
    Opt("k", "keep", NO, "do not remove source file after transmission"),
    Opt("p", "preserve", NO, "preserve modes and times of source file"),
    Opt("r", "recursive", NO, "copy directories recursively"),
    Opt("t", "timeout", REQ, "specify message timeout (seconds)", metavar="secs", kind="int"),
    Opt("v", "verbose", NO, "provide detailed event logging", kind="count"),
    *standard(None),
])

# Each node's task: its file (or, -r, its directory as tar), gzipped with -C, as one line
# "<node> <mode> <atime> <mtime> <kind> <base64>"; kind f (a file) or d (a tar of a directory).
_TASK = r"""
src=$1 recursive=$2 compress=$3 keep=$4 node=$(hostname)
if [ ! -e "$src" ]; then echo "sgather($node): error: Can't open $src" >&2; exit 3; fi
if [ -d "$src" ] && [ "$recursive" != 1 ]; then
  echo "sgather($node): error: $src is a directory (use -r)" >&2; exit 4
fi
kind=f; [ -d "$src" ] && kind=d
printf '%s %s %s ' "$node" "$(stat -c '%a %X %Y' "$src")" "$kind"
if [ $kind = d ]; then tar -C "$(dirname "$src")" -cf - "$(basename "$src")"; else cat "$src"; fi |
  if [ "$compress" = 1 ]; then gzip -c; else cat; fi | base64 -w0 || exit 5
echo
[ "$keep" = 1 ] || rm -rf "$src"
"""


def sgather(argv: list[str]) -> int:
    opts, names = COMMAND.parse(argv)
    if len(names) != 2:
        sys.stderr.write(f"Need two file names, have {len(names)} names\nTry \"sgather --help\" for more information\n")
        return 1
    fanout, timeout = opts.get("fanout", 8), opts.get("timeout", 60)
    if not 0 < fanout <= 8:
        raise CLIError(f"invalid fanout -- '{fanout}'")
    if timeout <= 0:
        raise CLIError(f"invalid timeout -- '{timeout}'")
    source, dest = names[0], os.path.join(os.getcwd(), names[1])
    job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
    if not job_id:
        raise CLIError("Command only valid from within Slurm job")
    from wattsched import hostlist

    nodes = hostlist.expand(os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "")
    if opts.get("verbose"):
        shown = {"compress": bool(opts.get("compress")), "force": bool(opts.get("force")), "fanout": fanout,
                 "keep source": bool(opts.get("keep")), "preserve": bool(opts.get("preserve")),
                 "recursive": bool(opts.get("recursive")), "timeout": timeout, "verbose": opts["verbose"],
                 "source": source, "dest": dest, "jobid": job_id, "node_cnt": len(nodes),
                 "node_list": hostlist.compress(nodes)}
        sys.stdout.write("".join(f"sgather: {name:<11} = {str(value).lower() if isinstance(value, bool) else value}\n"
                                 for name, value in shown.items()))
    failed = False
    for first in range(0, len(nodes), fanout):
        group = nodes[first:first + fanout]
        flags = ["1" if opts.get(key) else "0" for key in ("recursive", "compress", "keep")]
        argv_ = ["srun", "--jobid", job_id, f"--nodelist={','.join(group)}", f"--ntasks={len(group)}",
                 "--ntasks-per-node=1", "--overlap", "sh", "-c", _TASK, "sgather", source, *flags]
        try:
            done = subprocess.run(argv_, stdout=subprocess.PIPE, check=False, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CLIError(f"timed out after {timeout} s gathering from {hostlist.compress(group)}") from exc
        for line in done.stdout.decode(errors="replace").splitlines():
            _write(line, dest, bool(opts.get("preserve")), bool(opts.get("compress")))
        failed = failed or done.returncode != 0
    return 1 if failed and not opts.get("force") else 0


def _write(line: str, dest: str, preserve: bool, compressed: bool) -> None:
    """One node's file, as its task sent it, written to DEST.<node> (a directory, from -r's tar)."""
    fields = line.split(" ", 5)
    if len(fields) != 6:
        return
    node, mode, atime, mtime, kind, data = fields
    raw = base64.b64decode(data)
    if compressed:
        import gzip

        raw = gzip.decompress(raw)
    target = f"{dest}.{node}"
    if kind == "d":
        import io
        import tarfile

        os.makedirs(target, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            members = archive.getmembers()
            top = members[0].name.split("/")[0] if members else ""
            kept = []
            for member in members:  # files and folders under the source's own name only: no links
                inside = member.name[len(top):].lstrip("/") if member.name.split("/")[0] == top else None
                if inside is None or ".." in inside.split("/") or not (member.isfile() or member.isdir()):
                    continue
                member.name = inside or "."
                kept.append(member)
            archive.extractall(target, members=kept)  # (members checked above)
    else:
        with open(target, "wb") as handle:
            handle.write(raw)
    os.chmod(target, int(mode, 8) & 0o7777)
    if preserve:
        os.utime(target, (int(atime), int(mtime)))


def main() -> None:
    run("sgather", lambda: sgather(sys.argv[1:]))

"""sbcast: copy a file to every node of a running job (or some of them, -w), as Slurm's sbcast.

Inside an allocation (SLURM_JOB_ID, or -j) sbcast asks the controller for leave to write to the
job's nodes, then streams the file to each of their agents at once; each has it written by the
job's user (wattsched.noded.broadcast). The destination is kept unless -f; -p keeps the source's
access and modification times (its permission bits always go with it); -C compresses the bytes on
the wire. A node that could not take the file is named with the reason, and sbcast exits 1.
"""

from __future__ import annotations

import os
import sys
import threading

from wattsched import jsonwire
from wattsched.cli.common import Client, CLIError, exchange, host_port
from wattsched.cli.options import NO, OPT, REQ, Command, Opt, ignored, refused, run, standard

TYPE_CHECKING = False  # not typing's: importing typing costs a command ~5 ms (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

BLOCK = 8 << 20  # Slurm's default block size (-s, SBCAST_SIZE)

COMMAND = Command("sbcast", "[--exclude] [-CfFjpvV] [--send-libs] SOURCE DEST", [
    Opt("C", "compress", OPT, "compress the file being transmitted", metavar="lib"),
    Opt("f", "force", NO, "replace destination file as required"),
    Opt("j", "jobid", REQ, "specify job ID with optional hetjob offset and/or step ID", metavar="#[+#][.#]"),
    Opt("p", "preserve", NO, "preserve modes and times of source file"),
    Opt("s", "size", REQ, "block size in bytes (rounded off)", metavar="num"),
    Opt("t", "timeout", REQ, "specify message timeout (seconds)", metavar="secs", kind="int"),
    Opt("v", "verbose", NO, "provide detailed event logging", kind="count"),
    Opt("w", "nodelist", REQ, "the job's nodes to send the file to", metavar="nodes"),
    ignored(None, "exclude", REQ), ignored("F", "fanout", REQ), ignored(None, "treewidth", REQ),
    ignored(None, "send-libs", OPT),
    refused("Z", "no-allocation", OPT, "a broadcast without a job is not supported"),
    *standard(None),
])


def sbcast(argv: list[str]) -> int:
    """Copy SOURCE to DEST on the job's nodes; 0 when every node has it."""
    opts, names = COMMAND.parse(argv)
    if len(names) != 2:
        sys.stderr.write(f"Need two file names, have {len(names)} names\nTry \"sbcast --help\" for more information\n")
        return 1
    source, dest = names
    if not dest.startswith("/"):
        dest = os.path.join(os.getcwd(), dest)
    if dest.endswith("/"):
        raise CLIError("Target filename cannot be a directory.")
    job_id = _job_id(opts.get("jobid"))
    lib = opts.get("compress")
    compress = _compression(lib if isinstance(lib, str) else os.environ.get("SBCAST_COMPRESS"),
                            "compress" in opts or "SBCAST_COMPRESS" in os.environ)
    block = _size(opts.get("size") or os.environ.get("SBCAST_SIZE"))
    try:
        fd = os.open(source, os.O_RDONLY)
        info = os.fstat(fd)
    except OSError as exc:
        raise CLIError(f"Can't open `{source}`: {exc.strerror}") from exc
    os.close(fd)
    verbose = opts.get("verbose", 0)
    if verbose:
        sys.stderr.write(f"sbcast: modes    = {info.st_mode:o}\nsbcast: size     = {info.st_size}\n"
                         f"sbcast: jobid      = {job_id}\n")
    if not info.st_size:
        sys.stderr.write(f"sbcast: warning: file `{source}` is empty.\n")
    client = Client()
    nodelist = _nodes(opts.get("nodelist"))
    grant = client.request("POST", f"/v1/jobs/{job_id}/bcast", {"nodelist": nodelist})
    by_agent: dict[str, list[str]] = {}
    for node in grant["nodes"]:
        by_agent.setdefault(node["agent_url"], []).append(node["node"])
    head = {"job_id": job_id, "credential": grant["credential"], "dest": dest, "size": info.st_size,
            "mode": info.st_mode & 0o7777, "force": bool(opts.get("force") or "SBCAST_FORCE" in os.environ),
            "times": [int(info.st_atime), int(info.st_mtime)]
            if opts.get("preserve") or "SBCAST_PRESERVE" in os.environ else None, "compress": compress}
    timeout = float(opts.get("timeout") or os.environ.get("SBCAST_TIMEOUT") or 0) or None
    failures: list[str] = []
    token = client.token()  # once, before the threads
    threads = [threading.Thread(target=_send, args=(token, url, dict(head, nodes=nodes), source, block, timeout,
                                                    failures), daemon=True)
               for url, nodes in by_agent.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for line in sorted(failures):
        sys.stderr.write(f"sbcast: error: {line}\n")
    return 1 if failures else 0


def _send(token: str, url: str, head: dict[str, Any], source: str, block: int, timeout: float | None,
          failures: list[str]) -> None:
    """One agent's copy: the description line, then the file in chunked transfer encoding."""
    host, port = host_port(url)
    request = (f"POST /v1/bcast HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
               f"Authorization: Bearer {token}\r\nAccept: application/json\r\n"
               "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    try:
        status, answer = exchange(host, port, request, timeout or 3600.0,
                                  _chunks(jsonwire.dumps(head).encode() + b"\n", source, block, head["compress"]))
    except OSError as exc:
        failures.extend(f"REQUEST_FILE_BCAST({node}): {exc.strerror or exc}" for node in head["nodes"])
        return
    try:
        reply = jsonwire.loads(answer)
    except ValueError:
        reply = {"detail": answer[:200].decode(errors="replace")}
    why = str(reply.get("error") or "") if status == 200 else str(reply.get("detail") or f"HTTP {status}")
    if why:
        failures.extend(f"REQUEST_FILE_BCAST({node}): {why}" for node in head["nodes"])


def _chunks(first: bytes, source: str, block: int, compress: str) -> Iterator[bytes]:
    """The body in HTTP chunks: the description line, then the file read a block at a time."""
    import zlib

    deflate = zlib.compressobj(1) if compress == "zlib" else None  # fast: the wire, not the disk, is short
    yield b"%x\r\n%s\r\n" % (len(first), first)
    with open(source, "rb") as handle:
        while data := handle.read(block):
            if deflate:
                data = deflate.compress(data)
            if data:
                yield b"%x\r\n%s\r\n" % (len(data), data)
    if deflate:
        rest = deflate.flush()
        yield b"%x\r\n%s\r\n" % (len(rest), rest)
    yield b"0\r\n\r\n"


def _job_id(text: str | None) -> int:
    """-j's job (a step, a het-job offset ignored), else the allocation's."""
    if text is None:
        text = os.environ.get("SLURM_JOB_ID")
        if not text:
            raise CLIError("Need a job id to run this command.  Run from within a Slurm job or use the --jobid "
                           "option.")
    job = text.split(".")[0].split("+")[0].strip()
    if not job.isdigit():
        raise CLIError(f"Invalid job id: {text}")
    return int(job)


def _compression(value: str | None, asked: bool) -> str:
    """-C[lib] / SBCAST_COMPRESS: Slurm's names (lz4, none); the bytes travel deflated with zlib,
    which Python carries (lz4 would be a dependency for one option)."""
    if not asked or (value or "lz4").lower() == "none":
        return "none"
    if (value or "lz4").lower() not in ("lz4", "zlib"):
        sys.stderr.write(f"sbcast: error: Compression type '{value}' unknown, disabling compression support.\n")
        return "none"
    return "zlib"


def _size(text: str | None) -> int:
    """-s/SBCAST_SIZE: bytes, or with a k or m suffix; Slurm's 8 MiB when unset or invalid."""
    if not text:
        return BLOCK
    scale = {"k": 1 << 10, "m": 1 << 20}.get(text[-1].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        sys.stderr.write("size specification is invalid, ignored\n")
        return BLOCK
    return max(1, min(int(digits) * scale, 64 << 20))


def _nodes(expression: str | None) -> list[str]:
    if not expression:
        return []
    from wattsched import hostlist

    try:
        return hostlist.expand(expression)
    except ValueError as exc:
        raise CLIError(f"Invalid node name specified: {exc}") from exc


def main() -> None:
    run("sbcast", lambda: sbcast(sys.argv[1:]))

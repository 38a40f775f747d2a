"""mpi/pmi2: the PMI server a step's tasks on one node talk to, as Slurm's mpi/pmi2 serves it.

Each task inherits one end of a socket pair (``PMI_FD``, with ``PMI_RANK``, ``PMI_SIZE`` and
``PMI_JOBID``); the agent holds the other end, so only the step's own tasks reach their server. A
connection opens with PMI-1's ``cmd=init pmi_version=V pmi_subversion=S`` line and then speaks the
wire of the version it asked for: PMI-1.1 (``cmd=... key=value`` lines; MPICH's simple PMI, MVAPICH)
or PMI-2.0 (a six-character length, then ``cmd=...;key=value;``; Intel MPI, MPICH's pmi2).

Puts are kept on the node until a fence (PMI-1 ``barrier_in``, PMI-2 ``kvs-fence``) that every
local task has entered; the node's contribution then goes to srun, which hands the union of all
nodes' contributions back to every node, and the tasks are answered. Job attributes are Slurm's:
``PMI_process_mapping`` (also in the key-value space, for PMI-1) and ``universeSize``. Spawn, the
name service and PMI-2's ring are refused with an error code, never left unanswered.

Everything a task sends is bounded before it is kept (a message at most MESSAGE_MAX bytes; keys,
values and the step's whole key-value space at PMI's and our limits). A task that initialised PMI
and ends without finalising it, or one that calls abort, ends the step on every node (as MPI's own
launchers do), so the others never wait in a fence for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from wattsched.plugins.mpi import StepInfo, process_mapping

log = logging.getLogger("wattsched.noded")

MAXKEYLEN, MAXVALLEN, MAXKVSNAME = 64, 1024, 256  # Slurm's pmi.h (PMI's own maxima)
MESSAGE_MAX = 64 * 1024  # one request: a PMI-1 line is at most 1 KiB, PMI-2's longest is a spawn
KVS_MAX_BYTES = 64 * 1024 * 1024  # one step's key-value space, as kept by root on each node
LENGTH_DIGITS = 6  # PMI-2's length prefix


class _Task:
    """One local task's connection: its rank, PMI version (0 until init), unread bytes, answers not
    yet written, and whether it has initialised and finalised."""

    def __init__(self, local_id: int, rank: int, sock: socket.socket, theirs: socket.socket | None) -> None:
        self.local_id, self.rank, self.sock, self.theirs = local_id, rank, sock, theirs
        self.version = 0
        self.inbox = b""
        self.outbox = b""
        self.initialised = self.finalised = self.closed = False


class Pmi2Server:
    """One step's PMI server on one node (:class:`wattsched.plugins.mpi.MpiServer`)."""

    def __init__(self, info: StepInfo) -> None:
        self.info = info
        self.loop = asyncio.get_running_loop()
        self.kvsname = f"{info.job_id}.{info.step_id}"
        self.local = list(info.layout[info.node])
        self.size = sum(len(tasks) for tasks in info.layout.values())
        self.single_node = len(info.layout) == 1
        self.mapping = process_mapping(info.layout)
        self.kvs: dict[str, str] = {"PMI_process_mapping": self.mapping}
        self.kvs_bytes = 0
        self.pending: dict[str, str] = {}  # this node's puts since the last fence
        self.fence_seq = 0
        self.fencing: set[int] = set()  # local ids in the current fence
        self.node_attrs: dict[str, str] = {}
        self.attr_waiters: dict[str, list[_Task]] = {}
        self.tasks: dict[int, _Task] = {}
        self.aborted = False

    # the agent's side (MpiServer)

    def task_setup(self, local_id: int) -> tuple[dict[str, str], int | None]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        task = self.tasks[local_id] = _Task(local_id, self.local[local_id], ours, theirs)
        self.loop.add_reader(ours.fileno(), self._readable, task)
        env = {"PMI_JOBID": self.kvsname, "PMI_RANK": str(task.rank), "PMI_SIZE": str(self.size)}
        return env, theirs.fileno()

    def task_started(self, local_id: int) -> None:
        task = self.tasks.get(local_id)
        if task is not None and task.theirs is not None:
            task.theirs.close()  # the task has its copy: its end of file is then the task's
            task.theirs = None

    def task_ended(self, local_id: int) -> None:
        task = self.tasks.get(local_id)
        if task is not None and not task.closed:
            self._readable(task)  # what it said last, then its end
            if task.initialised and not task.finalised and not task.closed:
                self._gone(task)

    async def start(self) -> None:
        """Ready from the start: the tasks' socket pairs are made as they are set up."""

    def deliver(self, message: dict[str, Any]) -> None:
        if message.get("pmi") == "fence":
            self._fence_done(int(message.get("seq", -1)), message.get("kvs") or {})

    def close(self) -> None:
        for task in self.tasks.values():
            self._close(task)

    # the tasks' side

    def _readable(self, task: _Task) -> None:
        if task.closed:
            return
        try:
            data = task.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone(task)
            return
        task.inbox += data
        while not task.closed and (message := self._take(task)) is not None:
            self._handle(task, message)
        if not task.closed and len(task.inbox) > MESSAGE_MAX:
            self._protocol_error(task, f"a request of over {MESSAGE_MAX} bytes")

    @staticmethod
    def _take(task: _Task) -> str | None:
        """The next whole request in the task's inbox, or None."""
        if task.version == 2:
            if len(task.inbox) < LENGTH_DIGITS:
                return None
            prefix = task.inbox[:LENGTH_DIGITS].strip()
            if not prefix.isdigit():
                task.inbox = b""
                return ""  # handled as a malformed request
            end = LENGTH_DIGITS + int(prefix)
            if len(task.inbox) < end:
                return None
            message, task.inbox = task.inbox[LENGTH_DIGITS:end], task.inbox[end:]
            return message.decode(errors="replace")
        if task.inbox.startswith(b"mcmd="):  # PMI-1's spawn: lines up to "endcmd"
            end = task.inbox.find(b"endcmd\n")
            if end < 0:
                return None
            message, task.inbox = task.inbox[:end + 7], task.inbox[end + 7:]
            return message.decode(errors="replace")
        line, newline, rest = task.inbox.partition(b"\n")
        if not newline:
            return None
        task.inbox = rest
        return line.decode(errors="replace")

    def _handle(self, task: _Task, message: str) -> None:
        if task.version == 0:
            self._init(task, message)
        elif task.version == 1:
            self._pmi1(task, message)
        else:
            self._pmi2(task, message)

    def _init(self, task: _Task, line: str) -> None:
        fields = _pmi1_fields(line)
        version, subversion = fields.get("pmi_version", ""), fields.get("pmi_subversion", "")
        if fields.get("cmd") != "init" or (version, subversion) not in (("1", "1"), ("2", "0")):
            log.error("mpi/pmi2: invalid PMI1 init command", extra={"job": self.kvsname, "rank": task.rank})
            self._send(task, "cmd=response_to_init rc=1 pmi_version=2 pmi_subversion=0\n")
            return
        task.version, task.initialised = int(version), True
        self._send(task, f"cmd=response_to_init rc=0 pmi_version={version} pmi_subversion={subversion}\n")

    def _pmi1(self, task: _Task, line: str) -> None:
        if line.startswith("mcmd="):
            self._send(task, "cmd=spawn_result rc=-1 errmsg=spawn_is_not_supported\n")
            return
        fields = _pmi1_fields(line)
        cmd = fields.get("cmd", "")
        if cmd == "get_maxes":
            self._send(task, f"cmd=maxes rc=0 kvsname_max={MAXKVSNAME} keylen_max={MAXKEYLEN} "
                             f"vallen_max={MAXVALLEN}\n")
        elif cmd == "get_universe_size":
            self._send(task, f"cmd=universe_size rc=0 size={self.size}\n")
        elif cmd == "get_appnum":
            self._send(task, "cmd=appnum rc=0 appnum=-1\n")
        elif cmd == "get_my_kvsname":
            self._send(task, f"cmd=my_kvsname rc=0 kvsname={self.kvsname}\n")
        elif cmd == "put":
            error = self._put(fields.get("key", ""), fields.get("value", ""))
            self._send(task, f"cmd=put_result rc={-1 if error else 0}{' msg=' + error if error else ''}\n")
        elif cmd == "get":
            value = self.kvs.get(fields.get("key", ""))
            self._send(task, f"cmd=get_result rc=0 value={value}\n" if value is not None
                       else "cmd=get_result rc=1\n")
        elif cmd == "barrier_in":
            self._enter_fence(task)
        elif cmd == "finalize":
            task.finalised = True
            self._send(task, "cmd=finalize_ack rc=0\n")
        elif cmd == "abort":
            self._abort(f"task {task.rank} called abort (exit code {fields.get('exitcode', '?')})")
        elif cmd in ("publish_name", "unpublish_name", "lookup_name"):
            self._send(task, f"cmd={cmd.split('_')[0]}_result info=fail\n")
        else:  # getbyidx, create_kvs, destroy_kvs and anything else: answered, never left waiting
            log.error("mpi/pmi2: PMI1 request not supported", extra={"job": self.kvsname, "request": cmd[:64]})
            self._send(task, f"cmd={_word(cmd)}_result rc=-1 msg=not_supported\n")

    def _pmi2(self, task: _Task, message: str) -> None:
        fields = _pmi2_fields(message)
        cmd = fields.get("cmd", "")
        if cmd == "fullinit":
            self._send(task, f"cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={task.rank};"
                             f"size={self.size};appnum=-1;debugged=FALSE;pmiverbose=FALSE;")
        elif cmd == "job-getid":
            self._send(task, f"cmd=job-getid-response;rc=0;jobid={self.kvsname};")
        elif cmd == "kvs-put":
            error = self._put(fields.get("key", ""), fields.get("value", ""))
            self._send(task, f"cmd=kvs-put-response;rc={-1 if error else 0};"
                             f"{'errmsg=' + error + ';' if error else ''}")
        elif cmd == "kvs-get":
            self._send(task, "cmd=kvs-get-response;rc=0;" + _found(self.kvs.get(fields.get("key", ""))))
        elif cmd == "kvs-fence":
            self._enter_fence(task)
        elif cmd == "info-getjobattr":
            self._send(task, "cmd=info-getjobattr-response;rc=0;" + _found(self._job_attr(fields.get("key", ""))))
        elif cmd == "info-putnodeattr":
            self._put_node_attr(task, fields.get("key", ""), fields.get("value", ""))
        elif cmd == "info-getnodeattr":
            key = fields.get("key", "")
            value = self.node_attrs.get(key)
            if value is None and fields.get("wait", "").upper() == "TRUE":
                self.attr_waiters.setdefault(key[:MAXKEYLEN], []).append(task)
            else:
                self._send(task, "cmd=info-getnodeattr-response;rc=0;" + _found(value))
        elif cmd == "finalize":
            task.finalised = True
            self._send(task, "cmd=finalize-response;rc=0;")
        elif cmd == "abort":
            if fields.get("isworld", "").upper() == "TRUE":
                self._abort(f"task {task.rank} called abort: {fields.get('msg', '')[:200]}")
        elif cmd in ("name-publish", "name-unpublish", "name-lookup", "spawn", "job-connect", "job-disconnect",
                     "ring"):
            self._send(task, f"cmd={cmd}-response;rc=-1;errmsg={cmd} is not supported;")
        else:
            log.error("mpi/pmi2: PMI2 request not supported", extra={"job": self.kvsname, "request": cmd[:64]})
            self._send(task, f"cmd={_word(cmd)}-response;rc=-1;errmsg=not supported;")

    def _job_attr(self, key: str) -> str | None:
        if key == "PMI_process_mapping":
            return self.mapping
        if key == "universeSize":
            return str(self.size)
        return None

    def _put(self, key: str, value: str) -> str:
        """Keep one put until the next fence; an error's text (no spaces) when refused."""
        if not key or len(key) > MAXKEYLEN:
            return "invalid_key_length"
        if len(value) > MAXVALLEN:
            return "invalid_value_length"
        self.pending[key] = value
        return ""

    def _put_node_attr(self, task: _Task, key: str, value: str) -> None:
        if not key or len(key) > MAXKEYLEN or len(value) > MAXVALLEN or len(self.node_attrs) >= 4096:
            self._send(task, "cmd=info-putnodeattr-response;rc=-1;errmsg=invalid node attribute;")
            return
        self.node_attrs[key] = value
        self._send(task, "cmd=info-putnodeattr-response;rc=0;")
        for waiter in self.attr_waiters.pop(key, []):
            self._send(waiter, "cmd=info-getnodeattr-response;rc=0;" + _found(value))

    # fences

    def _enter_fence(self, task: _Task) -> None:
        self.fencing.add(task.local_id)
        if len(self.fencing) < len(self.local):
            return
        contribution, self.pending = self.pending, {}
        if self.single_node:
            self._fence_done(self.fence_seq, contribution)
        else:
            self.info.send({"pmi": "fence", "seq": self.fence_seq, "kvs": contribution})

    def _fence_done(self, seq: int, kvs: dict[str, str]) -> None:
        """Every node's contribution to fence ``seq`` has come: keep them, answer the local tasks."""
        if seq != self.fence_seq or len(self.fencing) < len(self.local):
            log.error("mpi/pmi2: a fence result for no fence", extra={"job": self.kvsname, "seq": seq})
            return
        size = sum(len(k) + len(v) for k, v in kvs.items())
        if self.kvs_bytes + size > KVS_MAX_BYTES:
            self._abort(f"the step's PMI key-value space passed {KVS_MAX_BYTES} bytes")
            return
        self.kvs_bytes += size
        self.kvs.update({str(k): str(v) for k, v in kvs.items()})
        self.fence_seq += 1
        for local_id in sorted(self.fencing):
            task = self.tasks[local_id]
            self._send(task, "cmd=barrier_out rc=0\n" if task.version == 1 else "cmd=kvs-fence-response;rc=0;")
        self.fencing.clear()

    # ends

    def _gone(self, task: _Task) -> None:
        """The task's end of the connection has closed: fine after finalize (or without PMI at all);
        otherwise the task died inside MPI and the step cannot go on."""
        self._close(task)
        if task.initialised and not task.finalised:
            self._abort(f"task {task.rank} ended without finalizing PMI")

    def _protocol_error(self, task: _Task, what: str) -> None:
        log.error("mpi/pmi2: task broke the protocol", extra={"job": self.kvsname, "rank": task.rank, "error": what})
        self._abort(f"task {task.rank} sent {what}")

    def _abort(self, reason: str) -> None:
        """End the step on this node, and through srun on the others."""
        if self.aborted:
            return
        self.aborted = True
        log.info("mpi/pmi2: step aborted", extra={"job": self.kvsname, "node": self.info.node, "reason": reason})
        if not self.single_node:
            self.info.send({"pmi": "abort", "reason": reason})
        self.info.abort(reason)

    def _close(self, task: _Task) -> None:
        if task.closed:
            return
        task.closed = True
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(task.sock.fileno())
            self.loop.remove_writer(task.sock.fileno())
        task.sock.close()
        if task.theirs is not None:
            task.theirs.close()
            task.theirs = None

    # answers: never blocking the agent's loop on a task that does not read

    def _send(self, task: _Task, text: str) -> None:
        if task.closed:
            return
        data = text.encode()
        if task.version == 2 and not text.startswith("cmd=response_to_init"):
            data = f"{len(data):<{LENGTH_DIGITS}}".encode() + data
        task.outbox += data
        if len(task.outbox) > KVS_MAX_BYTES:  # a task that never reads its answers
            self._protocol_error(task, "no reads of its answers")
            return
        self._flush(task)

    def _flush(self, task: _Task) -> None:
        try:
            sent = task.sock.send(task.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._gone(task)
            return
        task.outbox = task.outbox[sent:]
        if task.outbox:
            self.loop.add_writer(task.sock.fileno(), self._flush, task)
        else:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_writer(task.sock.fileno())


def _pmi1_fields(line: str) -> dict[str, str]:
    """``cmd=put kvsname=k key=a value=b`` as a dict (Slurm splits PMI-1 requests on spaces)."""
    fields: dict[str, str] = {}
    for pair in line.strip().split(" "):
        key, equals, value = pair.partition("=")
        if equals:
            fields.setdefault(key, value)
    return fields


def _pmi2_fields(message: str) -> dict[str, str]:
    """``cmd=kvs-put;key=a;value=b;`` as a dict; ``;;`` in a value is a semicolon (PMI-2's escape)."""
    fields: dict[str, str] = {}
    index, length = 0, len(message)
    while index < length:
        equals = message.find("=", index)
        if equals < 0:
            break
        key = message[index:equals]
        value: list[str] = []
        index = equals + 1
        while index < length:
            char = message[index]
            if char == ";":
                if message.startswith(";;", index):
                    value.append(";")
                    index += 2
                    continue
                break
            value.append(char)
            index += 1
        fields.setdefault(key, "".join(value))
        index += 1
    return fields


def _found(value: str | None) -> str:
    return "found=FALSE;" if value is None else f"found=TRUE;value={value.replace(';', ';;')};"


def _word(text: str) -> str:
    """A request's name, echoed in an answer: letters, digits, - and _ only."""
    return "".join(c for c in text[:64] if c.isalnum() or c in "-_") or "unknown"

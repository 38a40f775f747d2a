"""The PMIx server of one step on one node (srun --mpi=pmix): OpenPMIx's server library, driven
through its C API from a step daemon that has become the job's user.

The agent starts it as a step daemon in ``pmix`` mode (wattsched.noded.stepd) before the step's
tasks, with the step's layout. It creates the server's rendezvous folder (its own, mode 0700, in the
node's temporary tree), starts the library there (``PMIx_server_init``), registers the step's
namespace (Slurm's keys: sizes, node and process maps, each rank's node and local rank) and the
node's ranks as clients of the user, and writes each rank's environment
(``PMIx_server_setup_fork``) to its standard output, one JSON line. The tasks connect to it with
that environment; no other user can reach the folder.

Then it relays, as JSON lines: up (standard output) a fence's contribution of this node
(``{"fence": seq, "data": base64}``), an abort (``{"abort": status, "rank", "msg"}``) and a rank
that connected and ended without finalizing (``{"lost": rank}``); down (standard input) the
fence's union of every node's contribution (``{"fence": seq, "data": base64}``) and each rank's end
(``{"ended": rank}``). End of input ends the server.

Clients prove who they are with MUNGE (PMIx's psec/munge): PMIx 4 serves them over TCP on
loopback, where its native check only takes the uid a client claims, so another user on the node
could otherwise join the step's namespace as one of its ranks and poison its exchange.

Why ctypes and not Debian's Python binding of the same library: the binding hands a fence's result
back through strdup, which cuts binary data at its first NUL byte (bindings/python/pmix.pyx,
fencenb, v4.2.2), and a fence's data is binary. Only the standard library is imported here: the fork
server imports this module while it is root, as it does the step daemon's.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import shutil
import sys
import tempfile
import threading
from typing import Any

LIBRARY = "libpmix.so.2"  # OpenPMIx 4 (Debian's libpmix2); its C API is stable across 4.x
SUCCESS, ERR_NOT_SUPPORTED, OPERATION_SUCCEEDED = 0, -47, -157
BOOL, STRING, UINT16, UINT32, DATA_ARRAY, PROC_RANK = 1, 3, 13, 14, 39, 40
MODULE_SLOTS = 28  # pmix_server_module_t's function pointers in 4.x (pmix_server.h)
FINALIZED, ABORT, FENCE_NB, DIRECT_MODEX, CONNECTED2 = 1, 2, 3, 4, 27  # their places in it
MUNGE_SOCKET = "/run/munge/munge.socket.2"
NSLEN = 256


class Proc(ctypes.Structure):
    _fields_ = [("nspace", ctypes.c_char * NSLEN), ("rank", ctypes.c_uint32)]


class DataArray(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint16), ("size", ctypes.c_size_t), ("array", ctypes.c_void_p)]


OP_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p)
MODEX_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p)
FINALIZED_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Proc), ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)
ABORT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Proc), ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
FENCE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
CONNECTED_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Proc), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p, ctypes.c_void_p)
DMODEX_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Proc), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_void_p)


class PmixError(Exception):
    """The library refused a call: which, and its status."""


class InfoList:
    """A pmix_info_t array built by the library itself (PMIx_Info_list_*), so that no structure
    layout but pmix_data_array_t's is spelled out here."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.handle = ctypes.c_void_p(lib.PMIx_Info_list_start())

    def add(self, key: str, value: Any, kind: int) -> InfoList:
        if kind == STRING:
            pointer: Any = ctypes.c_char_p(str(value).encode())
        elif kind == BOOL:
            pointer = ctypes.byref(ctypes.c_bool(bool(value)))
        elif kind == UINT16:
            pointer = ctypes.byref(ctypes.c_uint16(int(value)))
        elif kind in (UINT32, PROC_RANK):
            pointer = ctypes.byref(ctypes.c_uint32(int(value)))
        else:  # DATA_ARRAY: a DataArray
            pointer = ctypes.byref(value)
        _check("PMIx_Info_list_add", self.lib.PMIx_Info_list_add(self.handle, key.encode(), pointer, kind))
        return self

    def array(self) -> DataArray:
        out = DataArray()
        _check("PMIx_Info_list_convert", self.lib.PMIx_Info_list_convert(self.handle, ctypes.byref(out)))
        return out


def _check(what: str, status: int) -> None:
    if status not in (SUCCESS, OPERATION_SUCCEEDED):
        raise PmixError(f"{what}: PMIx status {status}")


class Host:
    """The server library in this process, for one step's namespace on one node."""

    def __init__(self, spec: dict[str, Any], out: Any) -> None:
        self.spec, self.out = spec, out
        self.lib = ctypes.CDLL(LIBRARY)
        self.lib.PMIx_Info_list_start.restype = ctypes.c_void_p
        self.lock = threading.Lock()
        self.nspace = str(spec["nspace"]).encode()[:NSLEN - 1]
        self.pending: dict[int, tuple[Any, int]] = {}  # fence seq: (the library's callback, its cbdata)
        self.kept: list[Any] = []  # what the library may still read: fence results, callbacks
        self.fences = 0
        self.folder = ""
        self.connected: set[int] = set()
        self.finalized: set[int] = set()

    # -- up: what the library asks of the host ---------------------------------------------------
    def say(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def _connected(self, proc: Any, *_rest: Any) -> int:
        with self.lock:
            self.connected.add(int(proc.contents.rank))
        return OPERATION_SUCCEEDED  # done here: the library calls its own callback

    def _finalized(self, proc: Any, *_rest: Any) -> int:
        with self.lock:
            self.finalized.add(int(proc.contents.rank))
        return OPERATION_SUCCEEDED

    def ended(self, rank: int) -> None:
        """A rank's process has ended: a loss if it connected and never finalized. (Its client
        finalizes before it may exit: the library answers only once this host has taken it in.)"""
        with self.lock:
            lost = rank in self.connected and rank not in self.finalized
        if lost:
            self.say({"lost": rank})

    def _abort(self, proc: Any, _object: Any, status: int, msg: bytes | None, *_rest: Any) -> int:
        self.say({"abort": int(status), "rank": int(proc.contents.rank),
                   "msg": (msg or b"").decode(errors="replace")[:1024]})
        return OPERATION_SUCCEEDED

    def _fence(self, _procs: Any, _nprocs: int, _info: Any, _ninfo: int, data: int | None, ndata: int,
               cbfunc: int, cbdata: int) -> int:
        raw = ctypes.string_at(data, ndata) if data and ndata else b""
        with self.lock:
            seq = self.fences
            self.fences += 1
            self.pending[seq] = (cbfunc, cbdata)
        self.say({"fence": seq, "data": base64.b64encode(raw).decode()})
        return SUCCESS

    def _dmodex(self, *_args: Any) -> int:
        return ERR_NOT_SUPPORTED  # fences collect every rank's data; nothing is fetched one by one

    # -- down: the fence's union, from srun through the agent ------------------------------------
    def complete(self, seq: int, data: bytes) -> None:
        with self.lock:
            cbfunc, cbdata = self.pending.pop(seq, (None, None))
        if cbfunc is None:
            return
        buffer = ctypes.create_string_buffer(data, len(data) or 1)
        self.kept.append(buffer)  # the library reads it after this call returns (it thread-shifts)
        MODEX_CB(cbfunc)(SUCCESS, ctypes.cast(buffer, ctypes.c_void_p), len(data), cbdata, None, None)

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> dict[int, dict[str, str]]:
        """Start the library and register the step: each local rank's environment."""
        spec = self.spec
        self.folder = tempfile.mkdtemp(prefix=f"pmix.{spec['job_id']}.{spec['step_id']}.",
                                       dir=spec.get("tmp_dir") or "/tmp")
        module = (ctypes.c_void_p * MODULE_SLOTS)()
        hooks = {FINALIZED: FINALIZED_FN(self._finalized), ABORT: ABORT_FN(self._abort),
                 FENCE_NB: FENCE_FN(self._fence), DIRECT_MODEX: DMODEX_FN(self._dmodex),
                 CONNECTED2: CONNECTED_FN(self._connected)}
        for slot, hook in hooks.items():
            module[slot] = ctypes.cast(hook, ctypes.c_void_p)
        self.kept += [module, *hooks.values()]
        init = (InfoList(self.lib).add("pmix.srvr.tmpdir", self.folder, STRING)
                .add("pmix.sys.tmpdir", self.folder, STRING).array())
        _check("PMIx_server_init", self.lib.PMIx_server_init(module, ctypes.c_void_p(init.array),
                                                             ctypes.c_size_t(init.size)))
        self._register_nspace()
        environments = {}
        for local_id, rank in enumerate(spec["layout"][spec["node"]]):
            proc = Proc(self.nspace, rank)
            self._blocking("PMIx_server_register_client", lambda cb, p=proc: self.lib.PMIx_server_register_client(
                ctypes.byref(p), int(spec["uid"]), int(spec["gid"]), None, cb, None))
            env = ctypes.POINTER(ctypes.c_char_p)()
            _check("PMIx_server_setup_fork", self.lib.PMIx_server_setup_fork(ctypes.byref(proc), ctypes.byref(env)))
            pairs = {}
            index = 0
            while env[index]:
                name, _, value = env[index].decode(errors="replace").partition("=")
                pairs[name] = value
                index += 1
            environments[local_id] = pairs
        return environments

    def _blocking(self, what: str, call: Any) -> None:
        """A registration the library completes through a callback: wait for it."""
        done, status = threading.Event(), [SUCCESS]

        def finished(code: int, _cbdata: Any) -> None:
            status[0] = code
            done.set()

        callback = OP_CB(finished)
        self.kept.append(callback)
        code = call(callback)
        if code == OPERATION_SUCCEEDED:
            return
        _check(what, code)
        if not done.wait(60):
            raise PmixError(f"{what}: no answer from the library within 60 s")
        _check(what, status[0])

    def _register_nspace(self) -> None:
        spec = self.spec
        layout: dict[str, list[int]] = spec["layout"]
        nodes = list(layout)
        ranks = sorted(r for tasks in layout.values() for r in tasks)
        local = layout[spec["node"]]
        where = {rank: (index, node, tasks.index(rank)) for index, (node, tasks) in enumerate(layout.items())
                 for rank in tasks}
        info = InfoList(self.lib)
        for key, value in (("pmix.univ.size", len(ranks)), ("pmix.job.size", len(ranks)),
                           ("pmix.local.size", len(local)), ("pmix.node.size", len(local)),
                           ("pmix.max.size", len(ranks)), ("pmix.app.size", len(ranks)),
                           ("pmix.num.nodes", len(nodes)), ("pmix.job.napps", 1)):
            info.add(key, value, UINT32)
        info.add("pmix.jobid", f"{spec['job_id']}.{spec['step_id']}", STRING)
        info.add("pmix.aldr", 0, PROC_RANK)
        info.add("pmix.nmap", ",".join(nodes), STRING)  # plain lists: the library parses them as such
        info.add("pmix.pmap", ";".join(",".join(str(r) for r in layout[n]) for n in nodes), STRING)
        info.add("pmix.anlmap", str(spec.get("anl_map", "")), STRING)
        info.add("pmix.lpeers", ",".join(str(r) for r in local), STRING)
        info.add("pmix.lldr", min(local), PROC_RANK)
        info.add("pmix.spawned", False, BOOL)
        info.add("pmix.tmpdir", self.folder, STRING)
        info.add("pmix.nsdir", self.folder, STRING)
        info.add("pmix.tdir.rmclean", True, BOOL)
        for rank in ranks:
            node_index, node, local_rank = where[rank]
            proc = (InfoList(self.lib).add("pmix.rank", rank, PROC_RANK).add("pmix.appnum", 0, UINT32)
                    .add("pmix.grank", rank, PROC_RANK).add("pmix.apprank", rank, PROC_RANK)
                    .add("pmix.lrank", local_rank, UINT16).add("pmix.nrank", local_rank, UINT16)
                    .add("pmix.hname", node, STRING).add("pmix.nodeid", node_index, UINT32).array())
            self.kept.append(proc)
            info.add("pmix.pdata", proc, DATA_ARRAY)
        array = info.array()
        self.kept.append(array)
        self._blocking("PMIx_server_register_nspace", lambda cb: self.lib.PMIx_server_register_nspace(
            self.nspace, len(local), ctypes.c_void_p(array.array), ctypes.c_size_t(array.size), cb, None))

    def stop(self) -> None:
        # no PMIx_server_finalize: with 4.2.2 it may wait for good once the clients are gone (a
        # futex wait, its progress thread ended), and this process ends right after, which releases
        # all the library holds; its files go with the folder
        shutil.rmtree(self.folder, ignore_errors=True)


def serve(spec: dict[str, Any], source: Any = None, out: Any = None) -> int:
    """The whole server's life: start, say each rank's environment, relay until input ends."""
    source = source or sys.stdin
    out = out or sys.stdout
    if not os.path.exists(MUNGE_SOCKET):
        out.write(json.dumps({"error": f"MUNGE is not running on this node (no {MUNGE_SOCKET}): PMIx clients "
                                       "prove who they are with it"}) + "\n")
        out.flush()
        return 1
    os.environ["PMIX_MCA_psec"] = "munge"  # noqa: SIM112 - PMIx spells its MCA names so; the only mechanism
    host = Host(spec, out)
    try:
        environments = host.start()
    except (OSError, PmixError) as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
        out.flush()
        return 1
    try:
        host.say({"env": {str(k): v for k, v in environments.items()}})
        for line in source:
            try:
                message = json.loads(line)
                if "ended" in message:
                    host.ended(int(message["ended"]))
                else:
                    host.complete(int(message["fence"]), base64.b64decode(message.get("data") or ""))
            except (ValueError, KeyError, TypeError):
                continue  # only the agent writes here; a line it did not mean is dropped
    finally:
        host.stop()
    return 0


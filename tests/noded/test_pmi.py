"""mpi/pmi2's server on its own: real PMI clients against two nodes' servers, their fences relayed
as srun relays them; hostile and broken clients end the step instead of hanging it or the agent."""

from __future__ import annotations

import asyncio
import ctypes.util
import os
import socket
import sys
from typing import Any

import pytest

from wattsched.plugins.mpi import StepInfo, process_mapping
from wattsched.plugins.mpi.pmi2 import MESSAGE_MAX, Pmi2Server

# Slurm's own PMI-2 client library (Debian's libpmi2-0): the PMI-2 wire as MPI libraries speak it
LIBPMI2 = ctypes.util.find_library("pmi2")
PMI2_CLIENT = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
spawned, size, rank, appnum = (ctypes.c_int() for _ in range(4))
assert lib.PMI2_Init(ctypes.byref(spawned), ctypes.byref(size), ctypes.byref(rank), ctypes.byref(appnum)) == 0
jobid = ctypes.create_string_buffer(256)
assert lib.PMI2_Job_GetId(jobid, 256) == 0
assert lib.PMI2_KVS_Put(f"key-{rank.value}".encode(), f"value;{rank.value}".encode()) == 0
assert lib.PMI2_KVS_Fence() == 0
other = (rank.value + 1) % size.value
value, length, found = ctypes.create_string_buffer(1024), ctypes.c_int(), ctypes.c_int()
assert lib.PMI2_KVS_Get(jobid, -1, f"key-{other}".encode(), value, 1024, ctypes.byref(length)) == 0
mapping = ctypes.create_string_buffer(1024)
assert lib.PMI2_Info_GetJobAttr(b"PMI_process_mapping", mapping, 1024, ctypes.byref(found)) == 0
print(rank.value, size.value, jobid.value.decode(), value.value.decode(), mapping.value.decode(), found.value)
assert lib.PMI2_Finalize() == 0
"""

LAYOUT = {"n01": [0, 1], "n02": [2, 3]}


class Step:
    """Two nodes' servers with srun's part between them: a fence's contributions from both, then
    the union to both; an abort from one to the other."""

    def __init__(self, layout: dict[str, list[int]]) -> None:
        self.layout = layout
        self.fences: dict[int, dict[str, dict[str, str]]] = {}
        self.aborts: list[tuple[str, str]] = []
        self.servers = {node: Pmi2Server(StepInfo(job_id=7, step_id=0, node=node, layout=layout,
                                                  send=lambda m, n=node: self._relay(n, m),
                                                  abort=lambda why, n=node: self.aborts.append((n, why))))
                        for node in layout}

    def _relay(self, node: str, message: dict[str, Any]) -> None:
        if message["pmi"] == "abort":  # srun ends the step's tasks on the other nodes
            self.aborts.extend((other, message["reason"]) for other in self.servers if other != node)
            return
        parts = self.fences.setdefault(message["seq"], {})
        parts[node] = message["kvs"]
        if len(parts) == len(self.servers):
            union = {k: v for kvs in parts.values() for k, v in kvs.items()}
            for server in self.servers.values():
                server.deliver({"pmi": "fence", "seq": message["seq"], "kvs": union})

    def tasks(self) -> list[tuple[str, int, dict[str, str], int]]:
        """(node, local id, environment, descriptor) of every task."""
        out = []
        for node, server in self.servers.items():
            for local_id in range(len(self.layout[node])):
                env, fd = server.task_setup(local_id)
                assert fd is not None
                out.append((node, local_id, env, fd))
        return out


def test_process_mapping_is_slurms() -> None:
    assert process_mapping({"a": [0, 1], "b": [2, 3]}) == "(vector,(0,2,2))"
    assert process_mapping({"a": [0, 2], "b": [1, 3]}) == "(vector,(0,2,1))"
    assert process_mapping({"a": [0, 1, 2], "b": [3, 4]}) == "(vector,(0,1,3),(1,1,2))"
    assert process_mapping({"a": [0]}) == "(vector,(0,1,1))"


@pytest.mark.skipif(LIBPMI2 is None, reason="Slurm's PMI-2 client library (Debian's libpmi2-0) is not installed")
def test_slurms_pmi2_library_exchanges_across_two_nodes() -> None:
    async def run() -> list[str]:
        step = Step(LAYOUT)
        procs = []
        for node, local_id, env, fd in step.tasks():
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-c", PMI2_CLIENT, str(LIBPMI2), pass_fds=(fd,),
                env=dict(os.environ, PMI_FD=str(fd), **env), stdout=asyncio.subprocess.PIPE))
            step.servers[node].task_started(local_id)
        outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
        assert [p.returncode for p in procs] == [0] * 4
        assert not step.aborts
        return sorted(out.decode().strip() for out, _ in outs)

    lines = asyncio.run(run())
    assert lines == [f"{r} 4 7.0 value;{(r + 1) % 4} (vector,(0,2,2)) 1" for r in range(4)]


class RawTask:
    """A task's end of its PMI connection, driven by hand."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=os.dup(fd))
        self.sock.settimeout(10)

    def ask(self, text: str) -> str:
        self.sock.sendall(text.encode())
        return self.sock.recv(65536).decode()


def test_pmi1_wire_and_its_refusals() -> None:
    async def run() -> None:
        step = Step({"n01": [0]})
        [(_node, _local, env, fd)] = step.tasks()
        task = RawTask(fd)  # the test's copy, as a task's
        step.servers["n01"].task_started(0)
        loop = asyncio.get_running_loop()

        async def ask(text: str) -> str:
            return await loop.run_in_executor(None, task.ask, text)

        assert env == {"PMI_JOBID": "7.0", "PMI_RANK": "0", "PMI_SIZE": "1"}
        assert await ask("cmd=init pmi_version=1 pmi_subversion=1\n") == \
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
        assert await ask("cmd=get_maxes\n") == "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"
        assert await ask("cmd=get_my_kvsname\n") == "cmd=my_kvsname rc=0 kvsname=7.0\n"
        assert await ask("cmd=put kvsname=7.0 key=a value=b\n") == "cmd=put_result rc=0\n"
        assert await ask(f"cmd=put kvsname=7.0 key={'k' * 65} value=b\n") == \
            "cmd=put_result rc=-1 msg=invalid_key_length\n"
        assert await ask("cmd=get kvsname=7.0 key=a\n") == "cmd=get_result rc=1\n"  # not before the fence
        assert await ask("cmd=barrier_in\n") == "cmd=barrier_out rc=0\n"
        assert await ask("cmd=get kvsname=7.0 key=a\n") == "cmd=get_result rc=0 value=b\n"
        assert await ask("cmd=get kvsname=7.0 key=PMI_process_mapping\n") == \
            "cmd=get_result rc=0 value=(vector,(0,1,1))\n"
        assert (await ask("mcmd=spawn\nnprocs=1\nexecname=/bin/sh\nendcmd\n")).startswith("cmd=spawn_result rc=-1")
        assert await ask("cmd=frobnicate\n") == "cmd=frobnicate_result rc=-1 msg=not_supported\n"
        assert await ask("cmd=finalize\n") == "cmd=finalize_ack rc=0\n"
        task.sock.close()
        await asyncio.sleep(0.05)
        assert not step.aborts  # finalised: its end is no failure

    asyncio.run(run())


@pytest.mark.parametrize("behaviour", ["dies", "aborts", "floods", "garbles"])
def test_a_broken_task_ends_the_step_on_every_node(behaviour: str) -> None:
    """One task of four fails while the others wait in a fence: the step ends on both nodes (no one
    waits for ever), and the server's memory stays bounded."""
    async def run() -> list[tuple[str, str]]:
        step = Step(LAYOUT)
        tasks = step.tasks()
        raw = [RawTask(fd) for *_rest, fd in tasks]
        for node, local_id, _env, _fd in tasks:
            step.servers[node].task_started(local_id)
        loop = asyncio.get_running_loop()
        for task in raw:
            await loop.run_in_executor(None, task.ask, "cmd=init pmi_version=1 pmi_subversion=1\n")
        for task in raw[:3]:
            task.sock.sendall(b"cmd=barrier_in\n")
        bad = raw[3]
        if behaviour == "dies":
            bad.sock.close()
        elif behaviour == "aborts":
            bad.sock.sendall(b"cmd=abort exitcode=3\n")
        elif behaviour == "floods":
            await loop.run_in_executor(None, bad.sock.sendall, b"x" * (MESSAGE_MAX + 10))
        else:
            bad.sock.sendall(b"cmd=put kvsname=7.0 key=a val")  # dies in the middle of a request
            bad.sock.close()
        for _ in range(200):
            if len(step.aborts) == 2:
                break
            await asyncio.sleep(0.01)
        return list(step.aborts)  # as it was when the step ended: its tasks are closed after

    aborts = asyncio.run(run())
    assert sorted(node for node, _why in aborts) == ["n01", "n02"], aborts

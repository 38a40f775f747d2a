"""The commands' lean start-up: what replaces a standard module on their path reads and writes exactly
what that module does, and the listing commands import none of the modules they were freed from."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import subprocess
import sys
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wattsched import auth, jsonwire
from wattsched.cli.common import query_string
from wattsched.usertext import printable

# what the listing commands were freed from (each costs a command 1-8 ms to import on a 2-core VM)
HEAVY = frozenset({"typing", "re", "json", "enum", "collections", "functools", "socket", "hashlib", "hmac",
                   "urllib.parse", "signal", "dataclasses", "contextlib", "shlex", "base64", "ipaddress", "orjson"})

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20)


@given(JSON)
def test_jsonwire_writes_and_reads_what_json_does(value: object) -> None:
    text = json.dumps(value, separators=(",", ":"))
    assert jsonwire.dumps(value) == text
    assert jsonwire.dumps(value, sort_keys=True) == json.dumps(value, separators=(",", ":"), sort_keys=True)
    assert jsonwire.loads(text) == json.loads(text)
    assert jsonwire.loads(f" \n{json.dumps(value, indent=2)}\t".encode()) == json.loads(text)


def test_jsonwire_refuses_what_json_refuses() -> None:
    for bad in ("", " ", "[1] x", "{", "nul", "[1,]", '{"a" 1}', "\ufeff[]", b"\xff"):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            jsonwire.loads(bad)
    assert math.isinf(jsonwire.loads("-Infinity")) and math.isnan(jsonwire.loads("NaN"))
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsonwire.dumps({"a": object()})
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        jsonwire.dumps(looped)
    assert jsonwire.dumps([[1], [1]]) == "[[1],[1]]"  # a refusal leaves nothing behind for the next call


@given(st.binary(max_size=200), st.binary(max_size=300))
def test_hmac_sha256_is_rfc_2104(key: bytes, message: bytes) -> None:
    assert auth.hmac_sha256(key, message) == hmac.new(key, message, hashlib.sha256).digest()


@given(st.dictionaries(st.text(min_size=1), st.none() | st.text() | st.integers()
                       | st.lists(st.text() | st.integers(), max_size=3), max_size=4))
def test_query_strings_are_urlencodes(params: dict) -> None:
    pairs = [(key, item) for key, value in params.items() if value is not None
             for item in (value if isinstance(value, list) else [value])]
    assert query_string(params) == urllib.parse.urlencode(pairs)


def test_printable_escapes_what_python_does_not_print_as_python_writes_it() -> None:
    """Controls, and the format characters and separators that reorder or break a terminal's line
    (U+202E, U+2028): each as repr writes it; every printable character as it is."""
    for code in range(0x110000):
        char = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        expected = char if char.isprintable() else repr(char)[1:-1]
        assert printable(f"a{char}b") == f"a{expected}b", hex(code)
    assert printable("x\u202ey\u2028z") == "x\\u202ey\\u2028z"


@pytest.mark.parametrize("module", ["wattsched.cli.squeue", "wattsched.cli.sinfo", "wattsched.cli.scontrol",
                                    "wattsched.cli.scancel", "wattsched.cli.sbatch", "wattsched.auth",
                                    "wattsched.service.authsocket"])
def test_the_commands_import_none_of_the_heavy_modules(module: str) -> None:
    """At import; tests/e2e/test_slurm_tools.py checks the same of whole calls against a cluster."""
    code = f"import sys; import {module}; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert not loaded & HEAVY, f"{module} imports {sorted(loaded & HEAVY)}"


def test_a_settings_cache_an_older_version_wrote_is_read_again(tmp_path, monkeypatch) -> None:
    """The commands keep the few settings they need in the user's cache, checked against the files'
    stamps; a cache written before a setting was added (KillOnBadExit) must not hide it."""
    from wattsched.cli import common

    conf = tmp_path / "wattsched.conf"
    conf.write_text(f"ClusterName=c\nSlurmctldHost=localhost\nStateSaveLocation={tmp_path}/ctld\n"
                    "KillOnBadExit=1\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    monkeypatch.setenv("WATTSCHED_CONF", str(conf))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert common.client_settings().kill_on_bad_exit is True  # parsed, and cached
    cache = common._cache_path(str(conf))
    with open(cache) as handle:
        data = json.loads(handle.read())
    del data["settings"]["kill_on_bad_exit"]
    data["settings"]["cluster_name"] = "from-the-cache"
    with open(cache, "w") as handle:
        handle.write(json.dumps(data))
    assert common.client_settings().kill_on_bad_exit is True  # the old cache is not taken
    data["settings"]["kill_on_bad_exit"] = True
    with open(cache, "w") as handle:
        handle.write(json.dumps(data))
    assert common.client_settings().cluster_name == "from-the-cache"  # a whole one is


@pytest.mark.parametrize(("answer", "body"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"job_id\":7}\n", b"{\"job_id\":7}\n"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"job_", None),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n", None),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n", b"hello!"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", None),
])
def test_an_answer_cut_short_is_no_answer(answer: bytes, body: bytes | None) -> None:
    """A controller killed while it answers leaves its headers and part of its body: the commands'
    HTTP exchange must not take that for an answer (sbatch would read a job id from an empty one),
    so the next controller is asked instead (Client._exchange goes on at a ValueError)."""
    import socket
    import threading

    from wattsched.cli.common import exchange

    server = socket.create_server(("127.0.0.1", 0))

    def answer_once() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)

    thread = threading.Thread(target=answer_once)
    thread.start()
    try:
        request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        if body is None:
            with pytest.raises(ValueError, match="truncated"):
                exchange("127.0.0.1", server.getsockname()[1], request, 10)
        else:
            assert exchange("127.0.0.1", server.getsockname()[1], request, 10) == (200, body)
    finally:
        thread.join()
        server.close()

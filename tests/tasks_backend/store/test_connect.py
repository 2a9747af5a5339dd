"""The store's connections pack commands with hiredis alone, byte for byte as redis-py's own packer would."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import redis

from tasks_backend.store import connect as connecting
from tasks_backend.store.connect import KernelTimeoutConnection, NativePacker, connect

pytestmark = pytest.mark.skipif(connecting.pack_command is None, reason="no hiredis packer to pack with")

ARGUMENTS: list[Any] = ["plain", "naïve ✓", b"\x00\xffbytes", 0, -7, 2**70, 0.1, 1e16, 1e-7, 1796421365385.574,
                        float("inf"), memoryview(b"view"), bytearray(b"array"), "", b""]


def ours() -> KernelTimeoutConnection:
    return KernelTimeoutConnection(io_timeout_s=1.0, decode_responses=True)


def name(value: Any) -> str:
    """A test id that is the same in every test process (a repr may hold an address)."""
    return f"{type(value).__name__}:{value!r}" if isinstance(value, (str, bytes, int, float)) else type(value).__name__


def wire(connection: redis.Connection, command: tuple[Any, ...]) -> bytes:
    """The bytes sent (redis-py's packer may hand a large or memoryview argument over as a buffer of its own)."""
    return b"".join(bytes(chunk) for chunk in connection.pack_command(*command))


def test_the_store_connection_packs_natively() -> None:
    assert isinstance(ours()._command_packer, NativePacker)


@pytest.mark.parametrize("value", ARGUMENTS, ids=name)
def test_packs_every_accepted_argument_as_redis_py_does(value: Any) -> None:
    command = ("HSET", "tb:{job}:job", "field", value)
    assert wire(ours(), command) == wire(redis.Connection(decode_responses=True), command)


def test_a_two_word_command_name_is_split_as_redis_py_splits_it() -> None:
    command = ("CONFIG GET", "maxmemory")
    packed = wire(ours(), command)
    assert packed == wire(redis.Connection(decode_responses=True), command)
    assert packed.startswith(b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n")


@pytest.mark.parametrize("value", [True, None, object()], ids=name)
def test_what_redis_py_refuses_is_refused_the_same_way(value: Any) -> None:
    with pytest.raises(redis.DataError):
        ours().pack_command("SET", "k", value)


def test_values_go_to_a_real_redis_and_back(redis_base: Any) -> None:
    client = connect(f"{redis_base}/14")
    assert isinstance(client.connection_pool.make_connection()._command_packer, NativePacker)  # type: ignore[attr-defined]
    try:
        client.hset("packed", mapping={"text": "naïve ✓", "int": 2**70, "float": 0.1, "big": 1e16})
        assert client.hgetall("packed") == {"text": "naïve ✓", "int": str(2**70), "float": "0.1", "big": "1e+16"}
        assert client.eval("return {ARGV[1], ARGV[2]}", 0, "ü", 12) == ["ü", "12"]
        with pytest.raises(redis.DataError):
            client.set("packed:bool", True)  # type: ignore[arg-type]
    finally:
        client.delete("packed")
        client.close()


def test_without_a_hiredis_packer_the_store_imports_and_packs_as_redis_py_does() -> None:
    probe = """
import hiredis
del hiredis.pack_command  # a hiredis that has no packer of its own
from tasks_backend.store.connect import KernelTimeoutConnection, NativePacker
packer = KernelTimeoutConnection(io_timeout_s=1.0)._command_packer
print(type(packer).__name__, isinstance(packer, NativePacker))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "False", done.stdout

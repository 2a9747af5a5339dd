"""A job's feed read with a blocking XREAD, on a Redis of the test's own whose own figures (`INFO clients`) are read.

A read cut short in the reader (as a web process's stop or a stream's client hanging up cuts it: an exception
raised into the read, which closes its connection) is over in Redis by the time the store's call has raised, so
that what the reader does next over another connection (giving back a stream slot) never finds it still on.

Redis sees a closed connection in its own time: it marks the client to be freed and frees it before it next
sleeps, so a command of another connection that Redis reads in the same round finds the read still counted. The
test makes that round happen every time: Redis is stopped (SIGSTOP) across the cut and resumed a moment later.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.store.connect import connect
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.keys import Keys
from tests.conftest import wait_until

#: How long Redis stays stopped across a cut: time for the reader's next command to reach it.
STOPPED_S = 0.2


class Cut(Exception):
    """Raised into a read, as `Interrupted` is by a web process's drain."""


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    started = EmbeddedRedis(appendonly=False).start()
    try:
        yield started
    finally:
        started.stop()


def blocked(observer: redis.Redis) -> int:
    return int(observer.info("clients")["blocked_clients"])


def cut_when_blocked(client: Any, observer: redis.Redis, stopping: EmbeddedRedis | None = None) -> None:
    """Make `client`'s XREADs fail as an interrupted one does: once Redis counts one blocked, its connection is
    closed and an exception raised in the reader (what a greenlet thrown into while reading goes through); with
    `stopping`, that Redis is stopped from just before the close until `STOPPED_S` later."""
    parse = client.parse_response

    def parse_then_cut(connection: Any, command_name: str, **options: Any) -> Any:
        if command_name != "XREAD":
            return parse(connection, command_name, **options)
        wait_until(lambda: blocked(observer) == 1, 5, interval=0.001, message="the read blocking")
        if stopping is not None and stopping.process is not None:
            os.kill(stopping.process.pid, signal.SIGSTOP)
            threading.Timer(STOPPED_S, os.kill, (stopping.process.pid, signal.SIGCONT)).start()
        connection.disconnect()
        raise Cut()

    client.parse_response = parse_then_cut


def test_a_read_cut_short_is_over_in_redis_when_the_store_raises(server: EmbeddedRedis) -> None:
    store = RedisStore(connect(server.url, 5.0), Keys("feeds-test"), max_ttl_ms=60_000)
    observer = redis.Redis.from_url(server.url, socket_timeout=5)
    cut_when_blocked(store.redis, observer, server)
    try:
        for _ in range(3):
            with pytest.raises(Cut):
                store.events("j1", "$", 4_000)
            assert blocked(observer) == 0, "the cut read still counted blocked after the store raised"
    finally:
        os.kill(server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    assert len(observer.client_list()) <= 3, observer.client_list()  # cut connections are gone, not kept


def test_after_a_redis_restart_a_cut_read_ends_its_own_connection_not_the_one_that_took_its_old_id(
        server: EmbeddedRedis) -> None:
    """Redis counts client ids from 1 again after a restart: the reader's id is asked again on its new connection,
    so the client that now holds its old id is left alone."""
    store = RedisStore(connect(server.url, 5.0), Keys("feeds-test"), max_ttl_ms=60_000)
    observer = redis.Redis.from_url(server.url, decode_responses=True)
    warm = [redis.Redis.from_url(server.url) for _ in range(5)]
    for client in warm:  # ids taken before the store's, so that it holds one the bystanders below reach
        client.ping()
    assert store.events("j1", "0-0", 10) == []
    old_id = next(int(c["id"]) for c in observer.client_list() if c["cmd"] == "xread")
    server.stop()
    server.start()
    bystanders = {}
    while not bystanders or max(bystanders) < old_id:
        bystander = redis.Redis.from_url(server.url)
        bystanders[int(bystander.client_id())] = bystander
    assert old_id in bystanders, (old_id, sorted(bystanders))
    cut_when_blocked(store.redis, observer)
    with pytest.raises(Cut):
        store.events("j1", "$", 4_000)
    assert bystanders[old_id].client_id() == old_id  # still its first connection: not killed in the reader's place


def append_once_reading(observer: redis.Redis, stream: str, reading: Callable[[], bool]) -> threading.Thread:
    """A thread that adds one entry (`running`) to `stream` once `reading()` says the store's read is blocked."""
    def append() -> None:
        wait_until(reading, 5, interval=0.001, message="the read blocking")
        observer.xadd(stream, {"s": "running", "u": "5"})

    writer = threading.Thread(target=append)
    writer.start()
    return writer


def client_calls(observer: redis.Redis) -> int:
    """CLIENT commands Redis has run (Redis 7 counts CLIENT ID apart, Redis 6.2 with the rest of CLIENT)."""
    stats = observer.info("commandstats")
    return int(stats.get("cmdstat_client|id", stats.get("cmdstat_client", {})).get("calls", 0))


def test_a_read_ended_by_redis_leaves_its_connection_to_serve_the_next(server: EmbeddedRedis) -> None:
    """A read whose block runs out or that an entry ends keeps its connection, whose client id is asked once."""
    store = RedisStore(connect(server.url, 5.0), Keys("feeds-test"), max_ttl_ms=60_000)
    observer = redis.Redis.from_url(server.url, decode_responses=True)
    assert store.events("j1", "0-0", 10) == []
    before = client_calls(observer)
    writer = append_once_reading(observer, store.keys.events("j1"), lambda: blocked(observer) == 1)
    events = store.events("j1", "0-0", 4_000)
    writer.join()
    assert [(e.state.value, e.updated_ms) for e in events] == [("running", 5)]
    assert client_calls(observer) == before  # the id was known from the first read
    readers = [c for c in observer.client_list() if c["cmd"] == "xread"]
    assert len(readers) == 1, readers  # the store's one connection served both reads


def test_where_the_acl_refuses_client_kill_a_cut_read_still_ends_with_the_reader_s_own_error(
        server: EmbeddedRedis) -> None:
    """A deployment whose Redis user lacks `CLIENT KILL`: the cut reader sees its own interruption (no Redis error
    in its place), and Redis ends the read when it sees the close."""
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("web", enabled=True, passwords=["+web-pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-client", "+client|id", "+client|setinfo", "+client|setname"])
    url = server.url.replace("redis://", "redis://web:web-pw@")
    store = RedisStore(connect(url, 5.0), Keys("feeds-test"), max_ttl_ms=60_000)
    with pytest.raises(redis.exceptions.NoPermissionError):
        store.redis.execute_command("CLIENT", "KILL", "ID", "1")
    cut_when_blocked(store.redis, admin)
    with pytest.raises(Cut):
        store.events("j1", "$", 4_000)
    wait_until(lambda: blocked(admin) == 0, 5, interval=0.001, message="Redis ending the read")

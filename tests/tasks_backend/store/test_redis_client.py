"""The store's client: a plain command's round trip without redis-py's metric hooks, with its pooling, retry,
RESP2 fallback and replies kept, against a real Redis."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.client

from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.store.connect import connect
from tasks_backend.store.redis_client import KEPT, StoreClient
from tests.conftest import wait_until


def kept(client: Any) -> list[Any]:
    """The connections the client keeps between its plain commands."""
    return list(client._kept)


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands redis-py's per-command metric hook was called for."""
    seen: list[str] = []
    monkeypatch.setattr(redis.client, "record_operation_duration",
                        lambda **kwargs: seen.append(kwargs["command_name"]))
    return seen


def test_plain_commands_answer_as_redis_pys_client_does_without_its_metric_hook(redis_base: Any,
                                                                                 hooks: list[str]) -> None:
    url = f"{redis_base}/14"
    ours, theirs = connect(url), redis.Redis.from_url(url, decode_responses=True)
    assert isinstance(ours, StoreClient)
    try:
        ours.delete("client:h", "client:z")
        assert ours.hset("client:h", mapping={"a": "1", "b": "ü"}) == 2
        expected = theirs.hgetall("client:h")
        hooks.clear()  # redis-py's own client calls it
        assert ours.hgetall("client:h") == expected == {"a": "1", "b": "ü"}
        assert ours.zadd("client:z", {"x": 1.5, "y": 2}) == 2
        assert ours.exists("client:h", "client:nothing") == 1 and ours.get("client:nothing") is None
        assert hooks == []
        # With options (the reply's shape) redis-py's own path answers, hook and all.
        assert ours.zrange("client:z", 0, -1, withscores=True) == [("x", 1.5), ("y", 2.0)]
        assert hooks == ["ZRANGE"]
    finally:
        ours.delete("client:h", "client:z")
        ours.close()
        theirs.close()


def test_a_connection_that_fails_under_a_command_is_dropped_and_the_command_sent_again(redis_base: Any) -> None:
    """The pool's check of a connection it hands out does not see a failure that comes while the command is on its
    way: the client's retry does, once, on a new connection, and the pool has every connection back."""
    client = connect(f"{redis_base}/14")
    pool: Any = client.connection_pool
    try:
        client.ping()
        (failing,) = kept(client)
        sent = failing.send_command
        failures: list[str] = []

        def fail_once(*args: Any, **kwargs: Any) -> None:
            if not failures:
                failures.append(str(args[0]))
                raise redis.ConnectionError("cut")
            sent(*args, **kwargs)

        failing.send_command = fail_once
        assert client.set("client:after", "1") is True
        assert failures == ["SET"] and client.get("client:after") == "1"
        assert kept(client) == [failing] and pool._in_use_connections == {failing}
    finally:
        client.delete("client:after")
        client.close()


def test_a_command_whose_reply_never_comes_raises_and_its_connection_is_kept_for_the_next(redis_base: Any) -> None:
    client = connect(f"{redis_base}/14")
    pool: Any = client.connection_pool
    try:
        client.ping()
        (connection,) = kept(client)

        def no_reply(*args: Any, **kwargs: Any) -> Any:
            raise redis.TimeoutError("no reply")

        connection.read_response = no_reply
        with pytest.raises(redis.TimeoutError):
            client.get("client:anything")
        assert kept(client) == [connection] and pool._in_use_connections == {connection}
    finally:
        client.close()


def test_on_a_server_that_refuses_resp3_plain_commands_are_parsed_as_resp2_replies(tmp_path: Path) -> None:
    """redis-py asks for RESP3 and falls back to RESP2 when HELLO is refused (a proxy, a renamed command): the
    replies' parsers are then RESP2's."""
    refusing = ("--rename-command", "HELLO", "")
    server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path), extra_args=refusing).start()
    client = connect(server.url)
    try:
        client.hset("fallback:h", mapping={"a": "1"})
        client.zadd("fallback:z", {"x": 1.5})
        assert kept(client)[0]._resp2_fallback
        assert client.hgetall("fallback:h") == {"a": "1"}
        assert client.zscore("fallback:z", "x") == 1.5
    finally:
        client.close()
        server.stop()


def test_at_most_kept_connections_stay_with_the_client_and_the_rest_go_back_to_the_pool(redis_base: Any) -> None:
    """Eight commands at once take eight connections; the client keeps `KEPT` of them for its next commands and
    hands the others back to the pool, and the pool counts only the kept ones as in use."""
    client = connect(f"{redis_base}/14")
    pool: Any = client.connection_pool
    lists = [f"client:wait:{i}" for i in range(8)]
    try:
        client.delete(*lists)
        threads = [threading.Thread(target=client.blpop, args=([name], 30)) for name in lists]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(pool._in_use_connections) == 8, 10, message="eight commands to wait at once")
        for name in lists:
            client.rpush(name, "go")
        for thread in threads:
            thread.join(10)
        assert len(kept(client)) == KEPT
        assert pool._in_use_connections == set(kept(client))
        assert len(pool._available_connections) == 8 + 1 - KEPT  # the ninth: the command that woke them
    finally:
        client.delete(*lists)
        client.close()


def test_a_forked_child_sends_its_commands_on_connections_of_its_own(redis_base: Any) -> None:
    """A connection kept by the parent is the parent's: the child's commands go over a new one, and the parent's
    stays as it was."""
    client = connect(f"{redis_base}/14")
    try:
        parent = client.client_id()
        (conn,) = kept(client)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report its connection's id, whatever happens
            try:
                os.write(write, str(client.client_id()).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            child = int(answer.read() or 0)
        os.waitpid(pid, 0)
        assert child and child != parent
        assert client.client_id() == parent and kept(client) == [conn]
    finally:
        client.close()


def test_closing_the_client_hands_its_kept_connections_back_to_the_pool(redis_base: Any) -> None:
    client = connect(f"{redis_base}/14")
    pool: Any = client.connection_pool
    client.ping()
    (conn,) = kept(client)
    client.close()
    assert kept(client) == [] and not pool._in_use_connections and conn in pool._available_connections


def test_a_kept_connection_that_cannot_be_made_again_goes_back_to_the_pool(tmp_path: Path) -> None:
    """Redis went away: the kept connection reads as closed, its new connect fails, and the pool has it back
    rather than counting it in use for good."""
    server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path)).start()
    client = connect(server.url)
    pool: Any = client.connection_pool
    try:
        client.ping()
        (conn,) = kept(client)
        server.stop()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert kept(client) == [] and not pool._in_use_connections and conn in pool._available_connections
    finally:
        client.close()
        server.stop()


def test_a_pool_other_than_redis_pys_plain_one_keeps_every_connection(redis_base: Any) -> None:
    """Sentinel's pool drops a connection to a demoted primary when it is handed back; such pools (any but
    redis-py's plain one) get every connection back after each command."""
    pool = redis.BlockingConnectionPool.from_url(f"{redis_base}/14", decode_responses=True, max_connections=1,
                                                 timeout=1)
    client = StoreClient(connection_pool=pool)
    try:
        assert client.ping() is True
        assert kept(client) == []
        pool.release(pool.get_connection())  # its one connection is there: a kept one would time this out
    finally:
        client.close()

"""The store's client: a plain command's round trip without redis-py's metric hooks, with its pooling, retry,
RESP2 fallback and replies kept, against a real Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import redis.client

from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.store.connect import connect
from tasks_backend.store.redis_client import StoreClient


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
        failing = pool._available_connections[0]
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
        assert not pool._in_use_connections and len(pool._available_connections) == 1
    finally:
        client.delete("client:after")
        client.close()


def test_a_command_whose_reply_never_comes_raises_and_its_connection_goes_back_to_the_pool(redis_base: Any) -> None:
    client = connect(f"{redis_base}/14")
    pool: Any = client.connection_pool
    try:
        client.ping()
        connection = pool._available_connections[0]

        def no_reply(*args: Any, **kwargs: Any) -> Any:
            raise redis.TimeoutError("no reply")

        connection.read_response = no_reply
        with pytest.raises(redis.TimeoutError):
            client.get("client:anything")
        assert not pool._in_use_connections and pool._available_connections == [connection]
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
        assert client.connection_pool._available_connections[0]._resp2_fallback  # type: ignore[attr-defined]
        assert client.hgetall("fallback:h") == {"a": "1"}
        assert client.zscore("fallback:z", "x") == 1.5
    finally:
        client.close()
        server.stop()

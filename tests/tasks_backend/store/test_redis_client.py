"""The store's client: a plain command's round trip without redis-py's metric hooks, with its pooling, retry and
replies kept, against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.client

from tasks_backend.devtools.embedded import free_port
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


def test_a_connection_killed_under_it_is_made_again_and_the_command_sent_again(redis_base: Any) -> None:
    url = f"{redis_base}/14"
    client, other = connect(url), redis.Redis.from_url(url)
    try:
        first = client.client_id()
        assert other.client_kill_filter(_id=first) == 1
        assert client.set("client:after", "1") is True  # the dead connection was dropped, a new one sent it
        assert client.client_id() != first
        pool: Any = client.connection_pool
        assert not pool._in_use_connections and len(pool._available_connections) == 1
    finally:
        client.delete("client:after")
        client.close()
        other.close()


def test_a_redis_that_is_not_there_raises_and_the_connection_goes_back_to_the_pool() -> None:
    client = connect(f"redis://127.0.0.1:{free_port()}/0", 0.5)
    try:
        with pytest.raises(redis.ConnectionError):
            client.get("anything")
        pool: Any = client.connection_pool
        assert not pool._in_use_connections
    finally:
        client.close()

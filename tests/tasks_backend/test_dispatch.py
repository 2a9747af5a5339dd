"""The direct Redis publisher writes exactly the message Celery's own publish would."""

from __future__ import annotations

import json
import secrets
from typing import Any

import redis

from tasks_backend.config import Settings
from tasks_backend.dispatch import RUN_TASK, CeleryDispatcher, RedisDispatcher
from tasks_backend.runtime import build_runtime


def _pop(client: redis.Redis, queue: str) -> dict[str, Any]:
    raw = client.rpop(queue)
    assert raw is not None
    return json.loads(raw)  # type: ignore[no-any-return]


def test_message_matches_celerys(settings: Settings) -> None:
    queue = f"shape-{secrets.token_hex(3)}"
    s = settings.with_(queue=queue)
    client = redis.Redis.from_url(s.effective_broker_url)
    job_id = "7f0c1d2e-3b4a-4c5d-8e6f-708192a3b4c5"
    CeleryDispatcher(s).publish(job_id, "demo.sleep")
    theirs = _pop(client, queue)
    RedisDispatcher(s, client, shares_store=False).publish(job_id, "demo.sleep")
    ours = _pop(client, queue)
    assert ours["body"] == theirs["body"]
    assert {k: ours[k] for k in ("content-type", "content-encoding")} == \
        {k: theirs[k] for k in ("content-type", "content-encoding")}
    differ = {"origin", "ignore_result"}
    assert {k: v for k, v in ours["headers"].items() if k not in differ} == \
        {k: v for k, v in theirs["headers"].items() if k not in differ}
    assert ours["headers"]["task"] == RUN_TASK and ours["headers"]["shadow"] == "demo.sleep"
    same = {"correlation_id", "delivery_mode", "delivery_info", "priority", "body_encoding"}
    assert {k: ours["properties"][k] for k in same} == {k: theirs["properties"][k] for k in same}


def test_submit_enqueues_in_the_same_round_trip_when_the_broker_is_the_store(settings: Settings) -> None:
    queue = f"inline-{secrets.token_hex(3)}"
    # On one Redis (the broker's, when the suite's store is a cluster, which cannot be a broker).
    runtime = build_runtime(settings.with_(queue=queue, redis_url=settings.effective_broker_url, broker_url=None))
    assert isinstance(runtime.dispatcher, RedisDispatcher) and runtime.dispatcher.shares_store
    record, _ = runtime.service.submit("alice", "test.noop", {})
    message = _pop(runtime.store.redis, queue)
    assert message["headers"]["id"] == record.id
    keyed, _ = runtime.service.submit("alice", "test.noop", {}, idempotency_key=secrets.token_hex(4))
    assert _pop(runtime.store.redis, queue)["headers"]["id"] == keyed.id

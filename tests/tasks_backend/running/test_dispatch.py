"""The direct Redis publisher writes exactly the message Celery's own publish would."""

from __future__ import annotations

import base64
import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from tasks_backend.config import Settings
from tasks_backend.errors import IdempotencyConflict
from tasks_backend.model.domain import SubmitOutcome
from tasks_backend.running.dispatch import RUN_TASK, CeleryDispatcher, RedisDispatcher
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import build_runtime
from tests.conftest import make_settings


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


@pytest.mark.parametrize("operation", ["demo.sleep", 'quote"and\\back%(id)s%%', "naïve.✓"])
def test_a_message_is_written_from_its_template_as_json_would_write_it(settings: Settings, operation: str) -> None:
    dispatcher = RedisDispatcher(settings, redis.Redis.from_url(settings.effective_broker_url), shares_store=False)
    job_id = f"job-{secrets.token_hex(4)}"
    first, second = (json.loads(dispatcher.message(job_id, operation)) for _ in range(2))
    assert json.loads(base64.b64decode(first["body"])) == [[job_id], {}, {"callbacks": None, "errbacks": None,
                                                                         "chain": None, "chord": None}]
    headers = first["headers"]
    assert (headers["id"], headers["root_id"], headers["shadow"]) == (job_id, job_id, operation)
    assert headers["argsrepr"] == f"[{operation!r}, {job_id!r}]" and headers["task"] == RUN_TASK
    assert first["properties"]["correlation_id"] == job_id
    assert first["properties"]["delivery_tag"] != second["properties"]["delivery_tag"]
    assert {k: v for k, v in first.items() if k != "properties"} == {k: v for k, v in second.items()
                                                                      if k != "properties"}


class RoundTrips:
    """Counts what this thread sends to Redis in one write (a command, or a whole pipeline), and the scripts in it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count, self.scripts, thread = 0, 0, threading.get_ident()
        original = AbstractConnection.send_packed_command

        def send(conn: Any, command: Any, check_health: bool = True) -> None:
            if threading.get_ident() == thread:
                self.count += 1
                chunks = [command] if isinstance(command, (bytes, str)) else command
                self.scripts += sum(bytes(c).count(b"\r\nEVALSHA\r\n") for c in chunks if isinstance(c, bytes))
            original(conn, command, check_health)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", send)

    def of(self, call: Callable[[], Any]) -> int:
        before = self.count
        call()
        return self.count - before


def _inline_service(settings: Settings) -> tuple[JobService, redis.Redis, str]:
    """The store and the broker on one Redis (the broker's, when the suite's store is a cluster, which cannot
    be a broker), without the limits (whose own round trips are not what is counted here)."""
    queue = f"inline-{secrets.token_hex(3)}"
    # Keys of its own too: the dispatch gate of the suite's keys counts the suite worker's jobs in flight.
    runtime = build_runtime(settings.with_(queue=queue, key_prefix=queue, redis_url=settings.effective_broker_url,
                                           broker_url=None))
    assert isinstance(runtime.dispatcher, RedisDispatcher) and runtime.dispatcher.shares_store
    service = JobService(runtime.store, runtime.registry, runtime.dispatcher, runtime.settings)
    service.submit("alice", "test.noop", {})  # loads the scripts
    runtime.store.redis.delete(queue)
    return service, runtime.store.redis, queue


def test_a_submit_with_or_without_a_key_enqueues_in_its_one_round_trip(settings: Settings,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    service, client, queue = _inline_service(settings)
    trips = RoundTrips(monkeypatch)
    made: list[str] = []
    assert trips.of(lambda: made.append(service.submit("alice", "test.noop", {})[0].id)) == 1
    assert _pop(client, queue)["headers"]["id"] == made[-1]
    key = secrets.token_hex(4)
    assert trips.of(lambda: made.append(service.submit("alice", "test.noop", {}, idempotency_key=key)[0].id)) == 1
    assert _pop(client, queue)["headers"]["id"] == made[-1]
    # The same key again: the job already made, and no second message.
    again, outcome = service.submit("alice", "test.noop", {}, idempotency_key=key)
    assert (again.id, outcome) == (made[-1], SubmitOutcome.EXISTING) and client.llen(queue) == 0
    # Each was one script in Redis: the record, the owner index, the idempotency key, the sweep entry and the push.
    scripts = trips.scripts
    service.submit("alice", "test.noop", {}, idempotency_key=secrets.token_hex(4))
    assert trips.scripts - scripts == 1
    # Both pushes were counted next to the queue, and the counter expires like every key.
    counter = service.store.keys.queue_pushes(queue)
    assert int(client.get(counter) or 0) >= 2 and int(client.pttl(counter)) > 0


def test_a_job_that_loses_its_idempotency_key_is_never_enqueued(settings: Settings) -> None:
    """The key is held by another request (its job not yet readable): the job written here is discarded,
    and its message, which rode in the same round trip, was never pushed."""
    service, client, queue = _inline_service(settings)
    key = secrets.token_hex(4)
    client.set(service.store.keys.idempotency("alice", key), "another-request-job somehash", px=60_000)
    with pytest.raises(IdempotencyConflict):
        service.submit("alice", "test.noop", {}, idempotency_key=key)
    assert client.llen(queue) == 0
    # Once that request's key is gone, the same submit goes through and is enqueued once.
    client.delete(service.store.keys.idempotency("alice", key))
    record, outcome = service.submit("alice", "test.noop", {}, idempotency_key=key)
    assert outcome is SubmitOutcome.CREATED and client.llen(queue) == 1
    assert _pop(client, queue)["headers"]["id"] == record.id


def test_the_gate_publishes_what_it_released_by_operation_whatever_the_entry_kept(redis_base: str) -> None:
    """An entry keeps a broker message (written where the gate pushes itself), an operation, or nothing (dropped):
    a process that publishes through its dispatcher publishes each as its operation, read from the record when
    the entry kept nothing; a job gone since is skipped."""
    from tasks_backend.running.admission import DispatchGate

    s = make_settings(redis_base)
    queue = s.queue
    runtime = build_runtime(s)
    client = redis.Redis.from_url(s.effective_broker_url)
    dispatcher = RedisDispatcher(s, client, shares_store=False)
    record, _ = runtime.service.submit("alice", "demo.sleep", {"seconds": 0})
    client.delete(queue)
    gate = DispatchGate(runtime.store, dispatcher, s)
    gate.publish([("job-a", dispatcher.message("job-a", "demo.sleep")), ("job-b", "demo.sleep"), (record.id, ""),
                  ("gone", "")])
    published = [_pop(client, queue) for _ in range(3)]
    assert client.llen(queue) == 0
    assert [(m["headers"]["id"], m["headers"]["shadow"]) for m in published] == [
        ("job-a", "demo.sleep"), ("job-b", "demo.sleep"), (record.id, "demo.sleep")]


@pytest.mark.parametrize("fair_shares", [True, False], ids=["through-the-gate", "straight"])
def test_a_push_counter_made_again_gets_its_ttl_whichever_push_makes_it(settings: Settings, fair_shares: bool) -> None:
    """The counter's TTL is renewed once a minute per process, with a push; a push that finds the counter gone (it
    expired, or was never made) gives it one between renewals too, in a submit, through the gate, or published."""
    service, client, queue = _inline_service(settings.with_(fair_shares=fair_shares))
    dispatcher = service.dispatcher
    assert isinstance(dispatcher, RedisDispatcher)
    counter = service.store.keys.queue_pushes(queue)
    for push in (lambda: service.submit("alice", "test.noop", {}),
                 lambda: dispatcher.publish(secrets.token_hex(8), "test.noop"),
                 lambda: dispatcher.publish(secrets.token_hex(8), "test.noop", countdown_s=60)):
        client.delete(counter)
        dispatcher.counter_ttl_due()  # renewed just now: the next push is not due to renew it
        push()
        assert int(client.get(counter) or 0) == 1 and int(client.pttl(counter)) > 0


def test_the_bypass_lists_push_counter_made_again_gets_its_ttl_between_renewals(settings: Settings) -> None:
    """A lone owner's job past the slots is pushed onto the bypass list in its submit and counted there
    (`Keys.bypass_queue`, the sweeper's count for such jobs): a push that finds that counter gone gives it a TTL
    too, as the queue's own counter gets one."""
    service, client, queue = _inline_service(settings.with_(fair_shares=True, dispatch_slots=1))
    dispatcher = service.dispatcher
    assert isinstance(dispatcher, RedisDispatcher)
    bypass = service.store.keys.bypass_queue(queue)
    counter = service.store.keys.queue_pushes(bypass)
    assert counter == dispatcher.bypass_pushes_key
    for _ in range(2):  # the one slot is taken by the job `_inline_service` submitted: both go past the gate
        client.delete(counter)
        dispatcher.counter_ttl_due()  # renewed just now: the next push is not due to renew it
        service.submit("alice", "test.noop", {})
        assert client.llen(bypass) > 0 and int(client.get(counter) or 0) == 1 and int(client.pttl(counter)) > 0
    client.delete(bypass)

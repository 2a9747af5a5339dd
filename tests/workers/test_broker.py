"""Which broker transport a worker uses (its behaviour on a lost broker: tests/workers/test_durability.py)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import redis

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.running.dispatch import CeleryDispatcher
from tasks_backend.running.execution import worker_name
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import make_settings, single_redis, wait_until
from tests.support.procs import worker_process
from tests.support.sentinel import SERVICE, SentinelGroup
from workers import broker
from workers.broker import (
    FETCH_CLAIM,
    SENTINEL_TRANSPORT,
    TRANSPORT,
    Channel,
    SentinelChannel,
    fetch_claim_options,
    worker_transport,
)
from workers.celery_app import create_celery


def noop_job(redis_base: str) -> tuple[Settings, Runtime, JobRecord]:
    """A deployment of its own (no worker consumes its queue) and one no-op job submitted to it."""
    settings = make_settings(single_redis(redis_base))
    runtime = build_runtime(settings)
    return settings, runtime, runtime.service.submit("alice", "test.noop", {})[0]


def test_plain_redis_brokers_get_the_worker_transport_and_others_keep_kombus() -> None:
    assert worker_transport("redis://127.0.0.1:6379/0") == TRANSPORT
    assert worker_transport("rediss://cache.example:6380/0?ssl_cert_reqs=required") is None
    assert worker_transport("sentinel://127.0.0.1:26379/0;sentinel://127.0.0.1:26380/0") == SENTINEL_TRANSPORT
    assert worker_transport("amqp://guest@127.0.0.1//") is None


def test_only_the_worker_app_uses_it(redis_base: str) -> None:
    settings = make_settings(single_redis(redis_base))
    assert create_celery(settings).conf.broker_transport == TRANSPORT
    assert create_celery(settings, consumer=False).conf.broker_transport is None


@pytest.mark.parametrize("consumer", [True, False], ids=["worker", "kombu"])
def test_a_channel_whose_connection_was_collected_raises_a_connection_error(redis_base: str, consumer: bool) -> None:
    """Celery collects the connection on a connection error, then closes it; the close restores unacked
    messages, which needs a connection. Raise what Celery ignores before it reconnects, not an
    AttributeError that stops the worker (as kombu's own transport does: the second case; when that case
    fails, kombu has fixed it and workers/broker.py can go)."""
    app = create_celery(make_settings(single_redis(redis_base)), consumer=consumer)
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        assert isinstance(channel, Channel) is consumer
        conn.collect()
        expected = redis.ConnectionError if consumer else AttributeError
        with pytest.raises(expected):
            channel.qos.restore_unacked()


@pytest.mark.parametrize("consumer", [True, False], ids=["worker", "kombu"])
def test_the_same_holds_for_a_sentinel_broker(sentinel_group: SentinelGroup, consumer: bool) -> None:
    """kombu's Sentinel channel builds its pool from the connection the same way (the second case
    shows it still does)."""
    settings = make_settings("unused", redis_url=sentinel_group.url(), redis_service=SERVICE)
    app = create_celery(settings, consumer=consumer)
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        assert isinstance(channel, SentinelChannel) is consumer
        channel.client.ping()  # through the Sentinels to the primary
        conn.collect()
        expected = redis.ConnectionError if consumer else AttributeError
        with pytest.raises(expected):
            channel.qos.restore_unacked()


def test_the_worker_channel_keeps_one_client_per_connection_pool(redis_base: str) -> None:
    """Building a redis-py client costs tens of microseconds, and kombu builds one for each ack-bookkeeping
    command; the worker's channel builds one per pool, and a new one when its pool is replaced."""
    app = create_celery(make_settings(single_redis(redis_base)))
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        with channel.conn_or_acquire() as client:
            assert client is first and client.ping()
        channel._pool = None  # as after a reconnection
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool and second.ping()
        assert channel._create_client(asynchronous=True) is not second


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_message_that_is_not_json_is_dropped_and_the_worker_runs_on(redis_base: str, tmp_path: Path,
                                                                      pool: str) -> None:
    """kombu decodes each message it pops; one that is not JSON ('' or an operation's name) used to end the worker
    with "Unrecoverable error". It is dropped, and the jobs behind it run."""
    settings = make_settings(single_redis(redis_base))
    runtime = build_runtime(settings)
    broker = redis.Redis.from_url(settings.effective_broker_url)
    broker.lpush(settings.queue, "", "test.noop", "{not json")
    record, _ = runtime.service.submit("alice", "test.noop", {})
    proc = worker_process(settings, tmp_path / "worker.log", pool=pool)
    try:
        wait_until(lambda: runtime.store.get(record.id).state is JobState.COMPLETED,  # type: ignore[union-attr]
                   timeout=30, message="the job behind the bad messages ran")
        assert proc.alive()
        assert "was dropped" in proc.output()
    finally:
        proc.stop()


def test_a_job_message_is_claimed_in_its_fetch_and_kept_for_a_restore_without_the_claim(redis_base: str) -> None:
    """The broker is the store's Redis: the fetch's late-ack bookkeeping and the job's claim are one call, the
    claim rides to the run in a header, and the run makes no claim of its own (one claim, one attempt). What
    kombu keeps to restore the message, should the worker be lost, carries no claim: it is claimed again."""
    settings, runtime, record = noop_job(redis_base)
    app = create_celery(settings)
    with app.connection_for_read() as conn:
        message = conn.SimpleQueue(settings.queue).get(timeout=5)
        job_id, reply = message.headers[FETCH_CLAIM]
        assert job_id == record.id and reply[0] == "ok"
        claimed = runtime.store.get(record.id)
        assert claimed is not None and claimed.state is JobState.RUNNING and claimed.attempts == 1
        assert runtime.store.redis.hget(runtime.store.keys.job(record.id), "worker") == worker_name()
        kept, _, _ = json.loads(conn.default_channel.client.hget("unacked", message.delivery_tag))
        assert FETCH_CLAIM not in kept["headers"] and kept["headers"]["id"] == record.id
        assert runtime.executor().run(record.id, reply) == "completed"
        message.ack()
    done = runtime.store.get(record.id)
    assert done is not None and done.state is JobState.COMPLETED and done.attempts == 1


def test_a_message_held_for_later_is_claimed_by_its_run_and_other_brokers_claim_nothing_in_the_fetch(
        redis_base: str) -> None:
    settings, runtime, record = noop_job(redis_base)
    runtime.store.redis.delete(settings.queue)
    CeleryDispatcher(settings).publish(record.id, "test.noop", countdown_s=30)
    with create_celery(settings).connection_for_read() as conn:
        message = conn.SimpleQueue(settings.queue).get(timeout=5)
        assert message.headers["eta"] and FETCH_CLAIM not in message.headers
        queued = runtime.store.get(record.id)
        assert queued is not None and queued.state is JobState.QUEUED and queued.attempts == 0
        message.ack()
    assert fetch_claim_options(settings)
    assert not fetch_claim_options(settings.with_(broker_url=f"{redis_base}/13"))  # not the store's database
    assert not fetch_claim_options(settings.with_(broker_url="amqp://guest@127.0.0.1//"))


@pytest.mark.parametrize("flag", ["should_stop", "should_terminate"])
def test_a_message_fetched_once_the_worker_is_stopping_is_not_claimed(redis_base: str, flag: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch under way when a stop came brings a message in that no run will take: its job stays queued,
    claimable at once by the next worker (claimed, it would wait out a lease)."""
    from celery.worker import state

    settings, runtime, record = noop_job(redis_base)
    # The transport's view of Celery's stop flags, not Celery's own: set there, they would stop the suite's worker
    # if one runs in this process. A warm stop's exit code is 0: set, though falsy.
    assert getattr(state, flag) is None
    stopping = types.SimpleNamespace(should_stop=None, should_terminate=None)
    setattr(stopping, flag, 0)
    monkeypatch.setattr(broker, "worker_state", stopping)
    with create_celery(settings).connection_for_read() as conn:
        message = conn.SimpleQueue(settings.queue).get(timeout=5)
        assert FETCH_CLAIM not in message.headers and message.headers["id"] == record.id
        queued = runtime.store.get(record.id)
        assert queued is not None and queued.state is JobState.QUEUED and queued.attempts == 0
        message.ack()


def test_an_ack_rides_with_the_next_claim_and_the_last_goes_alone_when_the_channel_closes(redis_base: str) -> None:
    """A claimed message's ack is taken off Redis by the next fetch's claim (one round trip per job, not two); the
    acks still waiting when the channel closes go alone, so nothing acked is ever restored."""
    settings = make_settings(single_redis(redis_base))
    runtime = build_runtime(settings)
    for _ in range(2):
        runtime.service.submit("alice", "test.noop", {})
    raw = redis.Redis.from_url(settings.redis_url)

    def kept(tag: str) -> bool:
        return bool(raw.hexists("unacked", tag)) or raw.zscore("unacked_index", tag) is not None

    with create_celery(settings).connection_for_read() as conn:
        queue = conn.SimpleQueue(settings.queue)
        one = queue.get(timeout=5)
        assert runtime.executor().run(*one.headers[FETCH_CLAIM]) == "completed"
        one.ack()
        assert kept(one.delivery_tag), "the ack went alone"
        two = queue.get(timeout=5)
        assert not kept(one.delivery_tag) and kept(two.delivery_tag)
        assert runtime.executor().run(*two.headers[FETCH_CLAIM]) == "completed"
        two.ack()
    assert not kept(two.delivery_tag)


def test_a_worker_with_nothing_more_to_fetch_takes_its_acks_off_at_once(redis_base: str, tmp_path: Path) -> None:
    settings, runtime, record = noop_job(redis_base)
    raw = redis.Redis.from_url(settings.redis_url)
    proc = worker_process(settings, tmp_path / "worker.log")
    try:
        wait_until(lambda: runtime.store.get(record.id).state is JobState.COMPLETED,  # type: ignore[union-attr]
                   timeout=30, message="the job to run")
        wait_until(lambda: not any(record.id.encode() in v for v in raw.hvals("unacked")), timeout=5,
                   message="the message's ack to reach Redis while the worker waits for more")
        assert proc.alive()
    finally:
        proc.stop()


def test_a_message_whose_ack_was_lost_with_its_worker_is_restored_and_does_not_run_its_job_again(
        redis_base: str) -> None:
    settings, runtime, record = noop_job(redis_base)
    app = create_celery(settings)
    with app.connection_for_read() as lost:
        message = lost.SimpleQueue(settings.queue).get(timeout=5)
        assert runtime.executor().run(*message.headers[FETCH_CLAIM]) == "completed"
        message.ack()
        lost.default_channel.qos._acked.clear()  # the worker dies before its ack reaches Redis
    with app.connection_for_read() as conn:
        conn.default_channel.qos.restore_by_tag(message.delivery_tag)  # what the visibility timeout does
        again = conn.SimpleQueue(settings.queue).get(timeout=5)
        assert again.headers["id"] == record.id and again.headers[FETCH_CLAIM][1][0] == "terminal"
        assert runtime.executor().run(*again.headers[FETCH_CLAIM]) == "terminal"
        again.ack()
    done = runtime.store.get(record.id)
    assert done is not None and done.state is JobState.COMPLETED and done.attempts == 1

"""The store behind Redis Sentinel: addresses, settings, following the primary across a failover, and
a submit that waits for a replica (`WAIT`). The broker side is in tests/workers/test_failover.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis.sentinel import SentinelConnectionPool

from tasks_backend import Principal
from tasks_backend.config import Settings
from tasks_backend.errors import JobNotFound, StoreUnavailable
from tasks_backend.model.domain import JobState
from tasks_backend.running.dispatch import RedisDispatcher, celery_config
from tasks_backend.service.runtime import Runtime, build_runtime, make_dispatcher
from tasks_backend.store.connect import NativePacker, connect
from tasks_backend.store.sentinel import parse, sentinel_url
from tests.conftest import make_settings, wait_until
from tests.support.sentinel import SERVICE, SentinelGroup

ALICE = Principal("alice")


def test_sentinel_addresses_become_the_url_celery_takes_and_back() -> None:
    url = sentinel_url(["10.0.0.1:26379", "10.0.0.2:26380"], db=3)
    assert url == "sentinel://10.0.0.1:26379/3;sentinel://10.0.0.2:26380/3"
    assert parse(url) == ([("10.0.0.1", 26379), ("10.0.0.2", 26380)], 3, None, None)
    assert parse("sentinel://:s%40cret@a:1/2;sentinel://b") == ([("a", 1), ("b", 26379)], 2, None, "s@cret")
    with pytest.raises(ValueError):
        parse("redis://a:1/0;sentinel://b:2/0")


def test_sentinels_in_the_environment_set_the_store_the_broker_and_a_replica_per_submit() -> None:
    env = {"TASKS_BACKEND_REDIS_SENTINELS": "10.0.0.1:26379, 10.0.0.2:26379", "TASKS_BACKEND_REDIS_SERVICE": "jobs"}
    settings = Settings.from_env(env)
    assert settings.redis_url == "sentinel://10.0.0.1:26379/0;sentinel://10.0.0.2:26379/0"
    assert settings.effective_broker_url == settings.redis_url
    assert settings.redis_service == "jobs"
    assert settings.submit_replicas == 1
    options = celery_config(settings)["broker_transport_options"]
    assert options["master_name"] == "jobs" and options["sentinel_kwargs"]["socket_timeout"] > 0
    assert Settings.from_env({**env, "TASKS_BACKEND_SUBMIT_REPLICAS": "0"}).submit_replicas == 0
    # One Redis has no replica to wait for.
    plain = Settings.from_env({"REDIS_URL": "redis://10.0.0.1:6379/0"})
    assert plain.submit_replicas == 0 and "master_name" not in celery_config(plain)["broker_transport_options"]


def runtime_on(group: SentinelGroup, **overrides: object) -> Runtime:
    values: dict[str, object] = {"redis_service": SERVICE, "redis_socket_timeout_s": 1.0, "submit_replicas": 1,
                                 "submit_replicas_timeout_s": 0.3}
    values.update(overrides)
    return build_runtime(make_settings("unused", redis_url=group.url(), **values))


@pytest.mark.chaos
def test_the_store_follows_the_primary_across_a_failover(sentinel_group: SentinelGroup) -> None:
    group = sentinel_group
    rt = runtime_on(group)
    pool: Any = rt.store.redis.connection_pool
    assert isinstance(pool.make_connection()._command_packer, NativePacker)  # the primary's, packed as on one server
    before, _ = rt.service.submit(ALICE, "test.noop")
    old = group.kill_primary()
    # The Sentinels need `down-after-milliseconds` to agree it is gone: meanwhile calls fail fast.
    with pytest.raises(StoreUnavailable):
        rt.service.get(ALICE, before.id)
    new = group.wait_promoted(old)
    assert new != old

    def answers() -> bool:
        try:
            return rt.service.get(ALICE, before.id).state is JobState.QUEUED
        except StoreUnavailable:
            return False

    wait_until(answers, 15, message="the store to find the new primary")  # the job waited for: still there
    # The new primary has no replica to wait for until the old one is back (restarted, as by its supervisor),
    # which the Sentinels then make a replica of it.
    with pytest.raises(StoreUnavailable):
        rt.service.submit(ALICE, "test.noop")
    group.server_on(old).start()
    wait_until(lambda: group.server_on(new).replicas_online() == 1, 30, message="the old primary to replicate")
    after, _ = rt.service.submit(ALICE, "test.noop")
    assert {r.id for r in rt.service.list(ALICE)[0]} == {before.id, after.id}
    assert rt.store.redis.connection_pool.get_master_address()[1] == new


@pytest.mark.chaos
def test_a_submit_no_replica_acknowledges_is_refused_and_nothing_of_it_stays(sentinel_group: SentinelGroup) -> None:
    group = sentinel_group
    rt = runtime_on(group)
    kept, _ = rt.service.submit(ALICE, "test.noop")
    replica = group.server_on(group.replica_port())
    replica.kill()
    with pytest.raises(StoreUnavailable):
        rt.service.submit(ALICE, "test.noop", idempotency_key="k1")
    assert [r.id for r in rt.service.list(ALICE)[0]] == [kept.id]
    # Its retry, once a replica is back, is a fresh submit that the key leads to, not a 409 or a lost job.
    replica.start()
    primary = group.server_on(group.primary_port())
    wait_until(lambda: primary.replicas_online() == 1, 15, message="the replica back")
    again, _ = rt.service.submit(ALICE, "test.noop", idempotency_key="k1")
    assert [r.id for r in rt.service.list(ALICE)[0]] == [again.id, kept.id]
    # Without the wait a submit is answered whatever the replicas hold.
    replica.kill()
    unwaited = runtime_on(group, submit_replicas=0)
    lone, _ = unwaited.service.submit(ALICE, "test.noop")
    assert unwaited.service.get(ALICE, lone.id).state is JobState.QUEUED


@pytest.mark.chaos
def test_without_the_wait_a_submit_answered_before_the_failover_can_be_lost(tmp_path: Path) -> None:
    """The replica falls behind (what its primary sends is held back), then the primary dies and the replica
    is promoted. A submit that did not wait was answered and is gone; one that waits for the replica was
    refused instead, so its caller knows to retry."""
    group = SentinelGroup(tmp_path / "sentinel", linked=True)
    try:
        group.start()
        assert group.link is not None
        waiting = runtime_on(group)
        answering = build_runtime(waiting.settings.with_(submit_replicas=0))  # the same keys
        kept, _ = waiting.service.submit(ALICE, "test.noop")
        group.link.hold()
        with pytest.raises(StoreUnavailable):
            waiting.service.submit(ALICE, "test.noop")
        lost, _ = answering.service.submit(ALICE, "test.noop")
        assert answering.service.get(ALICE, lost.id).state is JobState.QUEUED  # answered, on the primary
        group.wait_promoted(group.kill_primary())

        def listed() -> list[str] | None:
            try:
                return [r.id for r in answering.service.list(ALICE)[0]]
            except StoreUnavailable:
                return None

        assert wait_until(lambda: listed() is not None, 15, message="the promoted replica to answer")
        assert listed() == [kept.id]
        with pytest.raises(JobNotFound):
            answering.service.get(ALICE, lost.id)
    except BaseException:
        print(group.logs())
        raise
    finally:
        group.stop()


def test_a_sentinel_broker_of_its_own_gets_a_client_of_its_own_primary() -> None:
    """Store and broker behind the same Sentinels, in different databases: submits publish through a
    Sentinel-managed client of the broker's database (nothing is contacted until the first command)."""
    store, broker = sentinel_url(["127.0.0.1:1"], 0), sentinel_url(["127.0.0.1:1"], 1)
    settings = make_settings("unused", redis_url=store, broker_url=broker, redis_service="jobs")
    dispatcher = make_dispatcher(settings, connect(store, service="jobs"))
    assert isinstance(dispatcher, RedisDispatcher) and not dispatcher.shares_store
    pool = dispatcher.broker.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "jobs"
    assert pool.connection_kwargs["db"] == 1
    shared = make_dispatcher(settings.with_(broker_url=None), connect(store, service="jobs"))
    assert isinstance(shared, RedisDispatcher) and shared.shares_store  # one round trip per submit, as with redis://

"""Push-notification configs, the target guard, and delivery with retries.

Real Redis, a real worker running the jobs, and a real webhook receiver on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.a2a.push import Contexts, normalize_config
from adapters.protocol import push_formats
from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.receivers import Receiver
from tasks_backend.errors import InvalidParams
from tasks_backend.push.delivery import PushDeliverer, backoff_ms
from tasks_backend.push.subscriptions import MAX_CONFIGS_PER_JOB, Cursor, PushStore
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.job_meta import JobMeta
from tests.conftest import wait_until


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


# -- storage -------------------------------------------------------------------------------------
def test_push_keys_expire_no_later_than_their_job(runtime: Runtime) -> None:
    record, _ = runtime.service.submit(Principal("alice"), "test.noop", {}, ttl_s=120)
    push = PushStore(runtime.store)
    push.put(record, normalize_config({"url": "https://8.8.8.8/h"}, record.id), after="0-0")
    contexts = Contexts(runtime.store)
    contexts.set(record, "ctx")
    r, keys = runtime.store.redis, runtime.store.keys
    job_ttl = r.pttl(keys.job(record.id))
    for key in (keys.push_configs(record.id), keys.push_cursors(record.id), keys.job_meta(record.id)):
        assert 0 < r.pttl(key) <= job_ttl + 5, key
    assert r.pttl(keys.push_due()) > 0
    assert contexts.of([record.id]) == {record.id: "ctx"}
    assert push.delete(record.id, record.id) and not push.configs(record.id)


def test_the_config_limit_is_kept_by_the_write_and_a_replayed_write_gives_the_same_outcome(runtime: Runtime) -> None:
    """redis-py sends a script again when its reply is lost: the replay of a put that stored the tenth
    config stores it again (it does not count itself), and the replay of a refused one is refused again."""
    record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
    push = PushStore(runtime.store)
    keys = [runtime.store.keys.push_configs(record.id), runtime.store.keys.push_cursors(record.id)]

    def put(config_id: str) -> int:
        args = [config_id, json.dumps({"id": config_id}), Cursor(tag=config_id).to_json(), record.expires_ms,
                MAX_CONFIGS_PER_JOB]
        return int(push.scripts.call("push.put", keys, *args))

    assert [put(f"c{i}") for i in range(MAX_CONFIGS_PER_JOB)] == [1] * MAX_CONFIGS_PER_JOB
    last = f"c{MAX_CONFIGS_PER_JOB - 1}"
    assert (put(last), put(last)) == (1, 1)
    assert (put("one-too-many"), put("one-too-many")) == (0, 0)
    assert sorted(c["id"] for c in push.configs(record.id)) == sorted(f"c{i}" for i in range(MAX_CONFIGS_PER_JOB))
    with pytest.raises(InvalidParams):
        push.put(record, normalize_config({"url": "https://8.8.8.8/h", "id": "another"}, record.id), after="0-0")


def test_jobs_without_configs_never_reach_the_delivery_loop(runtime: Runtime) -> None:
    record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
    assert not _scheduled(runtime, record.id)


def test_a_job_is_claimed_by_one_deliverer_at_a_time(runtime: Runtime) -> None:
    push = PushStore(runtime.store)
    first = push.try_claim("some-job", 5000)
    assert first is not None and push.try_claim("some-job", 5000) is None
    push.release("some-job", first)
    assert push.try_claim("some-job", 5000) is not None


# -- delivery ------------------------------------------------------------------------------------
def _scheduled(runtime: Runtime, job_id: str) -> bool:
    """Whether the job is on the push due set at all (at any time)."""
    return runtime.store.redis.zscore(runtime.store.keys.push_due(), job_id) is not None


def _deliver_until(deliverer: PushDeliverer, done: Any, message: str) -> None:
    def step() -> bool:
        deliverer.deliver_once()
        return bool(done())

    wait_until(step, 30, interval=0.05, message=message)


@pytest.mark.usefixtures("worker")
def test_failed_posts_are_retried_with_backoff_until_delivered(runtime: Runtime, settings: Settings) -> None:
    receiver = Receiver(fail_first=2)
    try:
        deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True), formats=push_formats())
        record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
        auth = {"scheme": "Bearer", "credentials": "hook-secret"}
        config = normalize_config({"url": receiver.url, "token": "tok", "authentication": auth}, record.id)
        PushStore(runtime.store).put(record, config, after="0-0")
        _deliver_until(deliverer, lambda: "TASK_STATE_COMPLETED" in receiver.states(),
                       "the final notification")
        assert receiver.attempts >= 3
        states = receiver.states()
        assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
        headers, _ = receiver.calls[0]
        assert headers["Authorization"] == "Bearer hook-secret"
        assert headers["X-A2A-Notification-Token"] == "tok"
        assert any(b.get("artifactUpdate", {}).get("artifact", {}).get("parts") == [{"data": {"ok": True}}]
                   for b in receiver.bodies())
        # Done: a finished job whose events were all delivered leaves the due set.
        _deliver_until(deliverer, lambda: not _scheduled(runtime, record.id), "the job to leave the due set")
    finally:
        receiver.close()


@pytest.mark.usefixtures("worker")
def test_a_dead_receiver_is_given_up_on_event_by_event(runtime: Runtime, settings: Settings) -> None:
    receiver = Receiver(fail_first=10_000)
    try:
        deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True, push_max_attempts=2),
                                  formats=push_formats())
        stats = runtime.store.keys.stats("push")  # what /metrics reports as tasks_backend_push_deliveries_total

        def counted() -> dict[str, int]:
            return {k: int(v) for k, v in runtime.store.redis.hgetall(stats).items()}

        before = counted()
        record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
        push = PushStore(runtime.store)
        config = normalize_config({"url": receiver.url}, record.id)
        push.put(record, config, after="0-0")
        wait_until(lambda: runtime.service.get(Principal("alice"), record.id).terminal, 30,
                   message="the job to finish")
        last = push.last_event_id(record.id)
        _deliver_until(deliverer, lambda: push.cursors(record.id)[record.id].after == last,
                       "delivery to move past every event")
        assert receiver.attempts >= 2 and not receiver.calls
        after = counted()
        # Every attempt failed (one the breaker stopped without a call counts too), and each event was given up.
        assert after.get("failed", 0) - before.get("failed", 0) >= receiver.attempts
        assert after.get("given_up", 0) - before.get("given_up", 0) >= 1
    finally:
        receiver.close()


def test_private_targets_are_refused_at_delivery_time_too(runtime: Runtime, settings: Settings,
                                                          receiver: Receiver) -> None:
    deliverer = PushDeliverer(runtime.store, settings, formats=push_formats())  # push_allow_private is off
    config = normalize_config({"url": receiver.url}, "job")
    assert not deliverer._post("job", config, {"statusUpdate": {}})
    assert receiver.attempts == 0


def test_backoff_grows_and_is_capped() -> None:
    assert [backoff_ms(n) for n in (1, 2, 3)] == [500, 1000, 2000]
    assert backoff_ms(50) == 60_000


class _PlainFormat:
    """A protocol of its own: the state only, and a header of its own."""

    def bodies(self, record: Any, meta: Any) -> list[dict[str, Any]]:
        return [{"job": record.id, "state": record.state.value, "tag": meta.get("plain.tag")}]

    def headers(self, subscription: Any) -> dict[str, str]:
        return {"X-Plain-Subscriber": subscription["who"]}


@pytest.mark.usefixtures("worker")
def test_each_subscription_is_posted_in_the_format_it_was_stored_with(runtime: Runtime, settings: Settings,
                                                                      receiver: Receiver) -> None:
    # The core knows no protocol: a subscription names its format, and the adapter's format shapes each POST.
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True),
                              formats={"plain": _PlainFormat()})
    record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
    JobMeta(runtime.store).put(record, "plain.tag", "t-1")
    PushStore(runtime.store).put(record, {"id": "s1", "url": receiver.url, "who": "bob"}, after="0-0",
                                 format="plain")
    _deliver_until(deliverer, lambda: {"job": record.id, "state": "completed", "tag": "t-1"} in receiver.bodies(),
                   "the final state in the plain format")
    assert all(h["X-Plain-Subscriber"] == "bob" and "X-A2A-Notification-Token" not in h for h, _ in receiver.calls)
    assert PushStore(runtime.store).configs(record.id) == [{"id": "s1", "url": receiver.url, "who": "bob"}]
    deliverer.close()

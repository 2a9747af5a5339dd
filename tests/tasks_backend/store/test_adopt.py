"""`adopt.lua` against a real Redis: a child taken over by the rerun that keeps it lives as long as that rerun,
within the longest retention, with every key that ends with it; never shortened; taken over only from the parent
named; the same applied twice."""

from __future__ import annotations

from tasks_backend.service.runtime import Runtime


def _child(runtime: Runtime, parent: str = "p-original") -> str:
    # Delayed: a worker of another test in this process must not finish it (its feed would be cut short).
    record, _ = runtime.service.submit("alice", "test.noop", {}, ttl_s=60, delay_ms=50_000)
    runtime.store.redis.hset(runtime.store.keys.job(record.id), "parent", parent)
    return record.id


def test_a_child_taken_over_lives_as_long_as_its_taker_with_the_keys_that_end_with_it(runtime: Runtime) -> None:
    store, keys = runtime.store, runtime.store.keys
    child = _child(runtime)
    old_end = store.get(child).expires_ms  # type: ignore[union-attr]
    store.redis.hset(keys.job_meta(child), "x", "1")
    store.redis.pexpireat(keys.job_meta(child), old_end)
    store.redis.hset(keys.push_cursors(child), "s", "{}")
    store.redis.pexpire(keys.push_cursors(child), 5_000)  # cut shorter than the job: stays so
    until = old_end + 600_000
    assert store.adopt(child, until, taken_from="p-original", taker="p-rerun") is True
    record = store.get(child)
    assert record is not None and record.parent_id == "p-rerun" and record.expires_ms == until
    now = store.now_ms()
    for key in (keys.job(child), keys.events(child), keys.job_meta(child)):
        assert store.redis.pttl(key) > until - now - 1_000, key
    assert 0 < store.redis.pttl(keys.push_cursors(child)) <= 5_000
    # Applied twice: the same. Asked for less: never shortened.
    assert store.adopt(child, until, taken_from="p-original", taker="p-rerun") is True
    assert store.adopt(child, old_end) is False
    assert store.get(child).expires_ms == until  # type: ignore[union-attr]


def test_a_child_another_rerun_took_over_stays_its_and_a_gone_one_is_none(runtime: Runtime) -> None:
    store = runtime.store
    child = _child(runtime, parent="p-first-rerun")
    assert store.adopt(child, store.now_ms() + 90_000, taken_from="p-original", taker="p-second-rerun") is False
    record = store.get(child)
    assert record is not None and record.parent_id == "p-first-rerun"
    assert record.expires_ms >= store.now_ms() + 89_000  # kept alive all the same: the second still reads it
    assert store.adopt("no-such-job", store.now_ms() + 90_000, taken_from="p", taker="q") is None


def test_a_child_is_kept_no_longer_than_the_longest_retention_from_its_creation(runtime: Runtime) -> None:
    store = runtime.store
    child = _child(runtime)
    record = store.get(child)
    assert record is not None
    assert store.adopt(child, record.created_ms + 10 * store.max_ttl_ms) is False
    assert store.get(child).expires_ms == record.created_ms + store.max_ttl_ms  # type: ignore[union-attr]

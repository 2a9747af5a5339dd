"""The benches' readings of a side's queues (`bench.queues`), on a real Redis: what counts as waiting, waiting until
nothing is, forgetting what submits left."""

from __future__ import annotations

import secrets
import time

import redis

from bench import queues
from tasks_backend.store.keys import Keys


def _db(redis_base: str) -> redis.Redis:
    return redis.Redis.from_url(f"{redis_base}/11")  # a database no other test uses: `unacked` is a shared name


def test_queued_counts_the_broker_list_and_the_gates_held_and_delayed_jobs(redis_base: str) -> None:
    db, keys, queue = _db(redis_base), Keys(f"bq{secrets.token_hex(4)}"), f"q{secrets.token_hex(4)}"
    try:
        db.rpush(queue, "m1", "m2")
        db.zadd(keys.gate(queue, "ready"), {"a": 0, "b": 0, "c": 0})
        db.zadd(keys.gate(queue, "delayed"), {"d": 1})
        db.zadd(keys.gate(queue, "flight"), {"e": 1})  # sent to a worker: not waiting
        assert queues.queued(db, queue, keys) == 6
        # The bare baseline's list in another database, the product's gate named by its own queue: the list only.
        assert queues.queued(db, "elsewhere", keys, gate_queue="no-gate-here") == 0
        queues.purge(db, queue, keys)
        assert queues.queued(db, queue, keys) == 0
        assert not db.exists(*keys.gate_keys(queue))
    finally:
        db.delete(queue, *keys.gate_keys(queue))


def test_wait_idle_waits_while_a_job_is_queued_or_unacknowledged(redis_base: str) -> None:
    db, keys, queue = _db(redis_base), Keys(f"bq{secrets.token_hex(4)}"), f"q{secrets.token_hex(4)}"
    taken = f"{queue}-taken"
    try:
        for waiting in (lambda: db.rpush(queue, "m1"), lambda: db.hset(queues.UNACKED, taken, "m1")):
            waiting()
            started = time.monotonic()
            queues.wait_idle(db, queue, keys, timeout_s=0.3)
            assert time.monotonic() - started >= 0.3  # it waited until its deadline
            db.delete(queue)
            db.hdel(queues.UNACKED, taken)
        started = time.monotonic()
        queues.wait_idle(db, queue, keys, timeout_s=5)
        assert time.monotonic() - started < 1  # nothing waiting: it returns at once
    finally:
        db.delete(queue)
        db.hdel(queues.UNACKED, taken)

"""The shared counters of `running.stats` over a real Redis: whatever a write meets, every key keeps a TTL."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import redis

from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.running.stats import JobStats
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.connect import connect


def _unreachable() -> redis.Redis:
    """A client as the store makes them (it fails at once), of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return connect(f"redis://127.0.0.1:{port}/0")


def _record(job_id: str) -> JobRecord:
    return JobRecord(id=job_id, owner="alice", operation="test.noop", state=JobState.RUNNING, created_ms=1,
                     updated_ms=1, ttl_ms=60_000, poll_ms=1000)


def test_a_counter_first_made_after_a_failed_write_gets_its_ttl(runtime: Runtime) -> None:
    """A failure counted while Redis was unreachable is dropped (a metric never fails its caller); the next write,
    which makes the hash, gives it its TTL, or the hash outlives every job for good."""
    stats = JobStats(runtime.store)
    reachable: Any = stats.redis
    key = runtime.store.keys.stats("audit")
    stats.redis = _unreachable()
    stats.add_counts("audit", {"write_failures": 1})
    stats.redis = reachable
    assert not reachable.exists(key)
    stats.add_counts("audit", {"write_failures": 1})
    assert int(reachable.hget(key, "write_failures")) == 1
    assert reachable.pttl(key) > 0


def test_outcomes_flushed_after_a_failed_flush_make_a_counter_with_its_ttl(runtime: Runtime) -> None:
    """The worker's flush of its counted outcomes is sent with its other deferred writes; one that could not be
    sent leaves the next one to give the hash it makes a TTL."""
    stats = JobStats(runtime.store)
    reachable: Any = stats.redis
    key = runtime.store.keys.stats("jobs")
    reachable.delete(key)
    stats.note_outcome(_record("a"), JobState.COMPLETED, at_ms=2)
    lost = _unreachable().pipeline(transaction=False)
    stats.flush_into(lost)
    with pytest.raises(redis.ConnectionError):
        lost.execute()
    stats.note_outcome(_record("b"), JobState.COMPLETED, at_ms=2)
    pipe = reachable.pipeline(transaction=False)
    stats.flush_into(pipe)
    pipe.execute()
    assert int(reachable.hget(key, "test.noop|completed|le0.1")) == 1
    assert reachable.pttl(key) > 0

"""The schedule service against a real Redis: what counts against the owner's most schedules."""

from __future__ import annotations

import pytest

from tasks_backend import schedule
from tasks_backend.errors import ScheduleLimitReached
from tasks_backend.service.runtime import build_runtime
from tests.conftest import make_settings


def test_schedules_declared_in_code_do_not_count_against_the_limit(redis_base: str) -> None:
    service = build_runtime(make_settings(redis_base, max_schedules=1)).schedules()
    service.declare([schedule("nightly", "test.noop", cron="0 3 * * *", owner="alice")])
    _, made = service.define("alice", {"name": "mine", "operation": "test.noop", "everySeconds": 60})
    assert made
    with pytest.raises(ScheduleLimitReached):
        service.define("alice", {"name": "more", "operation": "test.noop", "everySeconds": 60})
    # A name once declared and then defined by its owner counts, and deleted it frees its place.
    service.delete("alice", "mine")
    service.define("alice", {"name": "nightly", "operation": "test.noop", "everySeconds": 60}, replace=True)
    with pytest.raises(ScheduleLimitReached):
        service.define("alice", {"name": "more", "operation": "test.noop", "everySeconds": 60})


def test_a_schedule_declared_again_at_a_start_is_not_counted_though_its_mark_was_gone(redis_base: str) -> None:
    """A process declares its schedules at every start, answered 'same': that is enough to leave them uncounted when
    the mark is gone (a schedule declared before the mark existed, or one whose mark expired)."""
    runtime = build_runtime(make_settings(redis_base, max_schedules=1))
    service, store = runtime.schedules(), runtime.store
    nightly = schedule("nightly", "test.noop", cron="0 3 * * *", owner="alice")
    service.declare([nightly])
    store.redis.delete(store.keys.schedules_declared("alice"))
    service.declare([nightly])
    _, made = service.define("alice", {"name": "mine", "operation": "test.noop", "everySeconds": 60})
    assert made and store.redis.pttl(store.keys.schedules_declared("alice")) > 0

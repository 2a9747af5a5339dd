"""The schedule service against a real Redis: what counts against the owner's most schedules, and the due set."""

from __future__ import annotations

import pytest

from tasks_backend import schedule
from tasks_backend.errors import ScheduleLimitReached
from tasks_backend.service.runtime import build_runtime
from tasks_backend.store.schedules import member
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


def test_a_name_refused_at_the_limit_leaves_nothing_in_the_due_set(redis_base: str) -> None:
    """A Cluster's definition adds the due entry before the schedule (a single Redis writes both in one script):
    a name refused there takes its entry out again, so an owner at its limit cannot grow the due set."""
    runtime = build_runtime(make_settings(redis_base, max_schedules=1))
    service, store = runtime.schedules(), runtime.store
    service.define("alice", {"name": "mine", "operation": "test.noop", "everySeconds": 60})
    for i in range(3):
        with pytest.raises(ScheduleLimitReached):
            service.define("alice", {"name": f"more{i}", "operation": "test.noop", "everySeconds": 60})
    due = [str(m) for m in store.redis.zrange(store.keys.schedules_due(), 0, -1)]
    assert member("alice", "mine") in due
    assert not [m for m in due if m.startswith("more")], due

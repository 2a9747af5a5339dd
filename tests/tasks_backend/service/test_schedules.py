"""The schedule service against a real Redis: what counts against the owner's most schedules, and the due set."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from tasks_backend import schedule
from tasks_backend.errors import ScheduleLimitReached, StoreUnavailable
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.schedules import member
from tests.conftest import make_settings, wait_until


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


@pytest.fixture(params=["as built", "entry first"])
def due_path(request: pytest.FixtureRequest, redis_base: str) -> Callable[..., Runtime]:
    """A runtime on this test's Redis, defining schedules as it was built to (one script on a single Redis), or as
    a Cluster does (the due entry first, then the schedule, then the entry moved), on the same keys."""

    def make(**settings: Any) -> Runtime:
        runtime = build_runtime(make_settings(redis_base, **settings))
        if request.param == "entry first":
            runtime.store.single = False
        return runtime

    return make


def due_of(runtime: Runtime, owner: str, name: str) -> float | None:
    score = runtime.store.redis.zscore(runtime.store.keys.schedules_due(), member(owner, name))
    return None if score is None else float(score)


def test_names_refused_at_the_limit_leave_nothing_the_ticker_keeps(due_path: Callable[..., Runtime]) -> None:
    """An owner at its limit cannot grow the due set: a refused name's entry, if one was made, goes at the next
    look."""
    runtime = due_path(max_schedules=1)
    service = runtime.schedules()
    service.define("alice", {"name": "mine", "operation": "test.noop", "everySeconds": 60})
    for i in range(3):
        with pytest.raises(ScheduleLimitReached):
            service.define("alice", {"name": f"more{i}", "operation": "test.noop", "everySeconds": 60})
    service.ticker().tick_once()
    due = [str(m) for m in runtime.store.redis.zrange(runtime.store.keys.schedules_due(), 0, -1)]
    assert member("alice", "mine") in due
    assert not [m for m in due if m.startswith("more")], due


def test_a_refused_definition_leaves_the_entry_of_the_schedule_another_request_made(
        due_path: Callable[..., Runtime]) -> None:
    """Refused at the limit, and meanwhile the owner deleted a schedule and another request defined the same
    name: that schedule keeps its due entry."""
    runtime = due_path(max_schedules=1)
    service, other = runtime.schedules(), runtime.schedules()
    service.define("alice", {"name": "old", "operation": "test.noop", "everySeconds": 60})
    prune = service.store.prune

    def meanwhile(owner: str) -> int:
        pruned = prune(owner)
        other.delete("alice", "old")
        other.define("alice", {"name": "new", "operation": "test.noop", "everySeconds": 60})
        return pruned

    service.store.prune = meanwhile  # type: ignore[method-assign]
    with pytest.raises(ScheduleLimitReached):
        service.define("alice", {"name": "new", "operation": "test.noop", "everySeconds": 60})
    made = other.get("alice", "new")
    assert made is not None
    service.ticker().tick_once()
    assert due_of(runtime, "alice", "new") == made.next_ms


def test_a_definition_again_mends_a_lost_due_entry_at_the_schedules_own_next_run(
        due_path: Callable[..., Runtime]) -> None:
    """A due entry lost (a failover of its server, a key expired): the process that declares or defines the same
    schedule again puts it back at the schedule's next run, not at one counted from now."""
    runtime = due_path()
    service = runtime.schedules()
    body = {"name": "hourly", "operation": "test.noop", "everySeconds": 3600, "catchUp": "none"}
    service.define("alice", body)
    made = service.get("alice", "hourly")
    assert made is not None
    runtime.store.redis.zrem(runtime.store.keys.schedules_due(), member("alice", "hourly"))
    wait_until(lambda: runtime.store.now_ms() > made.anchor_ms + 50, timeout=2, message="Redis's clock to move on")
    assert service.define("alice", body)[1] is False  # the same: not made again
    assert due_of(runtime, "alice", "hourly") == made.next_ms


def test_a_definition_whose_write_failed_leaves_no_entry_the_ticker_keeps(due_path: Callable[..., Runtime]) -> None:
    """The write of the schedule fails (Redis went away between the two calls of a Cluster's path): the entry put
    first is set to be looked at now, and that look drops it, since no schedule of that name was written."""
    runtime = due_path()
    service = runtime.schedules()
    scripts, call = service.store.scripts, service.store.scripts.call

    def failing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "schedules.put":
            raise StoreUnavailable()
        return call(name, *args, **kwargs)

    scripts.call = failing  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        service.define("alice", {"name": "lost", "operation": "test.noop", "everySeconds": 60})
    scripts.call = call  # type: ignore[method-assign]
    assert due_of(runtime, "alice", "lost") in (None, 0.0)  # none at all when the one script failed whole
    service.ticker().tick_once()
    assert due_of(runtime, "alice", "lost") is None and service.store.get_many([("alice", "lost")]) == [None]


def test_a_delete_racing_a_definition_of_the_same_name_leaves_that_schedule_its_due_entry(
        due_path: Callable[..., Runtime]) -> None:
    """Another request defines the name again right after the delete removed the schedule: the new schedule keeps
    its due entry (removed in the delete's own call, or on a Cluster left to the ticker's look, which moves it on to
    the new schedule's run)."""
    runtime = due_path()
    service, other = runtime.schedules(), runtime.schedules()
    service.define("alice", {"name": "nightly", "operation": "test.noop", "everySeconds": 60})
    scripts, call = service.store.scripts, service.store.scripts.call

    def then_defined_again(name: str, *args: Any, **kwargs: Any) -> Any:
        answer = call(name, *args, **kwargs)
        if name == "schedules.delete":
            other.define("alice", {"name": "nightly", "operation": "test.noop", "everySeconds": 90})
        return answer

    scripts.call = then_defined_again  # type: ignore[method-assign]
    service.delete("alice", "nightly")
    scripts.call = call  # type: ignore[method-assign]
    made = other.get("alice", "nightly")
    assert made is not None
    service.ticker().tick_once()
    assert due_of(runtime, "alice", "nightly") == made.next_ms


@pytest.mark.parametrize("declared", [False, True])
def test_the_owners_list_outlives_a_schedule_whose_next_run_is_far_off(redis_base: str, declared: bool) -> None:
    """A schedule lives until its next run and the retention after it: a yearly one for more than a year. The
    owner's list of schedules (and of those declared in code) lives as long, not just the retention from now."""
    runtime = build_runtime(make_settings(redis_base))
    service, store, keys = runtime.schedules(), runtime.store, runtime.store.keys
    service.define("alice", {"name": "often", "operation": "test.noop", "everySeconds": 60})
    # Yearly, on the first of the month after next: its next run is a month or more away, whatever today is.
    cron = f"0 0 1 {(dt.datetime.now(dt.UTC).month + 1) % 12 + 1} *"
    yearly = schedule("yearly", "test.noop", cron=cron, owner="alice")
    if declared:
        service.declare([yearly])
    else:
        service.define("alice", {"name": "yearly", "operation": "test.noop", "cron": cron})
    service.define("alice", {"name": "often2", "operation": "test.noop", "everySeconds": 60})  # shortens nothing
    lives = store.redis.pttl(keys.schedule("alice", "yearly"))
    lists = [keys.schedules("alice"), *([keys.schedules_declared("alice")] if declared else [])]
    assert lives > runtime.settings.max_ttl_s * 1000 + 86_400_000  # its next run is more than a day off
    for key in lists:
        assert store.redis.pttl(key) >= lives - 1000, key
    if declared:  # declared again at a start: 'same', and the list still outlives it
        service.declare([yearly])
        assert store.redis.pttl(keys.schedules_declared("alice")) >= lives - 1000
    assert sorted(s.name for s in service.list("alice")) == ["often", "often2", "yearly"]


def test_a_tick_whose_job_an_earlier_pass_made_from_a_request_read_otherwise_keeps_that_job(redis_base: str) -> None:
    """The job under a tick's key is the tick's, though the request that made it no longer reads the same (a release
    since stores the params otherwise): the tick gets that job, instead of staying pending until it expires."""
    runtime = build_runtime(make_settings(redis_base))
    service = runtime.schedules()
    made, _ = service.define("alice", {"name": "often", "operation": "test.noop", "everySeconds": 60})
    key = f"schedule:often:{made.generation}:{made.next_ms}"
    earlier, _ = runtime.service.submit("alice", "test.noop", {}, idempotency_key=key, priority=9)
    assert service.fire(made, made.next_ms) == earlier.id == service.fire(made, made.next_ms)
    jobs, _ = runtime.service.list("alice", limit=50)
    assert [j.id for j in jobs] == [earlier.id]  # and no second job

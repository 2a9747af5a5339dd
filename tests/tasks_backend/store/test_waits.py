"""The store's waiting side: a park and a wake applied twice give their first outcome, a sleeper is not woken
before its time, a stale wake (from an earlier park) changes nothing, and a child is indexed once."""

from __future__ import annotations

import pytest

from tasks_backend import Principal
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.fields import Change
from tasks_backend.store.outcomes import Moved, Woken
from tests.tasks_backend.store.test_replay import idle_runtime

pytestmark = pytest.mark.usefixtures("worker")
ALICE = Principal("alice")


def parked(runtime: Runtime, wake_ms: int | None) -> str:
    store = runtime.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    store.claim(record.id, ClaimTerms(60_000, "w", 5))
    change = Change.waiting("Sleeping.", wake_ms=wake_ms) if wake_ms else Change.waiting("Waiting.",
                                                                                        children_json="[]")
    moves = [store.park(record.id, 1, change, look_in_ms=60_000, request_id="p") for _ in range(2)]
    assert moves[0][0] == moves[1][0] == Moved.OK and moves[0][1] == moves[1][1] > 0
    assert store.get(record.id).state is JobState.SUSPENDED  # type: ignore[union-attr]
    return record.id


def test_a_wake_applied_twice_queues_once_and_says_so_both_times(runtime: Runtime) -> None:
    store = runtime.store
    job_id = parked(runtime, wake_ms=None)
    assert store.wake(job_id, 2, "Resuming.", sweep_in_ms=60_000) == (Woken.IDLE, 0)  # another run's park
    woken = [store.wake(job_id, 1, "Resuming.", sweep_in_ms=60_000, request_id="w") for _ in range(2)]
    assert woken[0] == woken[1] == (Woken.QUEUED, 0)
    record = store.get(job_id)
    assert record is not None and record.state is JobState.QUEUED and record.status_message == "Resuming."
    assert store.wake(job_id, 1, "Resuming.", sweep_in_ms=60_000) == (Woken.IDLE, 0)  # a new request: not waiting
    assert store.waiting_of(job_id) is not None and store.waiting_of(job_id).children == []  # type: ignore[union-attr]
    runtime.service.cancel(ALICE, job_id)  # queued where no worker reads: left, the sweeper would republish it


def test_a_sleeper_is_not_woken_before_its_time(runtime: Runtime) -> None:
    store = runtime.store
    later = store.now_ms() + 60_000
    job_id = parked(runtime, wake_ms=later)
    assert store.wake(job_id, None, "Resuming.", sweep_in_ms=60_000) == (Woken.EARLY, later)
    assert store.get(job_id).state is JobState.SUSPENDED  # type: ignore[union-attr]
    assert runtime.service.cancel(ALICE, job_id).state is JobState.CANCELLED  # a cancel ends it at once


def test_a_child_is_indexed_once_for_as_long_as_its_parent_lives(runtime: Runtime) -> None:
    store = runtime.store
    parent, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    told = store.index_child(parent.id, "child-1")
    assert told == (JobState.QUEUED, parent.expires_ms) == store.index_child(parent.id, "child-1")
    assert store.child_ids(parent.id) == ["child-1"]
    ttl = store.redis.pttl(store.keys.children(parent.id))
    assert abs(store.redis.pttl(store.keys.job(parent.id)) - ttl) < 100  # the expiry of the parent itself
    assert not store.index_child("no-such-parent", "child-1")
    runtime.service.cancel(ALICE, parent.id)

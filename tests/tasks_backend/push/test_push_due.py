"""The push due set as the delivery loops share it between owners: whose each due job is, putting an
owner's jobs back, and a pass that never takes off a job someone moved meanwhile. Real Redis."""

from __future__ import annotations

import pytest

from adapters.a2a.push import FORMAT, normalize_config
from tasks_backend.access.auth import Principal
from tasks_backend.push.subscriptions import PushStore
from tasks_backend.service.runtime import Runtime
from tests.conftest import wait_until


def _finished_job_with_a_done_config(runtime: Runtime, push: PushStore) -> str:
    record, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
    wait_until(lambda: runtime.service.get(Principal("alice"), record.id).terminal, 30, message="the job to finish")
    record = runtime.service.get(Principal("alice"), record.id)
    push.put(record, normalize_config({"url": "https://8.8.8.8/h"}, record.id),
             after=push.last_event_id(record.id), format=FORMAT)
    return record.id


def _score(runtime: Runtime, job_id: str) -> float | None:
    score: float | None = runtime.store.redis.zscore(runtime.store.keys.push_due(), job_id)
    return score


def test_owners_of_due_jobs_are_read_before_any_claim(runtime: Runtime) -> None:
    push = PushStore(runtime.store)
    alice, _ = runtime.service.submit(Principal("alice"), "test.noop", {})
    bob, _ = runtime.service.submit(Principal("bob"), "test.noop", {})
    assert push.owners([alice.id, bob.id, "gone"]) == {alice.id: "alice", bob.id: "bob", "gone": None}
    assert push.owners([]) == {}


@pytest.mark.usefixtures("worker")
def test_deferring_moves_only_jobs_still_due(runtime: Runtime) -> None:
    push = PushStore(runtime.store)
    job_id = _finished_job_with_a_done_config(runtime, push)
    now, _ = push.due(10)
    push.defer([job_id, "never-scheduled"], now + 1000)
    assert _score(runtime, job_id) == now + 1000
    assert _score(runtime, "never-scheduled") is None


@pytest.mark.usefixtures("worker")
def test_a_pass_with_nothing_left_leaves_a_job_moved_since_its_claim(runtime: Runtime) -> None:
    push = PushStore(runtime.store)
    job_id = _finished_job_with_a_done_config(runtime, push)
    now, _ = push.due(10)
    claimed_at = now + 5000
    assert push.claim_many([job_id], "mine", 5000, now) == [job_id]
    pending = push.read(job_id, now)
    assert pending.record is None  # every config is done: the pass would take the job off
    # Meanwhile something moved the job (say a pass of another loop set when it is next due).
    runtime.store.redis.zadd(runtime.store.keys.push_due(), {job_id: now + 1000})
    push.finish(pending, "mine", {}, None, claimed_at_ms=claimed_at)
    assert _score(runtime, job_id) == now + 1000  # still due: the next pass looks at it again

    # Not moved since the claim: the pass takes it off, and a replay of that changes nothing.
    assert push.claim_many([job_id], "again", 5000, now) == [job_id]
    pending = push.read(job_id, now)
    push.finish(pending, "again", {}, None, claimed_at_ms=claimed_at)
    assert _score(runtime, job_id) is None
    push.finish(pending, "again", {}, None, claimed_at_ms=claimed_at)
    assert _score(runtime, job_id) is None


@pytest.mark.usefixtures("worker")
def test_deferring_never_moves_a_job_claimed_meanwhile_earlier(runtime: Runtime) -> None:
    push = PushStore(runtime.store)
    job_id = _finished_job_with_a_done_config(runtime, push)
    now, due = push.due(10)
    assert job_id in due
    # Another loop claims the job after this one read the due set: its score is now the lease end.
    assert push.claim_many([job_id], "theirs", 60_000, now) == [job_id]
    push.defer([job_id], now + 1000)  # this loop puts it back for its owner's share
    assert _score(runtime, job_id) == now + 60_000  # still behind the claim: not due again while it holds
    # A job still merely due is moved back as before.
    push.release(job_id, "theirs")
    runtime.store.redis.zadd(runtime.store.keys.push_due(), {job_id: now})
    push.defer([job_id], now + 1000)
    assert _score(runtime, job_id) == now + 1000

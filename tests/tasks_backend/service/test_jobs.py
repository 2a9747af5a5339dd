"""Submits through the job service against a real Redis: what an idempotency key stands for."""

from __future__ import annotations

import pytest

from tasks_backend import Principal, SubmitOutcome
from tasks_backend.errors import IdempotencyConflict
from tasks_backend.service.jobs import request_digest
from tasks_backend.service.runtime import Runtime, build_runtime

ALICE = Principal("alice")


def test_a_key_recorded_before_timing_was_part_of_a_request_still_replays(runtime: Runtime) -> None:
    """A key whose record holds the hash made without the timing (written before the timing counted) gets its job
    back for the same operation and params, whatever the timing of the replay; a key recorded now does not."""
    idle = build_runtime(runtime.settings.with_(queue=f"{runtime.settings.queue}-idle"))
    service, store = idle.service, idle.store
    made, _ = service.submit(ALICE, "test.noop", {}, idempotency_key="before")
    key = store.keys.idempotency(ALICE.name, "before")
    store.redis.set(key, f"{made.id} {request_digest(['test.noop', {}])}", keepttl=True)
    again, outcome = service.submit(ALICE, "test.noop", {}, idempotency_key="before", priority=7)
    assert (again.id, outcome) == (made.id, SubmitOutcome.EXISTING)
    service.submit(ALICE, "test.noop", {}, idempotency_key="now")
    with pytest.raises(IdempotencyConflict):
        service.submit(ALICE, "test.noop", {}, idempotency_key="now", priority=7)

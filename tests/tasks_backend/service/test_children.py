"""A cancel's cascade to child jobs against a real Redis, the jobs run by hand (no worker reads the runtime's queue)."""

from __future__ import annotations

import json
from pathlib import Path

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import build_runtime
from tests.conftest import JOB_MODULES, make_settings
from tests.support.child_jobs import MODULE


def test_a_child_held_by_the_gate_leaves_it_when_its_parents_cancel_cancels_it(redis_base: str,
                                                                               tmp_path: Path) -> None:
    """Three children on one value of a limit of two: the third is held. Cancelled with its parent, it leaves the gate
    at once (nothing holds a place for it); the two sent to workers keep theirs until their runs end."""
    runtime = build_runtime(make_settings(redis_base, job_modules=(*JOB_MODULES, MODULE)))
    service, store, executor = runtime.service, runtime.store, runtime.executor()
    kid = {"op": "test.limited", "params": {"ledger": str(tmp_path / "ledger"), "customer_id": "acme"}}
    parent, _ = service.submit("alice", "kidtests.waiter", {"kids": [kid, kid, kid]})
    assert executor.run(parent.id) == "suspended"
    kids = [json.loads(store.recorded_step(parent.id, f"spawn:{i}") or "null") for i in range(3)]
    jobs = store.keys.gate(runtime.settings.queue, "jobs")
    assert [str(store.redis.hget(jobs, k))[0] for k in kids] == ["f", "f", "h"]
    service.cancel("alice", parent.id)
    assert [store.get(k).state for k in kids] == [JobState.CANCELLED] * 3  # type: ignore[union-attr]
    assert store.redis.hget(jobs, kids[2]) is None
    assert [str(store.redis.hget(jobs, k))[0] for k in kids[:2]] == ["f", "f"]

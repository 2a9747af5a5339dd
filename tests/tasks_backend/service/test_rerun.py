"""Reruns against a real Redis, the jobs run by hand (no worker reads the runtime's queue): what a rerun that keeps
its steps keeps of a parent whose child failed."""

from __future__ import annotations

import json
from pathlib import Path

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import make_settings


def child_starts(ledger: Path) -> list[int]:
    lines = [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []
    return [e["index"] for e in lines if e["event"] == "child start"]


def test_a_rerun_keeping_steps_makes_the_failed_child_again_and_keeps_the_others(redis_base: str,
                                                                                 tmp_path: Path) -> None:
    """The original's wait recorded child 1's failure: kept, it would fail the rerun at once with it. The rerun keeps
    child 0 (completed) and makes child 1 again, then waits for both."""
    runtime: Runtime = build_runtime(make_settings(redis_base))
    service, executor, store = runtime.service, runtime.executor(), runtime.store
    ledger = tmp_path / "ledger"
    parent, _ = service.submit("alice", "test.parent", {"ledger": str(ledger), "children": 2, "fail": 1})
    assert executor.run(parent.id) == "suspended"
    kids = [json.loads(store.recorded_step(parent.id, f"spawn:{i}") or "null") for i in range(2)]
    assert [executor.run(k) for k in kids] == ["completed", "failed"]
    assert executor.run(parent.id) == "failed"
    rerun, _ = service.rerun("alice", parent.id, keep_steps=True)
    assert executor.run(rerun.id) == "suspended"  # waiting for the new child 1, not failed with the old one's error
    again = [json.loads(store.recorded_step(rerun.id, f"spawn:{i}") or "null") for i in range(2)]
    assert again[0] == kids[0] and again[1] not in kids
    assert child_starts(ledger) == [0, 1]  # the new child has not run yet; child 0 never runs again
    assert store.get(again[1]).state is JobState.QUEUED  # type: ignore[union-attr]

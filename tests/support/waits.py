"""A parent whose child ends between the parent's look at it and its park, for the gate's tests on one Redis and on
a cluster. No worker consumes the runtime's queue: the scenario runs each job itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.fields import Change


def assert_a_parent_woken_as_it_parks_is_published(runtime: Runtime, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The park's own look at the children wakes the parent while its run is still under way: the gate must end
    with the parent in flight (published again), not waiting for the sweeper."""
    store, executor = runtime.store, runtime.executor()
    parent, _ = runtime.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1})
    park = store.park

    def child_ends_first(job_id: str, token: int, change: Change, **options: Any) -> Any:
        for child in json.loads(change.children_json or "[]"):
            assert executor.run(child) == "completed"
        return park(job_id, token, change, **options)

    monkeypatch.setattr(store, "park", child_ends_first)
    assert executor.run(parent.id) == "suspended"
    assert store.get(parent.id).state is JobState.QUEUED  # type: ignore[union-attr]
    [(where, _)] = store.gate_where(executor.admission.call(), [parent.id])
    assert where == "f", "the woken parent was not published again"

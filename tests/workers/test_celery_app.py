"""The runner app's process hooks: what a worker defers is written when its process stops."""

from __future__ import annotations

import pytest
from celery import signals

from tasks_backend.model.domain import JobState
from tasks_backend.running import execution
from tests.conftest import make_settings
from workers.celery_app import create_celery


def test_a_stopping_worker_process_writes_what_it_deferred(redis_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # No tick and no lease renewal during the test: only the shutdown hook can write the deferred work.
    monkeypatch.setattr(execution, "TICK_S", 3600.0)
    app = create_celery(make_settings(redis_base, lease_s=600.0))
    runtime = app.tasks_backend_runtime()  # type: ignore[attr-defined]
    store = runtime.store
    record, _ = runtime.service.submit("alice", "test.noop", {})
    jobs = store.keys.stats("jobs")

    def completed_count() -> int:
        counts = store.redis.hgetall(jobs)
        return sum(int(v) for k, v in counts.items() if k.startswith("test.noop|completed|le"))

    assert runtime.executor().run(record.id) == JobState.COMPLETED.value
    assert store.redis.zscore(store.keys.sweep(), record.id) is not None  # deferred, not yet written
    assert completed_count() == 0

    signals.worker_process_shutdown.send(sender=None, pid=0, exitcode=0)
    assert store.redis.zscore(store.keys.sweep(), record.id) is None
    assert completed_count() == 1
    assert store.redis.pttl(jobs) > 0

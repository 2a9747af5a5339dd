"""A remote step's own reads of its records ride out a short store outage, as the executor's writes do: a replay
that meets Redis unreachable for a moment reads the recorded outcome once it answers, and the job is not failed."""

from __future__ import annotations

import json

import pytest

from tasks_backend.errors import StoreUnavailable
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import build_runtime
from tasks_backend.store.remotes import DONE
from tests.conftest import JOB_MODULES, make_settings

#: The record name of a job's first remote call (`JobContext._next("remote")`).
FIRST = "remote:0"


@pytest.mark.parametrize("unreachable_read", [1, 2], ids=["the outcome", "the reference"])
def test_a_replayed_remote_step_reads_its_records_once_redis_answers(redis_base: str, monkeypatch: pytest.MonkeyPatch,
                                                                    unreachable_read: int) -> None:
    runtime = build_runtime(make_settings(redis_base, job_modules=(*JOB_MODULES, "tests.support.remote_jobs")))
    store, executor = runtime.store, runtime.executor()
    # Nothing answers at this address: the job can finish only from what an earlier run recorded.
    job, _ = runtime.service.submit("alice", "test.remote_tool", {"url": "http://127.0.0.1:9/mcp", "tool": "t"})
    # An earlier run created the remote task and saw it end: its reference and its outcome are recorded steps.
    store.redis.hset(store.keys.steps(job.id), mapping={
        FIRST: json.dumps({"protocol": "mcp-2026", "url": "http://127.0.0.1:9/mcp", "taskId": "t-1", "final": {}}),
        FIRST + DONE: json.dumps({"result": {"n": 1}})})
    recorded_step, reads = store.recorded_step, []

    def unreachable_once(job_id: str, name: str) -> str | None:
        reads.append(name)
        if len(reads) == unreachable_read:
            raise StoreUnavailable()
        return recorded_step(job_id, name)

    monkeypatch.setattr(store, "recorded_step", unreachable_once)
    assert executor.run(job.id) == "completed"
    record = store.get(job.id)
    assert record is not None and record.state is JobState.COMPLETED, record
    assert record.result == {"remote": {"n": 1}}
    assert reads.count(FIRST + DONE) == (2 if unreachable_read == 1 else 1)

"""Finished jobs answered from memory: only finished ones, each for at most a moment, and never past the owner rule."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from werkzeug.serving import make_server

from adapters.app import create_app
from tasks_backend.config import Settings
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.finished import MAX_AGE_S, MAX_RECORD_BYTES, FinishedRecords
from tests.conftest import ALICE, BOB, wait_until


def job(job_id: str, state: JobState) -> JobRecord:
    return JobRecord(id=job_id, owner="alice", operation="test.noop", state=state, created_ms=1, updated_ms=2,
                     ttl_ms=600_000, poll_ms=100)


def never() -> int:
    """Redis's clock long before any test job expires."""
    return 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_a_finished_record_is_kept_and_only_for_its_age() -> None:
    clock = Clock()
    kept = FinishedRecords(never, clock=clock)
    for state in JobState:
        kept.keep(job(state.value, state))
    assert {s for s in JobState if kept.get(s.value) is not None} == \
        {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
    clock.now += MAX_AGE_S - 0.01
    kept.keep(job("completed", JobState.COMPLETED))  # kept again: its first time still counts
    assert kept.get("completed") == (job("completed", JobState.COMPLETED), None)
    clock.now += 0.01
    assert kept.get("completed") is None and kept.get("failed") is None


def test_a_record_is_kept_no_longer_than_its_job_lives_by_redis_clock() -> None:
    clock, redis_ms = Clock(), [600_001 - 500]  # the test jobs expire at 600,001 ms: 0.5 s from now
    kept = FinishedRecords(lambda: redis_ms[0], clock=clock)
    kept.keep(job("a", JobState.COMPLETED))
    clock.now += 0.49
    assert kept.get("a") is not None
    clock.now += 0.01
    assert kept.get("a") is None
    redis_ms[0] = 600_001
    later = FinishedRecords(lambda: redis_ms[0], clock=clock)
    later.keep(job("b", JobState.COMPLETED))
    assert later.get("b") is None


def test_the_oldest_go_first_past_the_size() -> None:
    kept = FinishedRecords(never, size=3, clock=Clock())
    for i in range(5):
        kept.keep(job(str(i), JobState.COMPLETED))
    assert [i for i in range(5) if kept.get(str(i)) is not None] == [2, 3, 4]
    assert FinishedRecords(never, size=0).get("x") is None


def test_a_large_record_is_not_kept() -> None:
    kept = FinishedRecords(never, clock=Clock())
    big = dataclasses.replace(job("big", JobState.COMPLETED), result={"blob": "x" * MAX_RECORD_BYTES})
    kept.keep(big)
    kept.keep(job("small", JobState.COMPLETED))
    assert kept.get("big") is None and kept.get("small") is not None


def test_a_metadata_field_is_answered_only_where_it_was_kept() -> None:
    kept = FinishedRecords(never, clock=Clock())
    record = job("a", JobState.COMPLETED)
    kept.keep(record)
    assert kept.get("a", "context") is None
    kept.keep(record, ("context", "ctx-1"))
    assert kept.get("a", "context") == (record, "ctx-1")
    assert kept.get("a", "other") is None
    assert kept.get("a") == (record, None)


@pytest.fixture
def served(settings: Settings, worker: Any) -> Iterator[tuple[Runtime, Clock, httpx.Client]]:
    """The app on a runtime of its own (the session's worker runs its jobs), whose memory of finished jobs
    runs on a clock the test moves."""
    runtime, clock = build_runtime(settings), Clock()
    runtime.store.finished = FinishedRecords(runtime.store.now_ms, clock=clock)
    server = make_server("127.0.0.1", 0, create_app(runtime=runtime), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as http:
            yield runtime, clock, http
    finally:
        server.shutdown()


def test_a_finished_job_polled_again_is_answered_from_memory_for_its_owner_only(
        served: tuple[Runtime, Clock, httpx.Client]) -> None:
    runtime, clock, http = served
    job_id = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}}, headers=ALICE).json()["taskId"]
    done = wait_until(lambda: (r := http.get(f"/v1/jobs/{job_id}", headers=ALICE)).json()["status"] == "completed"
                      and r, message="the job to complete")
    get_task = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": job_id}}
    a2a = {**ALICE, "A2A-Version": "1.0"}
    assert http.post("/a2a", json=get_task, headers=a2a).json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Gone from Redis behind the memory's back: reads within the age are answered as before, from memory.
    runtime.store.redis.delete(runtime.store.keys.job(job_id))
    again = http.get(f"/v1/jobs/{job_id}", headers=ALICE)
    assert (again.status_code, again.content) == (200, done.content)
    assert http.get(f"/v1/jobs/{job_id}/result", headers=ALICE).status_code == 200
    assert http.post("/a2a", json=get_task, headers=a2a).json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Another owner meets the same rule as ever: the job reads as missing.
    assert http.get(f"/v1/jobs/{job_id}", headers=BOB).status_code == 404
    assert "error" in http.post("/a2a", json=get_task, headers={**BOB, "A2A-Version": "1.0"}).json()
    # Past the age, Redis is asked again.
    clock.now += MAX_AGE_S
    assert http.get(f"/v1/jobs/{job_id}", headers=ALICE).status_code == 404


def test_a_job_not_finished_is_read_from_redis_every_time(served: tuple[Runtime, Clock, httpx.Client]) -> None:
    runtime, _, http = served
    job_id = http.post("/v1/jobs", json={"operation": "test.ask_pair", "params": {}}, headers=ALICE).json()["taskId"]
    wait_until(lambda: http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "input_required",
               message="the job to ask")
    assert runtime.store.finished.get(job_id) is None
    assert http.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE).status_code == 202
    assert http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "cancelled"
    assert runtime.store.finished.get(job_id) is not None

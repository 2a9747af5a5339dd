"""Long sleeps park the job (`suspended`, shown as `working` with the time) and hold no worker; the waker in the
worker's main process wakes them at their time; a sleep already done is not slept again; cancel ends one at once."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend import Principal
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.fields import Change
from tests.conftest import ALICE, wait_until
from tests.tasks_backend.store.test_replay import idle_runtime

pytestmark = pytest.mark.usefixtures("worker")
A = Principal("alice")


def events(ledger: Path, name: str) -> int:
    return sum(json.loads(x)["event"] == name for x in ledger.read_text().splitlines()) if ledger.exists() else 0


def job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    return dict(http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())


def test_a_sleep_already_done_is_not_slept_again_on_replay(
        http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    job_id = http.post("/v1/jobs", json={"operation": "test.sleeper", "params": {
        "seconds": 5, "ledger": str(ledger), "ask": True}}, headers=ALICE).json()["taskId"]
    waiting = wait_until(lambda: (j := job(http, job_id)).get("statusMessage", "").startswith("Sleeping until") and j,
                         30, message="the sleeper to park")
    assert waiting["status"] == "working"
    assert runtime.store.get(job_id).state is JobState.SUSPENDED  # type: ignore[union-attr]
    until = waiting["statusMessage"].removeprefix("Sleeping until ").rstrip(".")
    wait_until(lambda: job(http, job_id)["status"] == "input_required", 10, message="the wake, then the question")
    woke = time.time()
    assert runtime.store.now_ms() >= _ms(until)
    # Answering replays the job from the top: the recorded sleep is over, so it goes straight on.
    http.post(f"/v1/jobs/{job_id}/input", json={"inputResponses": {"go": {"action": "accept", "content": {}}}},
              headers=ALICE)
    done = wait_until(lambda: (j := job(http, job_id))["status"] == "completed" and j, 4, interval=0.05,
                      message="completion without a second sleep")
    assert done["result"] == {"slept": 5.0, "answer": {}}
    assert (events(ledger, "start"), events(ledger, "woke")) == (3, 2)
    assert time.time() - woke < 4


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def test_cancel_ends_a_sleeping_job_at_once(http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    job_id = http.post("/v1/jobs", json={"operation": "test.sleeper", "params": {
        "seconds": 60, "ledger": str(ledger)}}, headers=ALICE).json()["taskId"]
    wait_until(lambda: runtime.store.get(job_id).state is JobState.SUSPENDED, 10)  # type: ignore[union-attr]
    cancelled = http.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE).json()
    assert cancelled["status"] == "cancelled"
    # Its entry on the wake schedule finds it cancelled and is dropped; the job never runs again.
    runtime.store.settle_wakes([(job_id, str(runtime.store.redis.zscore(runtime.store.keys.wake(), job_id)),
                                 runtime.store.now_ms())])
    wait_until(lambda: runtime.store.redis.zscore(runtime.store.keys.wake(), job_id) is None, 5,
               message="the waker to drop the cancelled sleeper")
    assert job(http, job_id)["status"] == "cancelled" and events(ledger, "start") == 1


def test_short_sleeps_stay_in_the_worker(runtime: Runtime) -> None:
    record, _ = runtime.service.submit(A, "test.sleeper", {"seconds": 1})
    wait_until(lambda: runtime.store.get(record.id).state is JobState.RUNNING, 10)  # type: ignore[union-attr]
    done = wait_until(lambda: (r := runtime.store.get(record.id)) and r.terminal and r, 10)
    assert done.state is JobState.COMPLETED and runtime.store.recorded_step(record.id, "sleep:0") is None


def test_sleep_until_takes_a_naive_time_as_utc(runtime: Runtime) -> None:
    due_ms = runtime.store.now_ms() + 60_000
    naive = datetime.fromtimestamp(due_ms / 1000, tz=UTC).replace(tzinfo=None).isoformat()
    record, _ = runtime.service.submit(A, "test.sleeper", {"seconds": 0, "until": naive})
    wait_until(lambda: runtime.store.get(record.id).state is JobState.SUSPENDED, 10)  # type: ignore[union-attr]
    waiting = runtime.store.waiting_of(record.id)
    assert waiting is not None and waiting.wake_ms is not None and abs(waiting.wake_ms - due_ms) <= 1
    runtime.service.cancel(A, record.id)


def test_the_wake_schedule_wakes_a_parent_whose_last_childs_notice_was_lost(runtime: Runtime) -> None:
    """A child that finished without telling its parent (its process died first): the wake schedule, which a
    waiting parent is on, looks at its children and wakes it."""
    store, idle = runtime.store, idle_runtime(runtime)
    child, _ = idle.service.submit(A, "test.noop", {})
    store.request_cancel(child.id, "alice")
    parent, _ = idle.service.submit(A, "test.noop", {})
    store.claim(parent.id, ClaimTerms(60_000, "w", 5))
    change = Change.waiting("Waiting for 1 child job.", children_json=json.dumps([child.id]))
    assert store.park(parent.id, 1, change, look_in_ms=0)[0] == "ok"
    wait_until(lambda: store.get(parent.id).state is not JobState.SUSPENDED, 5,  # type: ignore[union-attr]
               message="the waker in the worker to wake the parent")

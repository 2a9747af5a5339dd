"""Leases, fencing, duplicate deliveries and transient retries, on the real store and worker."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import ANY

import pytest
import redis

from tasks_backend import Principal
from tasks_backend.model.domain import JobState, now_ms
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.fields import Change
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")
ALICE = Principal("alice")


def state(runtime: Runtime, job_id: str) -> JobState:
    return runtime.service.get(ALICE, job_id).state


def test_transient_errors_are_retried_with_backoff(runtime: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "runs"
    record, _ = runtime.service.submit(ALICE, "test.flaky", {"ledger": str(ledger), "failures": 2})
    wait_until(lambda: state(runtime, record.id) is JobState.COMPLETED, 15, message="completion")
    done = runtime.service.get(ALICE, record.id)
    assert done.result == {"runs": 3} and done.retries == 2


def test_retries_are_bounded(runtime: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "runs"
    record, _ = runtime.service.submit(ALICE, "test.flaky", {"ledger": str(ledger), "failures": 100})
    wait_until(lambda: state(runtime, record.id) is JobState.FAILED, 15, message="failure")
    failed = runtime.service.get(ALICE, record.id)
    assert failed.error == {"message": "run 4 failed", "type": "Transient"}
    assert len(ledger.read_text().splitlines()) == 4


def test_duplicate_delivery_of_a_running_job_does_not_run_it_twice(runtime: Runtime, settings: object,
                                                                   tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    record, _ = runtime.service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 2, "gate": str(gate)})
    wait_until(lambda: '"effect"' in (ledger.read_text() if ledger.exists() else ""), message="step 0")
    runtime.dispatcher.publish(record.id, "test.steps")  # a redelivery, as after a visibility timeout
    broker = redis.Redis.from_url(runtime.settings.effective_broker_url)
    wait_until(lambda: broker.llen(runtime.settings.queue) == 0, message="the duplicate to be consumed")
    Path(f"{gate}.1").touch()
    wait_until(lambda: state(runtime, record.id) is JobState.COMPLETED, message="completion")
    entries = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert [e["event"] for e in entries] == ["start", "effect", "effect"]


def test_a_worker_that_lost_its_lease_can_change_nothing(runtime: Runtime) -> None:
    store, svc = runtime.store, runtime.service
    idle = runtime.settings.with_(queue="nobody-listens")
    from tasks_backend.service.runtime import build_runtime

    record, _ = build_runtime(idle).service.submit(ALICE, "test.noop", {})
    outcome, claimed = store.claim(record.id, ClaimTerms(1, "a", 5))
    assert outcome == "ok" and claimed is not None and claimed.state is JobState.RUNNING
    old = claimed.token
    # the lease lapses; the sweeper requeues the job and another worker claims it
    wait_until(lambda: store.sweep_many([record.id], grace_ms=1000, max_attempts=5, abandoned_error={},
                                        backlog=None)[0][0] == "republish", message="requeue")
    outcome, reclaimed = store.claim(record.id, ClaimTerms(60_000, "b", 5))
    assert outcome == "ok" and reclaimed is not None
    new = reclaimed.token
    assert new > old
    assert store.progress(record.id, old, message="stale", done=1, total=2) == -1
    assert store.record_step(record.id, old, "s", "1")[0] == "fenced"
    assert store.renew_many([(record.id, old), (record.id, new)], lease_ms=60_000) == [-1, 0]
    assert store.transition(record.id, JobState.COMPLETED, token=old, change=Change(result_json="1"),)[0] == "fenced"
    assert svc.get(ALICE, record.id).state is JobState.RUNNING
    # a live lease also keeps a second claim away
    assert store.claim(record.id, ClaimTerms(1000, "c", 5))[0] == "busy"
    assert store.transition(record.id, JobState.COMPLETED, token=new, change=Change(result_json="1"),)[0] == "ok"
    assert svc.get(ALICE, record.id).result == 1


def test_terminal_states_refuse_every_transition(runtime: Runtime) -> None:
    record, _ = runtime.service.submit(ALICE, "test.noop", {})
    wait_until(lambda: state(runtime, record.id) is JobState.COMPLETED, message="completion")
    for target in JobState:
        outcome, before, _ = runtime.store.transition(record.id, target, sweep_in_ms=0)
        assert (outcome, before) == ("illegal", "completed")
    assert runtime.store.claim(record.id, ClaimTerms(1000, "x", 5))[0] == "terminal"


def test_sweeper_drops_an_orphan_of_a_lost_idempotency_race(runtime: Runtime) -> None:
    """The loser of an idempotency race wrote a job, then died before removing it: never run it."""
    owner = "alice"
    winner, _ = runtime.service.submit(owner, "test.noop", {}, idempotency_key="race")
    now = now_ms()
    fields = {"owner": owner, "op": "test.noop", "state": "queued", "created": str(now - 60_000),
              "updated": str(now - 60_000), "ttl": "600000", "poll": "100",
              "params": "{}", "idem": "race"}
    orphan_id = "00000000-0000-4000-8000-000000000001"
    runtime.store.redis.hset(runtime.store.keys.job(orphan_id), mapping=fields)
    runtime.store.redis.pexpire(runtime.store.keys.job(orphan_id), 600_000)
    counts: dict[str, int] = {}

    def dropped() -> bool:  # the sweeper first gives a worker that may hold its message a grace to claim it
        runtime.store.schedule_sweep(orphan_id, -1)
        for action, count in runtime.sweeper().sweep_once().items():
            counts[action] = counts.get(action, 0) + count
        return "orphan" in counts

    wait_until(dropped, 10, interval=0.1, message="the orphan to be dropped")
    assert counts["orphan"] == 1 and "republish" not in counts
    assert runtime.store.get(orphan_id) is None
    wait_until(lambda: state(runtime, winner.id) is JobState.COMPLETED, message="the winner to run")


def test_finished_jobs_leave_the_sweep_schedule_and_are_counted_within_a_tick(runtime: Runtime) -> None:
    """A worker batches both once a second; a finished job is never swept meanwhile."""
    alice = Principal("alice")
    record, _ = runtime.service.submit(alice, "test.noop", {})
    sweep, jobs = runtime.store.keys.sweep(), runtime.store.keys.stats("jobs")
    counted = "test.noop|completed|sum"
    before = float(runtime.store.redis.hget(jobs, counted) or 0)
    assert runtime.store.redis.zscore(sweep, record.id) is not None
    runtime.service.wait(alice, record.id, 20)
    wait_until(lambda: runtime.store.redis.zscore(sweep, record.id) is None, 5, message="unscheduled")
    wait_until(lambda: float(runtime.store.redis.hget(jobs, counted) or 0) > before, 5, message="counted")


def test_a_parked_job_is_dropped_from_the_schedule_unless_an_answer_scheduled_it_again(
        runtime: Runtime, tmp_path: Path) -> None:
    """The sweeper drops a parked job's entry only if nobody wrote it since the sweeper read it: an answer
    that queues the job meanwhile writes a new entry, which must stand."""
    alice = Principal("alice")
    store, sweep = runtime.store, runtime.store.keys.sweep()
    record, _ = runtime.service.submit(alice, "test.ask_twice", {"ledger": str(tmp_path / "a")})
    wait_until(lambda: runtime.service.get(alice, record.id).state is JobState.INPUT_REQUIRED, message="parked")
    store.schedule_sweep(record.id, -1)
    _, due = store.due_for_sweep(1000)
    seen = dict(due)[record.id]
    assert store.sweep_many([record.id], grace_ms=1000, max_attempts=5, abandoned_error={},
                            backlog=None)[0][0] == "done"
    runtime.service.provide_input(alice, record.id, {"first": {"v": 1}})  # answered meanwhile
    store.settle_sweep([(record.id, seen, None)])
    assert store.redis.zscore(sweep, record.id) is not None
    # Parked again (on the second question) and nobody answers: the sweeper drops its entry.
    wait_until(lambda: runtime.service.get(alice, record.id).input_requests == {"second": ANY}, message="parked")
    store.schedule_sweep(record.id, -1)
    wait_until(lambda: runtime.sweeper().sweep_once() is not None and store.redis.zscore(sweep, record.id) is None,
               message="the entry to be dropped")
    runtime.service.cancel(alice, record.id)


def test_a_finished_job_left_on_the_schedule_is_dropped_not_rerun(runtime: Runtime) -> None:
    """A worker killed before writing its batch leaves finished jobs scheduled: the sweeper drops them."""
    alice = Principal("alice")
    record, _ = runtime.service.submit(alice, "test.noop", {})
    done = runtime.service.wait(alice, record.id, 20)
    assert done.state is JobState.COMPLETED
    sweep = runtime.store.keys.sweep()

    def swept() -> bool:
        runtime.store.schedule_sweep(record.id, -1)
        runtime.sweeper().sweep_once()
        return runtime.store.redis.zscore(sweep, record.id) is None

    wait_until(swept, 5, message="the sweeper to drop the entry")
    after = runtime.service.get(alice, record.id)
    assert (after.state, after.attempts, after.result, after.updated_ms) == (
        JobState.COMPLETED, done.attempts, done.result, done.updated_ms)

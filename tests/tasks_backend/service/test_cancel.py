"""One cancel: the job is `cancelled` when the call returns, and its worker, fenced out at once, records
nothing more (no progress, step, question or result) and stops, counted as cancelled, not as an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks_backend import Principal
from tasks_backend.errors import JobNotCancelable
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.claims import ClaimTerms
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")
ALICE = Principal("alice")


def cancelled_runs(runtime: Runtime) -> int:
    """How many runs of test.wait_then workers counted as cancelled (the sum of the duration buckets)."""
    figures = runtime.store.redis.hgetall(runtime.store.keys.stats("jobs"))
    return sum(int(v) for k, v in figures.items() if k.startswith("test.wait_then|cancelled|le"))


@pytest.mark.parametrize("then", ["ask", "step", "progress", "return"])
def test_a_cancelled_run_records_nothing_more(runtime: Runtime, tmp_path: Path, then: str) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    record, _ = runtime.service.submit(ALICE, "test.wait_then", {"ledger": str(ledger), "gate": str(gate),
                                                                 "then": then})
    wait_until(lambda: ledger.exists() and runtime.service.get(ALICE, record.id).state is JobState.RUNNING,
               message="the job to run")
    counted = cancelled_runs(runtime)

    answer = runtime.service.cancel(ALICE, record.id)
    assert answer.state is JobState.CANCELLED and answer.status_message == "Cancelled."
    feed = runtime.store.events(record.id, "0-0", 0)
    gate.touch()  # the job now asks, records a step, reports progress or returns: all too late

    wait_until(lambda: runtime.store.redis.zscore(runtime.store.keys.sweep(), record.id) is None, 10,
               message="the worker to stop and let go of the job")
    wait_until(lambda: cancelled_runs(runtime) == counted + 1, 10, message="the worker to count the run")
    after = runtime.service.get(ALICE, record.id)
    assert (after.state, after.status_message, after.updated_ms, after.result, after.input_requests,
            after.progress) == (JobState.CANCELLED, "Cancelled.", answer.updated_ms, None, None, None)
    assert runtime.store.events(record.id, "0-0", 0) == feed  # nothing appended after the cancel
    assert runtime.store.recorded_step(record.id, "late") is None
    assert [line for line in ledger.read_text().splitlines() if "effect" in line] == []


def test_cancel_of_a_finished_job_is_refused(runtime: Runtime) -> None:
    record, _ = runtime.service.submit(ALICE, "test.noop", {})
    assert runtime.service.wait(ALICE, record.id, 20).state is JobState.COMPLETED
    with pytest.raises(JobNotCancelable):
        runtime.service.cancel(ALICE, record.id)


def test_a_parent_cancelled_as_its_child_is_made_cancels_the_child(runtime: Runtime,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel of the parent after the child was made (and taken by a worker) but before it was in the parent's
    index misses it; the index, which reads the parent's state as it adds the child, tells, and the child is
    cancelled."""
    idle = build_runtime(runtime.settings.with_(queue=f"{runtime.settings.queue}-idle"))  # jobs wait for a claim
    store, service = idle.store, idle.service
    parent, _ = service.submit(ALICE, "test.noop", {})
    made: list[str] = []
    create = store.create

    def create_then_cancel_parent(new: dict[str, str], job_id: str, *args: object, **kwargs: object) -> object:
        answer = create(new, job_id, *args, **kwargs)  # type: ignore[arg-type]
        made.append(job_id)
        store.claim(job_id, ClaimTerms(60_000, "w", 5))  # a worker runs the child already
        service.cancel(ALICE, parent.id)
        return answer

    monkeypatch.setattr(store, "create", create_then_cancel_parent)
    child, _ = service.submit(ALICE, "test.noop", {}, parent_id=parent.id)
    assert made == [child.id]
    assert service.get(ALICE, child.id).state is JobState.CANCELLED

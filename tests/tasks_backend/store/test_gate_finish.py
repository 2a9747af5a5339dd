"""A run's last transition and its leave from the dispatch gate in one script (`RedisStore.transition` with a
`GateLeave`): the short way for a job sent past the gate (`gate/finish_bypassed.lua`), and the full one
(`gate/finish.lua`) it hands over to when the gate holds more for the job; against a real Redis that is also the
broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.running.admission import DispatchGate
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.admission import GateLeave
from tasks_backend.store.claims import ClaimTerms
from tests.tasks_backend.store.test_gate_bypass import SLOTS, made, queued, submit, where


@pytest.fixture
def runtime(redis_base: str) -> Iterator[Runtime]:
    yield from made(redis_base)


@pytest.fixture
def gate(runtime: Runtime) -> DispatchGate:
    return DispatchGate(runtime.store, runtime.dispatcher, runtime.settings)


def claimed(rt: Runtime, job_id: str) -> JobRecord:
    outcome, record = rt.store.claim(job_id, ClaimTerms(60_000, "worker", 3))
    assert outcome == "ok" and record is not None
    return record


def end(rt: Runtime, gate: DispatchGate, record: JobRecord, request_id: str | None = None) -> GateLeave:
    """The run completes as a worker ends it (`Executor._finish`): the gate's leave rides in the transition."""
    leave = gate.leaving(record, JobState.COMPLETED.value, rt.service.registry.get)
    assert leave is not None
    outcome, _, _ = rt.store.transition(record.id, JobState.COMPLETED, token=record.token, unschedule=False,
                                        request_id=request_id, leave=leave)
    assert outcome == "ok" and leave.taken
    gate.left(leave)
    return leave


@pytest.fixture
def full_finishes(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs whose run's end took the full script (each call still made)."""
    made_for: list[str] = []
    full = runtime.store.gate_finish

    def counted(call: object, job_id: str, *args: object, **kwargs: object) -> object:
        made_for.append(job_id)
        return full(call, job_id, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.store, "gate_finish", counted)
    return made_for


def test_a_bypassed_jobs_run_ends_the_short_way_dropping_only_its_entry(runtime: Runtime, gate: DispatchGate,
                                                                         full_finishes: list[str]) -> None:
    alice = [submit(runtime, "alice") for _ in range(4)]
    assert where(runtime, alice) == ["f", "f", "b", "b"]
    record = claimed(runtime, alice[2])
    leave = end(runtime, gate, record)
    assert leave.lone and leave.bypassed and leave.released == [] and full_finishes == []
    assert runtime.store.get(alice[2]).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert where(runtime, alice) == ["f", "f", None, "b"]
    assert runtime.store.redis.zcard(gate.call().key("flight")) == SLOTS  # no room made: it was never counted
    # A run that parks keeps its entry (a later admission reuses it): that leave is the full one.
    parking = gate.leaving(claimed(runtime, alice[3]), JobState.INPUT_REQUIRED.value, runtime.service.registry.get)
    assert parking is not None and not parking.lone


def test_a_run_end_tried_the_short_way_for_a_job_in_flight_takes_the_full_leave_and_lets_a_held_job_in(
        runtime: Runtime, gate: DispatchGate, full_finishes: list[str]) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS)]
    bob = submit(runtime, "bob")  # alone past the slots: sent past the gate
    carol = submit(runtime, "carol")  # another owner's: the bypass ends, and she is held
    assert where(runtime, [*alice, bob, carol]) == ["f", "f", "b", "h"]
    assert gate.lone  # a guess from nothing yet: the short way first
    leave = end(runtime, gate, claimed(runtime, alice[0]))
    assert full_finishes == [alice[0]] and leave.bypassed is False
    assert runtime.store.get(alice[0]).state is JobState.COMPLETED  # type: ignore[union-attr]
    # Its room was filled in the same call: carol's job (the owner served longest ago) went.
    assert where(runtime, [alice[0], carol]) == [None, "f"] and carol in queued(runtime)
    assert runtime.store.redis.zcard(gate.call().key("flight")) == SLOTS
    # The next run's end here goes the full way at once.
    following = gate.leaving(claimed(runtime, alice[1]), JobState.COMPLETED.value, runtime.service.registry.get)
    assert following is not None and not following.lone


def test_the_short_way_applied_twice_answers_the_same_and_moves_nothing_more(runtime: Runtime,
                                                                              gate: DispatchGate) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    record = claimed(runtime, alice[-1])
    first = end(runtime, gate, record, request_id="finish-1")
    again = end(runtime, gate, record, request_id="finish-1")  # its reply was lost: retried as it was
    assert first.bypassed and again.bypassed and again.released == []
    assert where(runtime, alice) == ["f", "f", None]
    assert runtime.store.get(alice[-1]).state is JobState.COMPLETED  # type: ignore[union-attr]


def test_a_full_leave_of_a_bypassed_job_turns_the_guess_back_to_the_short_way(runtime: Runtime,
                                                                              gate: DispatchGate) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    gate.lone = False
    leave = end(runtime, gate, claimed(runtime, alice[-1]))
    assert not leave.lone and leave.bypassed is True and gate.lone
    assert where(runtime, alice) == ["f", "f", None]

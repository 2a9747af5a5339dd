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
from tests.support.gate import SLOTS, made, queued, submit, where


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


def test_the_short_way_applied_twice_answers_the_same_and_moves_nothing_more(
        runtime: Runtime, gate: DispatchGate, full_finishes: list[str]) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    record = claimed(runtime, alice[-1])
    leave = gate.leaving(record, JobState.COMPLETED.value, runtime.service.registry.get)
    assert leave is not None and leave.lone

    def finish() -> tuple[str, str, int]:  # one request, retried as `through_outage` does: the same leave
        return runtime.store.transition(record.id, JobState.COMPLETED, token=record.token, unschedule=False,
                                        request_id="finish-1", leave=leave)

    first = finish()
    assert first[0] == "ok" and leave.bypassed and full_finishes == []
    again = finish()  # its reply was lost: the entry is gone, so the full finish answers the replay
    assert again == first and full_finishes == [record.id] and leave.bypassed is None
    assert where(runtime, alice) == ["f", "f", None]
    assert runtime.store.get(alice[-1]).state is JobState.COMPLETED  # type: ignore[union-attr]


def test_a_fenced_run_end_leaves_the_bypassed_entry_to_the_run_that_holds_the_job(
        runtime: Runtime, gate: DispatchGate, full_finishes: list[str]) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    record = claimed(runtime, alice[-1])
    leave = gate.leaving(record, JobState.COMPLETED.value, runtime.service.registry.get)
    assert leave is not None
    # A run whose lease another worker took over (a newer token) ends late: its move is refused.
    outcome, _, _ = runtime.store.transition(record.id, JobState.COMPLETED, token=record.token + 1, unschedule=False,
                                             leave=leave)
    assert outcome == "fenced" and full_finishes == []  # the move was not made: nor is the gate's leave
    assert runtime.store.get(record.id).state is JobState.RUNNING  # type: ignore[union-attr]
    assert where(runtime, [record.id]) == ["b"]


@pytest.mark.parametrize("entry", [None, "x|5|0|1||o|", '{"t": "f", "p": 5, "o": "o"}'],
                         ids=["none", "out", "json"])
def test_a_job_the_gate_has_no_bypassed_entry_for_ends_the_full_way(runtime: Runtime, gate: DispatchGate,
                                                                   full_finishes: list[str], entry: str | None) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    jobs_key = gate.call().key("jobs")
    if entry is None:
        runtime.store.redis.hdel(jobs_key, alice[-1])
    else:
        runtime.store.redis.hset(jobs_key, alice[-1], entry)
    leave = end(runtime, gate, claimed(runtime, alice[-1]))
    assert full_finishes == [alice[-1]] and leave.bypassed is False
    assert where(runtime, [alice[-1]]) == [None]


def test_the_gates_call_is_built_once_unless_the_push_counters_ttl_is_due(runtime: Runtime) -> None:
    gate = DispatchGate(runtime.store, runtime.dispatcher, runtime.settings)
    plain = gate.call()  # the fixture's first call renewed the counter's TTL already
    assert plain.push is not None and plain.push[2] == "" and gate.call() is plain
    runtime.dispatcher._ttl_renewed = -1e9  # type: ignore[attr-defined]  # a renewal due again
    renewing = gate.call()
    assert renewing is not plain and renewing.push is not None and renewing.push[2] != ""
    assert gate.call() is plain


def test_a_full_leave_of_a_bypassed_job_turns_the_guess_back_to_the_short_way(runtime: Runtime,
                                                                              gate: DispatchGate) -> None:
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    gate.lone = False
    leave = end(runtime, gate, claimed(runtime, alice[-1]))
    assert not leave.lone and leave.bypassed is True and gate.lone
    assert where(runtime, alice) == ["f", "f", None]


def test_a_workers_run_ends_follow_where_its_last_job_was(runtime: Runtime, full_finishes: list[str]) -> None:
    """The runs as this process's executor makes them: each end tries the short way when the last run it ended here
    had been sent past the gate, and the full leave otherwise."""
    alice = [submit(runtime, "alice") for _ in range(SLOTS + 3)]
    assert where(runtime, alice) == ["f", "f", "b", "b", "b"]
    executor = runtime.executor()
    for job_id in (alice[0], alice[2], alice[3], alice[4]):
        assert executor.run(job_id) == JobState.COMPLETED.value
    # The first tried the short way (a guess from nothing), was refused and took the full leave; so did the next,
    # by the guess the first left; that one had been bypassed, and the two after it went the short way.
    assert full_finishes == [alice[0], alice[2]]
    assert where(runtime, alice) == [None, "f", None, None, None]


def test_a_workers_publish_renews_the_gates_keys_without_setting_them_back(runtime: Runtime,
                                                                          gate: DispatchGate) -> None:
    """The hot paths keep a gate key an eighth past its TTL (`keep` in prelude.lua) so that most of them only read
    it; a publish of a worker's slots renews every gate key the same way, never back down to the TTL itself (the next
    submit would then write each again)."""
    submit(runtime, "alice")
    jobs = runtime.store.keys.gate(runtime.settings.queue, "jobs")
    kept = runtime.store.redis.pttl(jobs)
    assert kept > 0
    gate.tick(worker="w1", slots=2)
    assert runtime.store.redis.pttl(jobs) >= kept - 5_000
    runtime.store.redis.persist(jobs)  # a key left without a TTL gets one
    gate.tick(worker="w1", slots=3)
    assert runtime.store.redis.pttl(jobs) >= kept - 5_000

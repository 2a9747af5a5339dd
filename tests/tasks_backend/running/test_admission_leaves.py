"""Leaves from the dispatch gate that no run's end makes (`DispatchGate.prune`, a stale message's claim), racing an
answer or a wake that admits the job again, and the prune's reach past thousands of runs that go on, against a real
Redis that is also the broker.

A wrapped store call stands for the other process acting at that moment: its admission lands between the prune's
read of the job's state and its leave."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.running.admission import PRUNE_PAGE, DispatchGate
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.admission import entry as gate_entry
from tasks_backend.store.outcomes import Claimed
from tests.conftest import make_settings, single_redis, wait_until
from tests.support.gate import made, submit, take, where


@pytest.fixture
def runtime(redis_base: str) -> Iterator[Runtime]:
    """A grace of 50 ms: a job is stale in flight 100 ms after it was sent."""
    yield from made(redis_base, queued_grace_s=0.05)


def gate_of(rt: Runtime) -> DispatchGate:
    return DispatchGate(rt.store, rt.dispatcher, rt.settings)


def parked_with_its_leave_lost(rt: Runtime, state: JobState) -> str:
    """A job sent to a worker whose run parked it, and whose leave from flight was lost (a Redis Cluster's separate
    call, its process killed before it): the record is parked, the gate still counts it in flight."""
    job_id = submit(rt, "alice")
    take(rt, job_id)
    rt.store.redis.hset(rt.store.keys.job(job_id), "state", state.value)
    flight = rt.store.keys.gate(rt.settings.queue, "flight")
    since = float(rt.store.redis.zscore(flight, job_id) or 0)
    wait_until(lambda: rt.store.gate_tick(gate_of(rt).call())[0] > since + 100, message="stale in flight")
    return job_id


def parked(rt: Runtime, state: JobState) -> str:
    """A job sent to a worker whose run parked it, and left flight as it did so."""
    job_id = submit(rt, "alice")
    take(rt, job_id)
    rt.store.redis.hset(rt.store.keys.job(job_id), "state", state.value)
    gate_of(rt).leave([job_id], final=False)
    return job_id


def answered(rt: Runtime, job_id: str) -> None:
    """Another process: the job's answer queues it, and the gate admits it again (`resume`)."""
    rt.store.redis.hset(rt.store.keys.job(job_id), "state", JobState.QUEUED.value)
    gate_of(rt).resume(job_id, "test.noop")


def republished(rt: Runtime, job_id: str) -> None:
    """Another process: the job's answer queued it while its run's lost leave kept it in flight (so the answer's
    admission changed nothing), and the sweeper then admits it again in place of that run (`readmit`)."""
    rt.store.redis.hset(rt.store.keys.job(job_id), "state", JobState.QUEUED.value)
    gate_of(rt).readmit(job_id, "test.noop")


def after(call: Callable[..., Any], then: Callable[[], None]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        answer = call(*args, **kwargs)
        then()
        return answer
    return wrapped


@pytest.mark.parametrize("state", [JobState.INPUT_REQUIRED, JobState.SUSPENDED])
def test_a_parked_job_whose_leave_was_lost_leaves_flight_at_the_prune(runtime: Runtime, state: JobState) -> None:
    job_id = parked_with_its_leave_lost(runtime, state)
    assert where(runtime, [job_id]) == ["f"]
    gate_of(runtime).prune()
    assert where(runtime, [job_id]) == ["x"]


@pytest.mark.parametrize("how", ["answered after its leave", "republished after its leave was lost"])
def test_an_admission_between_the_prunes_look_and_its_leave_keeps_its_place_in_flight(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "answered after its leave":
        job_id, again = parked(runtime, JobState.INPUT_REQUIRED), answered
    else:
        job_id, again = parked_with_its_leave_lost(runtime, JobState.INPUT_REQUIRED), republished
    flight = runtime.store.keys.gate(runtime.settings.queue, "flight")
    monkeypatch.setattr(runtime.store, "states_of",
                        after(runtime.store.states_of, lambda: again(runtime, job_id)))
    gate_of(runtime).prune()
    monkeypatch.undo()
    # Admitted again and sent: its run is counted in flight, against a slot, until that run ends.
    assert where(runtime, [job_id]) == ["f"]
    assert runtime.store.redis.zcard(flight) == 1


def test_a_stale_message_claimed_while_its_job_is_parked_leaves_its_new_admission_in_flight(runtime: Runtime) -> None:
    """The claim found the job parked; by the time its outcome reaches the gate, an answer admitted it again."""
    job_id = parked(runtime, JobState.INPUT_REQUIRED)
    answered(runtime, job_id)
    assert where(runtime, [job_id]) == ["f"]
    gate_of(runtime).after_run(job_id, Claimed.PARKED)
    assert where(runtime, [job_id]) == ["f"]


def test_a_lost_run_behind_a_pages_worth_of_runs_that_go_on_leaves_flight(redis_base: str) -> None:
    """More long runs in flight than one prune looks at, all going on, and behind them a finished job whose leave
    was lost: the prunes page through the flight and reach it."""
    rt = build_runtime(make_settings(single_redis(redis_base), max_active_jobs=0, rate_limit=0,
                                     queued_grace_s=0.05, dispatch_slots=PRUNE_PAGE + 100))
    gate = gate_of(rt)
    call, owner = gate.call(), rt.store.keys.gate_owner("alice")
    running = [f"run-{uuid.uuid4().hex}" for _ in range(PRUNE_PAGE + 50)]
    lost = f"x-lost-{uuid.uuid4().hex}"  # after every run of its millisecond, as the flight sorts them
    pipe = rt.store.redis.pipeline(transaction=False)
    for job_id in running:
        pipe.hset(rt.store.keys.job(job_id), mapping={"state": JobState.RUNNING.value})
        pipe.pexpire(rt.store.keys.job(job_id), 600_000)
    pipe.hset(rt.store.keys.job(lost), mapping={"state": JobState.COMPLETED.value})
    pipe.pexpire(rt.store.keys.job(lost), 600_000)
    pipe.execute()
    for job_id in [*running, lost]:  # the lost one sent last: in flight the shortest
        rt.store.gate_admit(call, job_id, gate_entry(owner, 5, "test.noop"), "0")
    assert where(rt, [running[0], lost]) == ["f", "f"]
    flight = rt.store.keys.gate(rt.settings.queue, "flight")
    since = float(rt.store.redis.zscore(flight, lost) or 0)
    wait_until(lambda: rt.store.gate_tick(call)[0] > since + 100, message="all stale in flight")
    for _ in range(3):
        gate.prune()
    assert where(rt, [lost]) == [None]
    assert rt.store.redis.zcard(flight) == len(running)

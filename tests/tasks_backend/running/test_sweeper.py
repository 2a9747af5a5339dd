"""The sweeper: no queued job is stranded, a backlog is not mistaken for a lost publish, and one pass
looks at everything that is due."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from tasks_backend import Principal
from tasks_backend.model.domain import JobState
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.fields import new_job
from tasks_backend.store.jobs import RedisStore
from tests.conftest import wait_until

ALICE, BOB = Principal("alice"), Principal("bob")


def own_runtime(runtime: Runtime, **overrides: Any) -> Runtime:
    """A runtime with its own keys and a queue no worker reads: its sweep schedule is this test's alone."""
    name = f"{runtime.settings.key_prefix}-{secrets.token_hex(3)}"
    return build_runtime(runtime.settings.with_(key_prefix=name, queue=name, **overrides))


def broker_of(rt: Runtime) -> Any:
    """The connection the dispatcher pushes job messages on (the store's own when they share a Redis)."""
    dispatcher: Any = rt.dispatcher
    return dispatcher.broker


def message_job(raw: str) -> str:
    body = json.loads(base64.b64decode(json.loads(raw)["body"]))
    return str(body[0][0])


class DiesAfterInput(RedisStore):
    """A web process that dies right after the answers were recorded, before anything else it meant to do."""

    def provide_input(self, *args: Any, **kwargs: Any) -> Any:
        super().provide_input(*args, **kwargs)
        raise RuntimeError("the process died")


@pytest.mark.usefixtures("worker")
def test_a_job_queued_by_an_answer_runs_even_if_the_answering_process_dies(runtime: Runtime,
                                                                          tmp_path: Path) -> None:
    record, _ = runtime.service.submit(ALICE, "test.ask_twice", {"ledger": str(tmp_path / "ledger")})
    wait_until(lambda: runtime.service.get(ALICE, record.id).state is JobState.INPUT_REQUIRED, message="parked")
    dying = DiesAfterInput(runtime.store.redis, runtime.store.keys, max_ttl_ms=runtime.store.max_ttl_ms)
    with pytest.raises(RuntimeError):
        JobService(dying, runtime.registry, runtime.dispatcher, runtime.settings).provide_input(
            ALICE, record.id, {"first": {"v": 1}})
    assert runtime.service.get(ALICE, record.id).state is JobState.QUEUED  # and nobody published it

    def moved_on() -> bool:
        runtime.sweeper().sweep_once()
        return "second" in (runtime.service.get(ALICE, record.id).input_requests or {})

    wait_until(moved_on, 20, interval=0.1, message="the sweeper to publish the job, and the job to run on")
    runtime.service.cancel(ALICE, record.id)


def test_a_backlog_is_not_republished_while_its_messages_wait(runtime: Runtime) -> None:
    rt = own_runtime(runtime, queued_grace_s=0.2)
    broker, queue = broker_of(rt), rt.settings.queue
    jobs = [rt.service.submit(ALICE, "test.noop", {})[0].id for _ in range(5)]
    assert broker.llen(queue) == 5
    looks: dict[str, int] = {}

    def looked_often() -> bool:
        for action, count in rt.sweeper().sweep_once().items():
            looks[action] = looks.get(action, 0) + count
        assert "republish" not in looks and broker.llen(queue) == 5, looks
        return looks.get("later", 0) >= 5 * 4

    # Each job is looked at several times past its grace while its message still waits in the queue.
    wait_until(looked_often, 20, interval=0.1, message="several sweeps past the grace")
    for job_id in jobs:
        rt.service.cancel(ALICE, job_id)


def test_a_message_that_left_the_queue_without_a_claim_is_republished(runtime: Runtime) -> None:
    rt = own_runtime(runtime, queued_grace_s=0.2)
    broker, queue, store = broker_of(rt), rt.settings.queue, rt.store
    jobs = [rt.service.submit(ALICE, "test.noop", {})[0].id for _ in range(3)]
    wait_until(lambda: rt.sweeper().sweep_once().get("later", 0) >= 3, 10, interval=0.1,
               message="a first look past the grace")
    # Workers take the first two and claim them; the third message is lost in a worker's fetch window.
    for expected in jobs[:2]:
        taken = message_job(broker.rpop(queue))
        assert taken == expected
        assert store.claim(taken, ClaimTerms(60_000, "w", 5))[0] == "ok"
    assert message_job(broker.rpop(queue)) == jobs[2]
    republished: dict[str, int] = {}

    def republished_once() -> bool:
        for action, count in rt.sweeper().sweep_once().items():
            republished[action] = republished.get(action, 0) + count
        return republished.get("republish", 0) >= 1

    wait_until(republished_once, 10, interval=0.1, message="the lost message to be republished")
    assert republished["republish"] == 1
    assert [message_job(m) for m in broker.lrange(queue, 0, -1)] == [jobs[2]]
    for job_id in jobs:
        rt.service.cancel(ALICE, job_id)


def test_a_lone_job_whose_message_was_removed_is_republished(runtime: Runtime) -> None:
    rt = own_runtime(runtime, queued_grace_s=0.2)
    broker, queue = broker_of(rt), rt.settings.queue
    lone = rt.service.submit(ALICE, "test.noop", {})[0].id
    assert message_job(broker.rpop(queue)) == lone
    wait_until(lambda: rt.sweeper().sweep_once() is not None and broker.llen(queue) == 1, 10, interval=0.1,
               message="the job to be republished")
    assert message_job(broker.rpop(queue)) == lone
    rt.service.cancel(ALICE, lone)


def test_one_pass_looks_at_every_job_that_is_due(runtime: Runtime) -> None:
    """Thousands of running jobs each need one look per lease period: a pass drains what is due."""
    # More unfinished jobs than one principal may hold by default: this is about the sweeper, not the quota (nor
    # the dispatch gate, which would hold most of them).
    rt = own_runtime(runtime, queued_grace_s=600.0, max_active_jobs=0, fair_shares=False)
    count = 2500
    jobs = [rt.service.submit(ALICE, "test.noop", {})[0].id for _ in range(count)]
    rt.store.redis.zadd(rt.store.keys.sweep(), dict.fromkeys(jobs, 0))
    counts = rt.sweeper().sweep_once()
    assert counts == {"later": count}
    assert rt.store.redis.zcount(rt.store.keys.sweep(), "-inf", 1) == 0
    broker_of(rt).delete(rt.settings.queue)


def test_jobs_the_dispatch_gate_holds_are_not_republished(runtime: Runtime) -> None:
    """Held jobs wait their turn in Redis: no message of theirs was ever sent, so none is lost. (Two owners: a lone
    owner's jobs past the slots go to the broker, and another owner's job takes them back to be held.)"""
    rt = own_runtime(runtime, queued_grace_s=0.05, dispatch_slots=1)
    jobs = [rt.service.submit(who, "test.noop", {})[0].id for who in (ALICE, ALICE, BOB)]
    broker = broker_of(rt)
    assert broker.llen(rt.settings.queue) == 1  # one slot: one job sent, two held
    rt.store.redis.zadd(rt.store.keys.sweep(), dict.fromkeys(jobs, 0))
    counts = rt.sweeper().sweep_once()
    assert counts.get("waiting", 0) >= 2 and counts.get("republish", 0) == 0
    assert broker.llen(rt.settings.queue) == 1
    broker.delete(rt.settings.queue)


def test_the_sweeper_wakes_for_a_delayed_job_between_its_sweeps(runtime: Runtime) -> None:
    rt = own_runtime(runtime, sweep_interval_s=30.0)
    rt.service.submit(ALICE, "test.noop", {}, delay_ms=300)
    broker = broker_of(rt)
    stop = threading.Event()
    sweeper = threading.Thread(target=rt.sweeper().run_forever, args=(stop,), daemon=True)
    sweeper.start()
    try:
        assert broker.llen(rt.settings.queue) == 0
        wait_until(lambda: broker.llen(rt.settings.queue) == 1, timeout=2)
    finally:
        stop.set()
        sweeper.join(5)
        broker.delete(rt.settings.queue)


def test_a_job_queued_again_but_never_admitted_goes_through_the_gate(runtime: Runtime) -> None:
    """A parked job queued again (an answer, a wake) by a process that lost Redis before the gate's admission: the
    sweeper admits it, so that its run counts against the slots and its concurrency value, instead of publishing
    it past the gate."""
    rt = own_runtime(runtime, queued_grace_s=0.05, dispatch_slots=1)
    call, broker = rt.service.admission.call(), broker_of(rt)
    # The first job leaves the gate as a parked run does, the second takes the slot, and their messages are gone.
    first = rt.service.submit(ALICE, "test.noop", {})[0].id
    rt.store.gate_leave(call, [first], final=False)
    second = rt.service.submit(ALICE, "test.noop", {})[0].id
    broker.delete(rt.settings.queue)
    assert [where for where, _ in rt.store.gate_where(call, [first, second])] == ["x", "f"]
    rt.store.redis.zadd(rt.store.keys.sweep(), {first: 0})

    def sent() -> list[str]:  # the second's lost message is republished: it is in flight
        return [message_job(m) for m in broker.lrange(rt.settings.queue, 0, -1)]

    def looked_at() -> bool:
        rt.sweeper().sweep_once()
        return rt.store.gate_where(call, [first])[0][0] != "x" or first in sent()

    wait_until(looked_at, 10, interval=0.1, message="the sweeper to look at the job")
    assert rt.store.gate_where(call, [first])[0][0] == "h"  # held: the one slot is the second job's
    assert first not in sent()
    for job_id in (first, second):
        rt.service.cancel(ALICE, job_id)


@pytest.mark.parametrize("rule", ["a start time", "a concurrency value"])
def test_a_job_made_but_never_admitted_goes_through_the_gate_by_its_record(runtime: Runtime, rule: str) -> None:
    """A job whose submitter died between making it and the gate's admission (a Redis Cluster's two calls): the
    sweeper admits it as the submit would have, from its record. Published as it was, it would start before its
    time, or past its concurrency value's limit."""
    rt = own_runtime(runtime, queued_grace_s=0.05)
    call, broker = rt.service.admission.call(), broker_of(rt)
    now = rt.store.now_ms()
    params = {"ledger": "-", "tag": "t", "customer_id": "c1", "hold": None, "seconds": 0}
    if rule == "a start time":
        operation, run_at, full = "test.noop", now + 3_600_000, []
        params = {}
    else:  # the value's one slot is taken
        operation, run_at = "test.limited_uncancellable", None
        full = [rt.service.submit(ALICE, operation, params)[0].id]
        broker.delete(rt.settings.queue)  # taken by a worker: in flight, its value full
    job_id = str(uuid.uuid4())
    fields = new_job(owner=ALICE.name, operation=operation, ttl_ms=600_000, poll_ms=100,
                     params_json=json.dumps(params), idempotency_key=None, run_at_ms=run_at)
    rt.store.create(fields, job_id, ALICE.name, idem_key=None, idem_value="", ttl_ms=600_000, sweep_in_ms=0)
    assert rt.store.gate_where(call, [job_id])[0][0] is None

    def looked_at() -> bool:
        rt.sweeper().sweep_once()
        return rt.store.gate_where(call, [job_id])[0][0] is not None or job_id in sent(rt, broker)

    wait_until(looked_at, 10, interval=0.1, message="the sweeper to look at the job")
    assert rt.store.gate_where(call, [job_id])[0][0] == ("d" if rule == "a start time" else "h")
    assert job_id not in sent(rt, broker)
    for other in (job_id, *full):
        rt.service.cancel(ALICE, other)
    broker.delete(rt.settings.queue)


def sent(rt: Runtime, broker: Any) -> list[str]:
    return [message_job(m) for m in broker.lrange(rt.settings.queue, 0, -1)]

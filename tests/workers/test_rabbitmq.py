"""RabbitMQ as the broker: what only it has (the delivery limit and its dead letters, delayed delivery for
retries, the backlog count the sweeper reads). What both brokers share runs against each of them in
test_durability.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tasks_backend import Principal
from tasks_backend.config import Settings
from tasks_backend.model.domain import JobState
from tasks_backend.running.dispatch import AmqpDispatcher
from tasks_backend.running.rabbitmq import dead_letter_queue_name, is_amqp
from tasks_backend.running.sweeper import Sweeper
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import make_settings, wait_until
from tests.support import rabbit
from tests.support.procs import print_logs, sweeper_process, worker_process
from workers.celery_app import create_celery

ALICE = Principal("alice")


@pytest.fixture
def amqp_settings(redis_base: str, amqp_url: str) -> Iterator[Settings]:
    settings = make_settings(redis_base, broker_url=amqp_url, queued_grace_s=0.5, sweep_interval_s=0.2)
    try:
        yield settings
    finally:
        rabbit.remove(settings)


def test_amqp_urls_get_the_rabbitmq_dispatcher_and_queue(amqp_settings: Settings) -> None:
    assert is_amqp("amqp://guest@127.0.0.1//") and is_amqp("amqps://h//") and not is_amqp("redis://h/0")
    runtime = build_runtime(amqp_settings)
    assert isinstance(runtime.dispatcher, AmqpDispatcher)
    queue = create_celery(amqp_settings).amqp.queues[amqp_settings.queue]
    assert queue.queue_arguments["x-queue-type"] == "quorum"
    assert queue.queue_arguments["x-delivery-limit"] == amqp_settings.delivery_limit
    assert queue.queue_arguments["x-dead-letter-routing-key"] == dead_letter_queue_name(amqp_settings.queue)


def test_retries_with_a_countdown_go_through_delayed_delivery(amqp_settings: Settings, tmp_path: Path) -> None:
    """Quorum queues cannot hold a message for later; the retry's countdown waits in the broker's delay
    queues (which the worker declares), and a backoff under a second is rounded up, not refused."""
    runtime = build_runtime(amqp_settings)
    worker = worker_process(amqp_settings, tmp_path / "worker.log", concurrency=1)
    try:
        record, _ = runtime.service.submit(ALICE, "test.flaky", {"failures": 2, "ledger": str(tmp_path / "ledger")})
        wait_until(lambda: runtime.service.get(ALICE, record.id).state is JobState.COMPLETED, 60,
                   message="the job to complete after two retries")
        assert runtime.service.get(ALICE, record.id).retries == 2
    except BaseException:
        print(worker.output()[-4000:])
        raise
    finally:
        worker.stop()


def _sweep_until(sweeper: Sweeper, condition: Callable[[dict[str, int]], bool], timeout: float,
                 message: str) -> dict[str, int]:
    """Sweep until `condition` holds for the actions taken so far (summed over the passes)."""
    totals: dict[str, int] = {}

    def swept() -> bool:
        for action, n in sweeper.sweep_once().items():
            totals[action] = totals.get(action, 0) + n
        return condition(totals)

    wait_until(swept, timeout, interval=0.05, message=message)
    return totals


def test_a_job_behind_a_backlog_waits_and_a_lost_message_is_republished(amqp_settings: Settings) -> None:
    """No worker: 300 messages wait ahead of the job. Sweeps over many grace periods leave it alone (a
    time backoff would have republished it three times by then); once the queue loses its messages,
    the next sweeps republish each job once. (Fair shares off: the dispatch gate would hold most of them back.)"""
    runtime = build_runtime(amqp_settings.with_(fair_shares=False))
    svc = runtime.service
    ahead = [svc.submit(ALICE, "test.noop", {})[0].id for _ in range(300)]
    job, _ = svc.submit(ALICE, "test.noop", {})
    assert rabbit.depth(amqp_settings, amqp_settings.queue) == 301
    # The confirms reach the counter in Redis off the submit path, well within the grace.
    assert isinstance(runtime.dispatcher, AmqpDispatcher)
    tally = runtime.dispatcher.tally
    wait_until(lambda: tally.read() == 301, amqp_settings.queued_grace_s, message="the confirms to be counted")
    sweeper = runtime.sweeper()
    start = runtime.store.redis.time()[0]
    totals = _sweep_until(sweeper, lambda _: runtime.store.redis.time()[0] >= start + 5, 15,
                          message="ten grace periods of sweeps")
    assert totals.get("republish", 0) == 0, totals
    assert rabbit.depth(amqp_settings, amqp_settings.queue) == 301
    assert rabbit.purge(amqp_settings) == 301
    _sweep_until(sweeper, lambda t: t.get("republish", 0) >= 301, 30, message="every job to be republished")
    assert rabbit.depth(amqp_settings, amqp_settings.queue) == 301
    assert runtime.store.get(job.id) is not None and runtime.store.get(ahead[0]) is not None


def test_a_message_past_the_delivery_limit_is_dead_lettered_and_its_job_failed(
        redis_base: str, amqp_url: str, tmp_path: Path) -> None:
    """The job kills its whole worker every time; RabbitMQ gets the unacknowledged message back each time.
    Past the delivery limit it dead-letters the message, and the sweeper fails the job with that reason
    (before the attempt limit, set high here, would have)."""
    settings = make_settings(redis_base, broker_url=amqp_url, lease_s=0.5, queued_grace_s=60.0,
                             sweep_interval_s=0.2, max_attempts=20, delivery_limit=2)
    runtime = build_runtime(settings)
    ledger = tmp_path / "ledger"
    dead = dead_letter_queue_name(settings.queue)
    procs = []
    try:
        record, _ = runtime.service.submit(ALICE, "test.crash_worker", {"ledger": str(ledger)})
        for round_ in range(6):
            # Each new worker must find the last one's lease lapsed, or it drops the message as a duplicate.
            wait_until(lambda: _lease_lapsed(runtime, record.id), 10, message="the lease to lapse")
            if rabbit.depth(settings, dead) == 1:
                break
            proc = worker_process(settings, tmp_path / f"w{round_}.log", concurrency=1)
            procs.append(proc)
            assert proc.popen.wait(60) is not None
        assert rabbit.depth(settings, dead) == 1, "the message was not dead-lettered"
        starts = [json.loads(x) for x in ledger.read_text().splitlines()]
        assert len(starts) == settings.delivery_limit + 1
        assert runtime.service.get(ALICE, record.id).state is JobState.RUNNING
        procs.append(sweeper_process(settings, tmp_path / "sweeper.log"))
        wait_until(lambda: runtime.service.get(ALICE, record.id).state is JobState.FAILED, 30,
                   message="the sweeper to fail the job")
        error = runtime.service.get(ALICE, record.id).error
        assert error is not None and error["type"] == "DeliveryLimit", error
        assert "more than 2 times" in error["message"]
        wait_until(lambda: rabbit.depth(settings, dead) == 0, 10, message="the dead letter to be acknowledged")
    except BaseException:
        print_logs(procs)
        raise
    finally:
        for proc in procs:
            proc.stop()
        rabbit.remove(settings)


def _lease_lapsed(runtime: Runtime, job_id: str) -> bool:
    record = runtime.store.get(job_id)
    seconds, micros = runtime.store.redis.time()
    return record is not None and record.lease_until_ms < int(seconds) * 1000 + int(micros) // 1000


def test_the_sweeper_carries_on_while_rabbitmq_is_unreachable(amqp_settings: Settings) -> None:
    """Neither the dead letters nor the backlog can be read: the pass still runs (a lost publish is retried
    with a time backoff), and the job is published once the broker answers again."""
    down = amqp_settings.with_(broker_url=rabbit.DEAD_AMQP_URL)
    runtime = build_runtime(down)
    record, _ = runtime.service.submit(ALICE, "test.noop", {})
    assert runtime.service.get(ALICE, record.id).state is JobState.QUEUED
    _sweep_until(runtime.sweeper(), lambda t: t.get("republish", 0) >= 1, 30, message="a republish attempt")
    assert rabbit.depth(amqp_settings, amqp_settings.queue) == 0
    live = build_runtime(amqp_settings)
    _sweep_until(live.sweeper(), lambda _: rabbit.depth(amqp_settings, amqp_settings.queue) == 1, 30,
                 message="the job to be published once RabbitMQ answers")

"""RabbitMQ as the broker: the quorum job queue, publisher confirms, dead letters, and the backlog count.

The job queue is a quorum queue with a delivery limit: a message its workers died on more than
`Settings.delivery_limit` times goes to `<queue>.dead`, whose jobs the sweeper fails (`DeliveryLimit`). Most
lost workers are handled before that by the lease check (`WorkerLost`); the limit is the backstop for a
message that kills its worker before the job is claimed. Every publish waits for the broker's confirm, so
one that returns is in the queue and one that raises is left to the sweeper, as with Redis.

Rule: a queued job is republished only once the messages confirmed before the sweeper's first look at it
have left the queue (`PushTally`, `sweep_one.lua`): a count that is off delays a republish, never repeats it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import redis
from celery import Celery
from kombu import Connection, Exchange, Queue

from ..config import Settings
from ..errors import DispatchUnavailable, StoreUnavailable
from ..model.domain import JobState
from ..store.fields import Change
from ..store.jobs import RedisStore
from ..store.keys import Keys

log = logging.getLogger(__name__)

AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
#: How often a process adds its confirmed publishes to the Redis counter.
TALLY_FLUSH_S = 0.5
#: Dead letters failed per sweep pass (more wait for the next pass).
DEAD_LETTERS_PER_PASS = 500


def is_amqp(broker_url: str) -> bool:
    return broker_url.split("://", 1)[0] in AMQP_SCHEMES


def dead_letter_queue_name(queue: str) -> str:
    return f"{queue}.dead"


def job_queue(settings: Settings) -> Queue:
    """The job queue as every process declares it (RabbitMQ refuses a declaration with other arguments).

    A topic exchange of its own, because Celery's delayed delivery for quorum queues (retries with a
    countdown) routes through topic exchanges only."""
    return Queue(settings.queue, Exchange(settings.queue, type="topic", durable=True), routing_key=settings.queue,
                 durable=True, queue_arguments={
                     "x-queue-type": "quorum",
                     "x-delivery-limit": settings.delivery_limit,
                     "x-dead-letter-exchange": "",
                     "x-dead-letter-routing-key": dead_letter_queue_name(settings.queue),
                 })


def dead_letter_queue(settings: Settings) -> Queue:
    name = dead_letter_queue_name(settings.queue)
    return Queue(name, Exchange(""), routing_key=name, durable=True, queue_arguments={"x-queue-type": "quorum"})


def amqp_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings that differ for RabbitMQ (the Redis transport's options mean nothing here)."""
    queue = job_queue(settings)
    return {
        # Each publish waits for the broker's ack (or nack, raised): a returned publish is in the queue.
        "broker_transport_options": {"confirm_publish": True},
        "task_queues": [queue],
        "task_default_exchange": settings.queue,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": settings.queue,
        "task_default_queue_type": "quorum",
        # Quorum queues have no global QoS: Celery then sets a per-consumer prefetch (concurrency x 1).
        "worker_detect_quorum_queues": True,
        "worker_disable_prefetch": False,  # a Redis transport option; the prefetch above does its work here
    }


class PushTally:
    """Confirmed publishes, counted in memory and added to a Redis counter by a background thread.

    The sweeper tells a job behind a long backlog from one whose publish was lost by comparing this count
    with the messages waiting now (`waiting`). It is kept off the submit path and flushed every
    `TALLY_FLUSH_S` (at most a quarter of the grace, so a job's own message is counted before the sweeper's
    first look). Messages it misses (redeliveries, delayed retries, a process that died unflushed) make the
    sweeper wait longer; once the queue drains, every message counted before has left it. A count lost for
    good can make a job published just then be republished once near the head of the queue, which its
    claim makes harmless.

    The thread starts with the first count in each process (so a forked child starts its own)."""

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int, flush_s: float = TALLY_FLUSH_S) -> None:
        self.client, self.key, self.ttl_ms, self.flush_s = client, key, ttl_ms, flush_s
        self._lock = threading.Lock()
        self._pending = 0
        self._pid = 0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._pending += n
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="push-tally", daemon=True).start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, 0
        if not pending:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.incrby(self.key, pending)
            pipe.pexpire(self.key, self.ttl_ms)
            pipe.execute()
        except redis.RedisError:
            with self._lock:  # counted on the next try; meanwhile the counter only lags
                self._pending += pending

    def read(self) -> int:
        try:
            return int(self.client.get(self.key) or 0)
        except redis.RedisError as exc:
            raise DispatchUnavailable() from exc

    def _run(self) -> None:
        idle = threading.Event()  # never set: a wait on it is the flush interval
        while True:
            idle.wait(self.flush_s)
            self.flush()


class DeadLetters:
    """Fails the jobs whose messages RabbitMQ dead-lettered after the delivery limit."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app, self.settings = app, settings

    def error(self) -> dict[str, str]:
        return {"type": "DeliveryLimit",
                "message": f"Gave up: the broker delivered this job's message more than {self.settings.delivery_limit}"
                           " times and the worker holding it was lost each time."}

    def fail_all(self, store: RedisStore, limit: int = DEAD_LETTERS_PER_PASS) -> int:
        """Fail the job of each dead-lettered message, then acknowledge it; returns how many were taken.

        A message is acknowledged only after its job's change is written (a replayed change is harmless:
        a job already finished is left as it is), so Redis going away leaves it in the queue."""
        error = json.dumps(self.error())
        taken = 0
        with pooled_channel(self.app) as channel:
            try:
                dead_letter_queue(self.settings)(channel).declare()
                while taken < limit:
                    message = channel.basic_get(dead_letter_queue_name(self.settings.queue), no_ack=False)
                    if message is None:
                        break
                    job_id = _job_id(message)
                    if job_id is not None:
                        failed = Change.failed(error, "Delivery limit reached.")
                        store.transition(job_id, JobState.FAILED, change=failed)
                        log.warning("job %s failed: its message was dead-lettered", job_id)
                    channel.basic_ack(message.delivery_tag)
                    taken += 1
            except StoreUnavailable:
                log.warning("dead letters left for the next pass: Redis is unreachable")
        return taken


def _job_id(message: Any) -> str | None:
    """The job id of a Celery message (protocol 2 carries it as the task id header)."""
    headers = getattr(message, "headers", None) or {}
    task_id = headers.get("id")
    if isinstance(task_id, str) and task_id:
        return task_id
    try:
        args = json.loads(message.body)[0]
        return str(args[0])
    except (ValueError, TypeError, IndexError, KeyError):
        log.warning("a dead-lettered message without a job id was dropped")
        return None


def declare_dead_letter_queue(app: Celery, settings: Settings) -> None:
    """Declare `<queue>.dead` (idempotent): RabbitMQ drops a dead letter whose queue does not exist."""
    with pooled_channel(app) as channel:
        dead_letter_queue(settings)(channel).declare()


def waiting(app: Celery, queue: str) -> int:
    """Messages ready in `queue` (a passive declare; raises if the queue does not exist)."""
    with pooled_channel(app) as channel:
        return int(channel.queue_declare(queue=queue, passive=True)[1])


@contextlib.contextmanager
def pooled_channel(app: Celery) -> Iterator[Any]:
    """A channel of its own on one of the app's pooled broker connections, closed after use.

    The sweeper asks the broker something every pass: a connection per question would fill RabbitMQ's
    log with connections opened and closed. A connection that failed is closed, so that the next use
    connects afresh."""
    pool: Any = app.pool  # (the type stubs mix up the connection and producer pools)
    with pool.acquire(block=True, timeout=2) as conn:
        try:
            conn.ensure_connection(max_retries=1, timeout=2)
            channel: Any = conn.channel()
            try:
                yield channel
            finally:
                with contextlib.suppress(Exception):
                    channel.close()
        except Exception:
            with contextlib.suppress(Exception):
                conn.close()
            raise


def delete_queue(broker_url: str, queue: str) -> None:
    """Delete a job queue, its dead letters and its exchange (tests and soak runs clean up with it)."""
    with Connection(broker_url, connect_timeout=3) as conn:
        conn.ensure_connection(max_retries=1, timeout=3)
        channel: Any = conn.channel()
        try:
            for name in (queue, dead_letter_queue_name(queue)):
                channel.queue_delete(queue=name)
            channel.exchange_delete(exchange=queue)
        finally:
            channel.close()


def pushes_key(settings: Settings) -> str:
    return Keys(settings.key_prefix).queue_pushes(settings.queue)

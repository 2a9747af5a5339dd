"""Publishing "run job <id>" to the broker, and the Celery settings every process shares.

The web app publishes by task name through a producer-only Celery app, so `tasks_backend` never
imports the workers package. Broker options must be the same in every process that uses the broker
(the shortest visibility timeout of any of them wins), hence one function builds them for all.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Protocol

import redis
from celery import Celery

from ..config import Settings
from ..errors import DispatchUnavailable
from ..model.domain import new_uuid
from ..store.connect import keepalive_options
from ..store.jobs import ListPush
from ..store.keys import Keys
from ..store.sentinel import is_sentinel_url
from . import rabbitmq as amqp

RUN_TASK = "tasks_backend.run"
#: How often a process renews the TTL of the queue's push counter.
PUSHES_TTL_RENEW_S = 60.0
#: A job message's body (Celery's protocol 2: args, kwargs, embed), with `%s` for the job id as JSON.
BODY = '[[%s], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
log = logging.getLogger(__name__)


def celery_config(settings: Settings, *, consumer: bool = False) -> dict[str, Any]:
    """Celery settings for every process; `consumer` for a worker, whose main loop reads the broker."""
    broker_options: dict[str, Any] = {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_restore_interval": min(10.0, settings.visibility_timeout_s),
        "unacked_restore_throttle": 1,
        # A worker's main loop has no per-call socket timeout: it costs a poll() before every send and
        # receive there. TCP keepalive and TCP_USER_TIMEOUT drop a dead or unreachable broker within
        # seconds; a broker that is up but stalled holds the loop until it answers (Celery's default).
        # Everyone else (the web reading queue depths, Flower) times out like any other Redis call.
        "socket_timeout": None if consumer else settings.redis_socket_timeout_s,
        # Kombu's default, written out: a worker reads the queue's own list before its priority-9 list, where a lone
        # owner's jobs skip the dispatch gate to (`Keys.bypass_queue`).
        "priority_steps": [0, 3, 6, 9],
        "socket_connect_timeout": 2,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive_options(),
        "health_check_interval": 25,
        # A replayed LPUSH after a lost reply would publish twice; our claim makes that harmless,
        # but there is no reason to invite it.
        "retry_on_timeout": False,
    }
    if is_sentinel_url(settings.effective_broker_url):
        broker_options["master_name"] = settings.redis_service
        # Asking a Sentinel for the primary fails fast (a stalled one is skipped), even in a worker's main loop.
        broker_options["sentinel_kwargs"] = {"socket_timeout": settings.redis_socket_timeout_s,
                                             "socket_connect_timeout": 2}
    config: dict[str, Any] = {
        "broker_url": settings.effective_broker_url,
        "broker_transport_options": broker_options,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 2,
        "task_default_queue": settings.queue,
        "task_serializer": "json",
        "accept_content": ["json"],
        # Our job record is the source of truth; Celery's result store would only go stale.
        "task_ignore_result": True,
        "result_backend": None,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "task_track_started": True,
        "task_send_sent_event": True,
        # Off until a monitor asks: Flower broadcasts `enable_events` every few seconds while it runs, so
        # workers pay for three event publishes per job only while someone is watching.
        "worker_send_task_events": settings.task_events,
        "worker_prefetch_multiplier": 1,
        "worker_disable_prefetch": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_hijack_root_logger": False,
        "task_publish_retry": True,
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.2,
                                      "interval_max": 0.5},
    }
    if amqp.is_amqp(settings.effective_broker_url):
        config.update(amqp.amqp_config(settings))
    config.update(settings.celery_overrides)
    return config


class Dispatcher(Protocol):
    def publish(self, job_id: str, operation: str, countdown_s: float | None = None) -> None: ...

    def ping(self) -> bool: ...

    def backlog(self) -> tuple[int, int] | None:
        """(messages ever pushed to the job queue, messages waiting in it), or None if the broker
        cannot tell; the sweeper tells a job waiting behind others from one whose message was lost."""
        ...

    def bypass_backlog(self) -> tuple[int, int] | None:
        """The same of the bypass list (`Keys.bypass_queue`), where the broker has one, else None."""
        ...


class CeleryDispatcher:
    """Publishes by task name; the message carries only the job id (params stay in Redis)."""

    def __init__(self, settings: Settings, app: Celery | None = None) -> None:
        self.settings = settings
        if app is None:
            app = Celery("tasks_backend.producer", set_as_current=False)
            app.conf.update(celery_config(settings))
        self.app = app

    def publish(self, job_id: str, operation: str, countdown_s: float | None = None) -> None:
        try:
            self.app.send_task(RUN_TASK, args=[job_id], task_id=job_id, queue=self.settings.queue,
                               countdown=countdown_s, shadow=operation, argsrepr=f"[{operation!r}, {job_id!r}]")
        except Exception as exc:  # kombu raises a zoo of transport errors; all mean "not published"
            log.warning("publish failed for job %s: %s", job_id, type(exc).__name__)
            raise DispatchUnavailable() from exc

    def backlog(self) -> tuple[int, int] | None:
        return None  # the sweeper falls back to republishing with a time backoff

    def bypass_backlog(self) -> tuple[int, int] | None:
        return None

    def ping(self) -> bool:
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            return True
        except Exception:
            return False



def operation_in(kept: str) -> str:
    """The operation of what the gate kept for a job: a broker message (`RedisDispatcher.message`) names it in its
    headers; anything else is the operation itself."""
    if not kept.startswith("{"):
        return kept
    return str(json.loads(kept)["headers"]["shadow"])

class RedisDispatcher(CeleryDispatcher):
    """Puts Celery protocol-2 messages straight on the Redis broker list, as kombu's Redis transport does.

    Building a message is a few dictionary operations instead of Celery's publish path (about half a
    millisecond of CPU), and when the broker is the job store's own Redis a submit writes the record,
    indexes it and enqueues it in one round trip (`inline_push`). The message is the one Celery would
    send, minus the `task-sent` event: Flower lists a job from the worker's `task-received` on.
    Delayed publishes (retries with backoff) go through Celery, which knows how to carry an ETA.

    Every push of a job message also counts one on a counter next to the queue, in the same round
    trip, so `pushed - LLEN` is how many messages have left the queue. The count is a lower bound
    (kombu's restores of unacknowledged messages push uncounted), which only makes the sweeper wait
    longer before it republishes, never sooner.
    """

    def __init__(self, settings: Settings, broker: redis.Redis, *, shares_store: bool, app: Celery | None = None,
                 ) -> None:
        super().__init__(settings, app)
        self.broker = broker
        self.shares_store = shares_store
        template = self.app.amqp.as_task_v2("0", RUN_TASK, args=("0",), kwargs={})
        self._headers = {k: v for k, v in template.headers.items() if k not in ("id", "root_id")}
        self._headers["ignore_result"] = True
        self._delivery_info = {"exchange": "", "routing_key": settings.queue}
        self.pushes_key = Keys(settings.key_prefix).queue_pushes(settings.queue)
        self.bypass_pushes_key = Keys(settings.key_prefix).queue_pushes(Keys.bypass_queue(settings.queue))
        self._ttl_renewed = -PUSHES_TTL_RENEW_S
        self.pushes_key_ttl_ms = int(settings.max_ttl_s * 1000) + 86_400_000
        self._envelope = self._template()

    def message(self, job_id: str, operation: str) -> str:
        # The JSON is written once, in __init__, with the five values left as slots (`_envelope`): filling them
        # costs a fifth of two `json.dumps` of the whole message.
        quoted = encode_basestring_ascii(job_id)
        body = base64.b64encode((BODY % quoted).encode()).decode()
        return self._envelope % {"id": quoted, "shadow": encode_basestring_ascii(operation),
                                 "argsrepr": encode_basestring_ascii(f"[{operation!r}, {job_id!r}]"),
                                 "body": f'"{body}"', "tag": f'"{new_uuid()}"'}

    def _template(self) -> str:
        """The message as JSON, with `%(name)s` where each call's values go (already JSON-encoded)."""
        slot = {name: f"\x00{name}" for name in ("id", "shadow", "argsrepr", "body", "tag")}
        text = json.dumps({
            "body": slot["body"],
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {**self._headers, "id": slot["id"], "root_id": slot["id"], "shadow": slot["shadow"],
                        "argsrepr": slot["argsrepr"]},
            "properties": {"correlation_id": slot["id"], "reply_to": "", "delivery_mode": 2,
                           "delivery_info": self._delivery_info, "priority": 0, "body_encoding": "base64",
                           "delivery_tag": slot["tag"]},
        }).replace("%", "%%")
        for name, marker in slot.items():
            text = text.replace(json.dumps(marker), f"%({name})s")
        return text

    def inline_push(self, job_id: str, operation: str) -> ListPush:
        """The publish, for the store to make in a submit's own round trip (only when `shares_store`)."""
        return ListPush(self.settings.queue, self.message(job_id, operation), self.pushes_key, self.counter_ttl_due())

    def _count_push(self, pipe: Any) -> None:
        """Counts the push queued in `pipe` and runs it. After the push: a count lost with the connection only
        undercounts (see the class doc). A counter the push made gets its TTL at once, renewal due or not."""
        ttl_ms = self.counter_ttl_due()
        pipe.incr(self.pushes_key)
        if ttl_ms is not None:
            pipe.pexpire(self.pushes_key, ttl_ms)
        replies = pipe.execute()
        if ttl_ms is None and replies[-1] == 1:
            self.broker.pexpire(self.pushes_key, self.pushes_key_ttl_ms)

    def counter_ttl_due(self) -> int | None:
        """The push counter's TTL when this process should renew it with its next push, else None: a TTL of
        weeks needs no renewal per push."""
        now = time.monotonic()
        if now - self._ttl_renewed < PUSHES_TTL_RENEW_S:
            return None
        self._ttl_renewed = now
        return self.pushes_key_ttl_ms

    def publish(self, job_id: str, operation: str, countdown_s: float | None = None) -> None:
        try:
            if countdown_s:
                super().publish(job_id, operation, countdown_s)
                # Celery pushed the message (held by a worker until its ETA); count it, in a round trip
                # of its own: retries are not a hot path.
                self._count_push(self.broker.pipeline(transaction=False))
                return
            pipe = self.broker.pipeline(transaction=False)
            pipe.lpush(self.settings.queue, self.message(job_id, operation))
            self._count_push(pipe)
        except redis.RedisError as exc:
            log.warning("publish failed for job %s: %s", job_id, type(exc).__name__)
            raise DispatchUnavailable() from exc

    def backlog(self) -> tuple[int, int] | None:
        try:
            pipe = self.broker.pipeline(transaction=False)
            pipe.get(self.pushes_key)
            pipe.llen(self.settings.queue)
            pushed, waiting = pipe.execute()
        except redis.RedisError as exc:
            raise DispatchUnavailable() from exc
        return int(pushed or 0), int(waiting or 0)

    def bypass_backlog(self) -> tuple[int, int] | None:
        try:
            pipe = self.broker.pipeline(transaction=False)
            pipe.get(self.bypass_pushes_key)
            pipe.llen(Keys.bypass_queue(self.settings.queue))
            pushed, waiting = pipe.execute()
        except redis.RedisError as exc:
            raise DispatchUnavailable() from exc
        return int(pushed or 0), int(waiting or 0)

    def ping(self) -> bool:
        """Ask the connection the publishes use (and its fail-fast timeouts), not a new kombu one."""
        try:
            return bool(self.broker.ping())
        except redis.RedisError:
            return False


class AmqpDispatcher(CeleryDispatcher):
    """Publishes to RabbitMQ through Celery, each publish confirmed; see `tasks_backend.running.rabbitmq` for the
    queue's shape, the dead letters and how `backlog` is kept off the submit path."""

    def __init__(self, settings: Settings, store_client: redis.Redis, app: Celery | None = None) -> None:
        super().__init__(settings, app)
        # Flushed well within the grace: the sweeper's first look at a job must find its message counted.
        self.tally = amqp.PushTally(store_client, amqp.pushes_key(settings),
                                    ttl_ms=int(settings.max_ttl_s * 1000) + 86_400_000,
                                    flush_s=min(amqp.TALLY_FLUSH_S, settings.queued_grace_s / 4))
        self.dead_letters = amqp.DeadLetters(self.app, settings)
        self._declared = False

    def publish(self, job_id: str, operation: str, countdown_s: float | None = None) -> None:
        if not self._declared:
            # Once per process, before the first message can exist: a dead letter with no queue is dropped.
            try:
                amqp.declare_dead_letter_queue(self.app, self.settings)
            except Exception as exc:
                log.warning("publish failed for job %s: %s", job_id, type(exc).__name__)
                raise DispatchUnavailable() from exc
            self._declared = True
        if countdown_s:
            # The broker delays in whole seconds (Celery truncates, and refuses a delay under one second):
            # round up, so that a retry never runs before its backoff.
            countdown_s = float(math.ceil(countdown_s))
        super().publish(job_id, operation, countdown_s)
        if not countdown_s:
            # A delayed message waits in Celery's delay queues, not in ours, until it is due: uncounted,
            # it reaches our queue as an uncounted message would (the count only lags).
            self.tally.add()

    def backlog(self) -> tuple[int, int] | None:
        pushed = self.tally.read()
        try:
            return pushed, amqp.waiting(self.app, self.settings.queue)
        except Exception as exc:  # a missing queue included: the sweeper then backs off by time
            raise DispatchUnavailable() from exc

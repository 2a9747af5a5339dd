"""Factories that wire settings into the store, registry, dispatcher and service. No globals."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from celery import Celery

from ..access.auth import Authenticator
from ..access.gate import Gate
from ..access.limits import Limiter
from ..config import Settings
from ..errors import ServiceUnavailable, StoreUnavailable
from ..push.subscriptions import PushStore
from ..running.builtin import spec_of
from ..running.catalog import PublishedOperations
from ..running.declared import declared_in
from ..running.dispatch import AmqpDispatcher, CeleryDispatcher, Dispatcher, RedisDispatcher
from ..running.execution import Executor
from ..running.rabbitmq import is_amqp
from ..running.registry import JobModuleNotFound, Registry
from ..running.sweeper import Sweeper
from ..running.waking import Waker
from ..serving.drain import Drain
from ..serving.tracing import Tracing
from ..store.cluster import ScriptingCluster
from ..store.connect import connect
from ..store.jobs import RedisStore
from ..store.keys import Keys
from ..store.sentinel import is_sentinel_url
from .jobs import JobService
from .schedules import ScheduleService

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    store: RedisStore
    registry: Registry
    dispatcher: Dispatcher
    service: JobService
    limiter: Limiter | None = None
    #: What long-lived responses read through (see `streaming`).
    stream_service: JobService | None = None
    _executor: Executor | None = field(default=None, repr=False)
    _push: PushStore | None = field(default=None, repr=False)
    _schedules: ScheduleService | None = field(default=None, repr=False)
    #: This process's spans (off unless `OTEL_EXPORTER_OTLP_ENDPOINT` was set when the runtime was built).
    tracing: Tracing = field(default_factory=Tracing.off)

    def executor(self) -> Executor:
        """This process's executor (one per process, so one lease keeper thread per process)."""
        if self._executor is None:
            self._executor = Executor(self.store, self.registry, self.dispatcher, self.settings,
                                      spawner=self.spawn, tracing=self.tracing,
                                      actor=self.service)
        return self._executor

    def spawn(self, owner: str, operation: str, params: Any, key: str, parent_id: str,
              ttl_s: float | None = None) -> str:
        """Start a child job for `ctx.spawn`: a submit by the parent's owner, idempotent by `key`, kept `ttl_s`
        (the parent's time left: see `JobContext.spawn`; None: its operation's)."""
        record, _ = self.service.submit(owner, operation, params, idempotency_key=key, ttl_s=ttl_s,
                                        parent_id=parent_id)
        return record.id

    def waker(self) -> Waker:
        return Waker(self.store, self.dispatcher, self.settings, audit=self.service.audit.record)

    def push(self) -> PushStore:
        """The push subscriptions beside the jobs: one per process, as making one registers
        its scripts (a SHA1 of each), which is not a per-request cost."""
        if self._push is None:
            self._push = PushStore(self.store, audit=self.service.audit.record)
        return self._push

    def sweeper(self) -> Sweeper:
        return Sweeper(self.store, self.dispatcher, self.settings,
                       lookup=functools.partial(spec_of, self.service.registry))

    def schedules(self) -> ScheduleService:
        """Recurring jobs over this runtime's job service (one per process)."""
        if self._schedules is None:
            self._schedules = ScheduleService(self.service)
        return self._schedules

    def declare_schedules(self) -> None:
        """Put in place the schedules the job modules declare (see `running.declared`); a process that
        cannot reach Redis now logs it and goes on (the next process to start puts them in place)."""
        try:
            self.schedules().declare(declared_in(self.settings.job_modules))
        except ServiceUnavailable:
            log.warning("declared schedules not put in place: Redis is unreachable")

    def authenticator(self) -> Authenticator:
        return Authenticator(self.settings)

    def gate(self, authenticator: Authenticator | None = None) -> Gate:
        """Authentication and the per-request limits, for an entrance to call once per request."""
        return Gate(authenticator or self.authenticator(), self.limits())

    def streaming(self) -> JobService:
        """The job service that event streams, subscriptions and blocking sends read through: its own Redis
        connections, so that held streams never take the ones polls and submits use, and reads that block for
        `STREAM_BLOCK_MS` (a held stream costs one wake-up per that long, not one per second)."""
        return self.stream_service or self.service

    def stop_streams(self) -> None:
        """End this process's held streams and blocking waits, now and from now on (see `drain`)."""
        self.streaming().drain.stop()

    def limits(self) -> Limiter:
        if self.limiter is None:
            self.limiter = Limiter(self.store.redis, self.store.keys, self.settings)
        return self.limiter


def make_dispatcher(settings: Settings, store_client: redis.Redis, app: Celery | None = None) -> Dispatcher:
    """Direct Redis publishing for a Redis broker (sharing the store's connection when it is the same
    server and database); confirmed publishes for RabbitMQ; Celery's own publishing for any other broker."""
    broker_url = settings.effective_broker_url
    if is_amqp(broker_url):
        return AmqpDispatcher(settings, store_client, app)
    if not broker_url.startswith(("redis://", "rediss://", "unix://", "sentinel://")):
        return CeleryDispatcher(settings, app)
    shares = broker_url == settings.redis_url
    broker = store_client if shares else connect(broker_url, settings.redis_socket_timeout_s,
                                                 service=settings.redis_service)
    return RedisDispatcher(settings, broker, shares_store=shares, app=app)


def build_runtime(settings: Settings | None = None, *, dispatcher: Dispatcher | None = None,
                  registry: Registry | None = None, celery_app: Celery | None = None,
                  tracing: Tracing | None = None) -> Runtime:
    """`tracing`: by default as the `OTEL_*` variables say now (the one place they are read)."""
    settings = settings or Settings.from_env()
    tracing = tracing if tracing is not None else Tracing.from_env()
    client = connect(settings.redis_url, settings.redis_socket_timeout_s, service=settings.redis_service)
    limit_connections(client, settings.redis_max_connections)
    store = RedisStore(client, Keys(settings.key_prefix), max_ttl_ms=int(settings.max_ttl_s * 1000),
                       replicas=(settings.submit_replicas, int(settings.submit_replicas_timeout_s * 1000)))
    registry = registry if registry is not None else Registry.from_modules(settings.job_modules)
    dispatcher = dispatcher or make_dispatcher(settings, client, celery_app)
    limiter = Limiter(client, store.keys, settings)
    service = JobService(store, registry, dispatcher, settings, limits=limiter)
    service.tracing = tracing
    return Runtime(settings, store, registry, dispatcher, service, limiter,
                   _stream_service(settings, store, registry, dispatcher, service.drain), tracing=tracing)


def limit_connections(client: redis.Redis | ScriptingCluster, limit: int) -> None:
    """Size the client's pool (a cluster client's: each node's)."""
    if isinstance(client, redis.Redis):
        client.connection_pool.max_connections = limit
    else:
        client.limit_connections(limit)


#: How long one read of a held stream may block in Redis for the next change.
STREAM_BLOCK_MS = 10_000


def _stream_service(settings: Settings, store: RedisStore, registry: Registry, dispatcher: Dispatcher,
                    drain: Drain) -> JobService:
    # The socket timeout leaves the blocking read its time on top of the fail-fast bound.
    client = connect(settings.redis_url, settings.redis_socket_timeout_s + STREAM_BLOCK_MS / 1000,
                     service=settings.redis_service)
    limit_connections(client, settings.redis_max_connections)
    return JobService(RedisStore(client, store.keys, max_ttl_ms=store.max_ttl_ms), registry, dispatcher, settings,
                      drain)


def connect_service(settings: Settings | None = None) -> JobService:
    """The in-process API for existing applications: the same service the HTTP API uses.

    It asks Redis once: an application that runs with the wrong settings hears which URL it tried (and which
    variable sets it) at once, rather than "the job store is unreachable" at its first call.

    An application only submits and waits: the workers run the jobs. When it cannot import the job modules that
    `TASKS_BACKEND_JOBS` names (they live with the workers), its submits are checked against the operations the
    workers published (`catalog`), as Celery's `send_task` sends by name without the task's code."""
    settings = settings or Settings.from_env()
    try:
        registry: Registry | None = Registry.from_modules(settings.job_modules)
    except JobModuleNotFound as exc:
        log.info("%s Submits are checked against the operations the workers published.", exc)
        registry = None
    runtime = build_runtime(settings, registry=Registry() if registry is None else registry)
    try:
        runtime.store.redis.ping()
    except redis.RedisError as exc:
        url = redact_url(runtime.settings.redis_url)
        raise StoreUnavailable(f"The job store at {url} is unreachable ({exc}); set REDIS_URL to the Redis "
                               "the server uses.") from exc
    if registry is None:
        runtime.service.registry = PublishedOperations(runtime.store.redis, runtime.store.keys)
    return runtime.service


#: Query options through which redis-py (and kombu) also take credentials: masked like a `user:password@`.
_SECRET_OPTIONS = frozenset({"password", "username"})


def redact_url(url: str) -> str:
    """`url` with any password replaced, fit for a message or a log line: the one of `user:password@` and
    the `password=` and `username=` query options (each Sentinel's of a `sentinel://` URL, whose parts `;` joins)."""
    if is_sentinel_url(url) and ";" in url:
        return ";".join(redact_url(part) for part in url.split(";"))
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL one can take apart: nothing of it is safe to show
        return "***"
    # Rebuilt by hand: urlunsplit would drop the empty authority of `unix:///path`.
    head, mark, tail = url.partition("?")
    if password:
        head = head.replace(f":{password}@", ":***@", 1)
    query, hashmark, fragment = tail.partition("#")
    options = [(p.split("=", 1)[0] + "=***") if unquote(p.split("=", 1)[0]).lower() in _SECRET_OPTIONS else p
               for p in query.split("&")]
    return head + mark + "&".join(options) + hashmark + fragment

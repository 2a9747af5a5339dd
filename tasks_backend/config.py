"""Settings, read from the environment once and passed explicitly to every factory."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .store.sentinel import DEFAULT_SERVICE, is_sentinel_url, sentinel_url

DEMO_JOBS = "tasks_backend.demo"
#: URL schemes of a Redis Cluster store (see `tasks_backend.store.cluster`); redis-py has none of its own.
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    return _number(float, name, raw) if raw not in (None, "") else default


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    return _number(int, name, raw) if raw not in (None, "") else default


def _number(kind: type[float] | type[int], name: str, raw: Any) -> Any:
    # float('30s') says "could not convert string to float": a process reading many variables must say which.
    try:
        return kind(raw)
    except ValueError:
        # Every float setting is a time: seconds, written without a unit.
        what = "a whole number" if kind is int else "a number (of seconds, without a unit)"
        raise ValueError(f"{name}={raw!r} is not {what}") from None


_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: str) -> float:
    """Seconds from `30`, `2.5`, or a number with one unit: `500ms`, `45s`, `15m`, `12h`, `30d`."""
    text = raw.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if text.endswith(u)), "")
    value = float(text.removesuffix(unit)) if text.removesuffix(unit).strip() else float("nan")
    if not 0 <= value < float("inf"):
        raise ValueError(raw)
    return value * _UNITS_S.get(unit, 1.0)


def _duration(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return parse_duration(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a duration (seconds, or e.g. 30d, 12h, 15m)") from None


def _credentials(raw: str | None) -> tuple[tuple[str, str], ...]:
    """`{"https://agent.example/": "Bearer ..."}` as (prefix, value) pairs; the values are never logged."""
    if not raw:
        return ()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise ValueError("TASKS_BACKEND_REMOTE_CREDENTIALS must be a JSON object of URL prefix -> Authorization value")
    return tuple((str(k), v) for k, v in parsed.items())


@dataclass(frozen=True)
class Settings:
    #: A `redis://` URL, or the Sentinels' `sentinel://host:port/db;sentinel://…` (see `sentinel`).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: The service (Sentinel's `master_name`) whose primary a `sentinel://` store or broker URL follows.
    redis_service: str = DEFAULT_SERVICE
    #: Replicas that must hold a new job before its submit is answered (Redis `WAIT`); 0 answers at once.
    #: Fewer within `submit_replicas_timeout_s`: the job is dropped and the submit answered 503.
    submit_replicas: int = 0
    #: Kept below `redis_socket_timeout_s`, which bounds the whole round trip the `WAIT` rides in.
    submit_replicas_timeout_s: float = 0.5
    broker_url: str | None = None
    key_prefix: str = "tb"
    job_modules: tuple[str, ...] = (DEMO_JOBS,)
    queue: str = "tasks_backend"

    tokens: str | None = None
    tokens_file: str | None = None
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    admins: tuple[str, ...] = ()
    #: Principals that may list, cancel and rerun any owner's jobs and act in bulk (never answer for them).
    operators: tuple[str, ...] = ()
    #: Who holds which role, for questions addressed `role:NAME`: "finance=bob,carol;legal=dave".
    roles: str = ""

    default_ttl_s: float = 86400.0
    max_ttl_s: float = 30 * 86400.0
    default_poll_s: float = 2.0

    lease_s: float = 30.0
    max_attempts: int = 5
    queued_grace_s: float = 30.0
    sweep_interval_s: float = 5.0
    visibility_timeout_s: float = 4 * 3600.0
    #: Hand queued jobs to the workers fairly between principals (see README, "Fair shares"); off, a job goes
    #: to the broker at once unless it is delayed or its concurrency value is full.
    fair_shares: bool = True
    #: Worker slots assumed while no worker has published its own (the gate keeps this many jobs in flight).
    dispatch_slots: int = 64
    #: RabbitMQ only: deliveries of one message after which it is dead-lettered and its job failed.
    delivery_limit: int = 5

    redis_socket_timeout_s: float = 2.0
    #: Redis connections one process may open: with gevent web workers every open request (an event stream
    #: included) may hold one, and redis-py's default of 100 would turn the 101st into a 503.
    redis_max_connections: int = 4000
    max_body_bytes: int = 1024 * 1024
    sse_max_s: float = 25.0
    task_events: bool = False
    celery_overrides: dict[str, Any] = field(default_factory=dict)

    #: Let push subscriptions target loopback, link-local and private addresses (dev and tests only).
    push_allow_private: bool = False
    push_max_attempts: int = 8
    push_timeout_s: float = 5.0
    #: Webhook POSTs a worker process makes at once (each to a different config).
    push_concurrency: int = 8
    #: Credentials for other agents' tasks (`ctx.call_tool`, `ctx.send_message`): (URL prefix, `Authorization`
    #: value) pairs, the longest matching prefix wins; from a JSON object in `TASKS_BACKEND_REMOTE_CREDENTIALS`.
    remote_credentials: tuple[tuple[str, str], ...] = ()
    #: One HTTP exchange with a remote MCP server or A2A agent.
    remote_timeout_s: float = 10.0
    #: How often to look at a remote task whose remote suggests no interval (A2A agents suggest none).
    remote_poll_s: float = 2.0
    #: The URL remote agents reach this deployment's `/v1/remote-push` at; set, A2A messages ask the agent for
    #: push notifications there, which wake the waiting job at once (polling goes on beside them).
    remote_push_url: str | None = None

    #: How long audit entries are kept (see README, "Audit trail").
    audit_retention_s: float = 30 * 86400.0

    #: Signs the web page's session cookies; unset, each server start makes one (sessions end at a restart).
    ui_secret: str | None = None

    #: Origins (`scheme://host[:port]`) a browser may call the API from; a request with any other
    #: `Origin` is refused with 403 (DNS rebinding). Requests without `Origin` are not browsers'.
    allowed_origins: tuple[str, ...] = ()
    #: The URL callers reach this server by (agent card); never taken from a request's Host header.
    public_url: str = "http://localhost:8000"

    # Limits per principal (0 turns one off), kept in Redis so that they hold across web processes and hosts.
    #: Requests per `rate_window_s`: a burst of that many, refilled evenly over the window.
    rate_limit: int = 3000
    rate_window_s: float = 5.0
    #: Failed authentications per client address per window; past it every request from there gets a 429.
    auth_failure_limit: int = 100
    auth_failure_window_s: float = 60.0
    #: Reverse proxies in front of the web server that each append the address they saw to X-Forwarded-For;
    #: the client's address (for the limit on failed authentications per address) is then the entry the outermost one
    #: wrote, and its scheme the one they forward in X-Forwarded-Proto. 0: the connection's peer and scheme, and
    #: neither header, which any client can write, is read.
    trusted_proxies: int = 0
    #: Jobs not yet terminal that one principal may have.
    max_active_jobs: int = 1000
    #: Event streams, subscriptions and blocking sends one principal may have open at once.
    max_streams: int = 100
    #: Schedules one principal may define (0: no limit); schedules declared in code do not count against it.
    max_schedules: int = 1000
    #: Bytes of a job's params as stored (canonical JSON).
    max_params_bytes: int = 64 * 1024
    #: Ceiling on a TTL the caller asks for (MCP `task.ttl`); an operation's own TTL is the operator's.
    max_requested_ttl_s: float = 86400.0
    #: Slow clients: the whole request head, and then the whole body, must arrive within these.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    @property
    def effective_broker_url(self) -> str:
        if self.broker_url is None and is_cluster_url(self.redis_url):
            raise ValueError("A Redis Cluster cannot be the Celery broker: set CELERY_BROKER_URL to a Redis "
                             "server or RabbitMQ")
        return self.broker_url or self.redis_url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read `TASKS_BACKEND_*`, `REDIS_URL` and `CELERY_BROKER_URL`; keyword overrides win."""
        e = os.environ if env is None else env
        modules = e.get("TASKS_BACKEND_JOBS") or DEMO_JOBS
        sentinels = [a for a in (e.get("TASKS_BACKEND_REDIS_SENTINELS") or "").split(",") if a.strip()]
        redis_url = sentinel_url(sentinels) if sentinels else e.get("REDIS_URL") or cls.redis_url
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "redis_service": e.get("TASKS_BACKEND_REDIS_SERVICE") or cls.redis_service,
            # With failover configured, a submit waits for one replica by default: see the README.
            "submit_replicas": _int(e, "TASKS_BACKEND_SUBMIT_REPLICAS", 1 if is_sentinel_url(redis_url) else 0),
            "submit_replicas_timeout_s": _float(e, "TASKS_BACKEND_SUBMIT_REPLICAS_TIMEOUT",
                                                cls.submit_replicas_timeout_s),
            "broker_url": e.get("CELERY_BROKER_URL") or None,
            "key_prefix": e.get("TASKS_BACKEND_KEY_PREFIX") or cls.key_prefix,
            "job_modules": tuple(m.strip() for m in modules.split(",") if m.strip()),
            "queue": e.get("TASKS_BACKEND_QUEUE") or cls.queue,
            "tokens": e.get("TASKS_BACKEND_TOKENS") or None,
            "tokens_file": e.get("TASKS_BACKEND_TOKENS_FILE") or None,
            "jwt_secret": e.get("TASKS_BACKEND_JWT_SECRET") or None,
            "jwt_public_key": e.get("TASKS_BACKEND_JWT_PUBLIC_KEY") or None,
            "jwt_audience": e.get("TASKS_BACKEND_JWT_AUDIENCE") or None,
            "jwt_issuer": e.get("TASKS_BACKEND_JWT_ISSUER") or None,
            "admins": tuple(a.strip() for a in (e.get("TASKS_BACKEND_ADMINS") or "").split(",") if a.strip()),
            "operators": tuple(a.strip() for a in (e.get("TASKS_BACKEND_OPERATORS") or "").split(",")
                               if a.strip()),
            "roles": e.get("TASKS_BACKEND_ROLES") or "",
            "audit_retention_s": _duration(e, "TASKS_BACKEND_AUDIT_RETENTION", cls.audit_retention_s),
            "default_ttl_s": _float(e, "TASKS_BACKEND_DEFAULT_TTL", cls.default_ttl_s),
            "max_ttl_s": _float(e, "TASKS_BACKEND_MAX_TTL", cls.max_ttl_s),
            "default_poll_s": _float(e, "TASKS_BACKEND_DEFAULT_POLL_INTERVAL", cls.default_poll_s),
            "lease_s": _float(e, "TASKS_BACKEND_LEASE", cls.lease_s),
            "max_attempts": _int(e, "TASKS_BACKEND_MAX_ATTEMPTS", cls.max_attempts),
            "queued_grace_s": _float(e, "TASKS_BACKEND_QUEUED_GRACE", cls.queued_grace_s),
            "sweep_interval_s": _float(e, "TASKS_BACKEND_SWEEP_INTERVAL", cls.sweep_interval_s),
            "visibility_timeout_s": _float(e, "TASKS_BACKEND_VISIBILITY_TIMEOUT", cls.visibility_timeout_s),
            "fair_shares": (e.get("TASKS_BACKEND_FAIR_SHARES") or "1").lower() not in ("0", "false", "no", "off"),
            "dispatch_slots": _int(e, "TASKS_BACKEND_DISPATCH_SLOTS", cls.dispatch_slots),
            "delivery_limit": _int(e, "TASKS_BACKEND_DELIVERY_LIMIT", cls.delivery_limit),
            "redis_socket_timeout_s": _float(e, "TASKS_BACKEND_REDIS_TIMEOUT", cls.redis_socket_timeout_s),
            "redis_max_connections": _int(e, "TASKS_BACKEND_REDIS_MAX_CONNECTIONS", cls.redis_max_connections),
            "max_body_bytes": _int(e, "TASKS_BACKEND_MAX_BODY", cls.max_body_bytes),
            "sse_max_s": _float(e, "TASKS_BACKEND_SSE_MAX", cls.sse_max_s),
            "task_events": (e.get("TASKS_BACKEND_TASK_EVENTS") or "").lower() in ("1", "true"),
            "push_allow_private": (e.get("TASKS_BACKEND_PUSH_ALLOW_PRIVATE") or "").lower() in ("1", "true"),
            "push_max_attempts": _int(e, "TASKS_BACKEND_PUSH_MAX_ATTEMPTS", cls.push_max_attempts),
            "push_timeout_s": _float(e, "TASKS_BACKEND_PUSH_TIMEOUT", cls.push_timeout_s),
            "push_concurrency": _int(e, "TASKS_BACKEND_PUSH_CONCURRENCY", cls.push_concurrency),
            "remote_credentials": _credentials(e.get("TASKS_BACKEND_REMOTE_CREDENTIALS")),
            "remote_timeout_s": _float(e, "TASKS_BACKEND_REMOTE_TIMEOUT", cls.remote_timeout_s),
            "remote_poll_s": _float(e, "TASKS_BACKEND_REMOTE_POLL_INTERVAL", cls.remote_poll_s),
            "remote_push_url": e.get("TASKS_BACKEND_REMOTE_PUSH_URL") or None,
            "ui_secret": e.get("TASKS_BACKEND_UI_SECRET") or None,
            "allowed_origins": tuple(o.strip().rstrip("/") for o in
                                     (e.get("TASKS_BACKEND_ALLOWED_ORIGINS") or "").split(",") if o.strip()),
            "public_url": (e.get("TASKS_BACKEND_PUBLIC_URL")
                           or f"http://localhost:{e.get('PORT') or '8000'}").rstrip("/"),
            "rate_limit": _int(e, "TASKS_BACKEND_RATE_LIMIT", cls.rate_limit),
            "rate_window_s": _float(e, "TASKS_BACKEND_RATE_WINDOW", cls.rate_window_s),
            "auth_failure_limit": _int(e, "TASKS_BACKEND_AUTH_FAILURE_LIMIT", cls.auth_failure_limit),
            "auth_failure_window_s": _float(e, "TASKS_BACKEND_AUTH_FAILURE_WINDOW", cls.auth_failure_window_s),
            "trusted_proxies": _int(e, "TASKS_BACKEND_TRUSTED_PROXIES", cls.trusted_proxies),
            "max_active_jobs": _int(e, "TASKS_BACKEND_MAX_ACTIVE_JOBS", cls.max_active_jobs),
            "max_streams": _int(e, "TASKS_BACKEND_MAX_STREAMS", cls.max_streams),
            "max_schedules": _int(e, "TASKS_BACKEND_MAX_SCHEDULES", cls.max_schedules),
            "max_params_bytes": _int(e, "TASKS_BACKEND_MAX_PARAMS", cls.max_params_bytes),
            "max_requested_ttl_s": _float(e, "TASKS_BACKEND_MAX_REQUESTED_TTL", cls.max_requested_ttl_s),
            "header_timeout_s": _float(e, "TASKS_BACKEND_HEADER_TIMEOUT", cls.header_timeout_s),
            "body_timeout_s": _float(e, "TASKS_BACKEND_BODY_TIMEOUT", cls.body_timeout_s),
        }
        values.update(overrides)
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

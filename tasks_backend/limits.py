"""Limits per principal, kept in Redis so that they hold across web processes and hosts.

- Request rate: GCRA (a burst of `rate_limit`, refilled evenly over `rate_window_s`), one small script per request,
  pipelined with the read of the caller's address's failed-authentication count: one round trip per request.
- Failed authentication per client address: counted in a fixed window; past the limit every request from that
  address is refused, good token or not (otherwise the 429 would tell a right guess from a wrong one).
- Active jobs: a set of the principal's job ids. The per-request script counts it (no round trip of its own);
  a created job is added to it (one round trip per created job); when it reaches the limit it is pruned by the
  jobs' states, so finished jobs leave it without a hook in the finish path.
- Open streams: a sorted set of leases (stream id -> expiry), so a process that dies frees its streams.
- Params size and the ceiling on a requested TTL: checked before a job is created, without Redis.

Every key has a TTL; time comes from Redis (`TIME`); every script gives the same answer when applied twice (a
retried call carries the same nonce), since the client retries a command whose reply was lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

import redis

from .auth import Authenticator, Principal
from .config import Settings
from .dispatch import Dispatcher
from .domain import TERMINAL_STATES, JobRecord, SubmitOutcome
from .errors import PayloadTooLarge, QuotaExceeded, RateLimited, StoreUnavailable, Unauthenticated
from .keys import Keys
from .registry import Registry
from .service import JobService, as_principal
from .store import RedisStore, redis_errors

T = TypeVar("T")
log = logging.getLogger(__name__)

#: KEYS: rate hash, active-jobs set. ARGV: limit, window (µs), nonce.
#: Answers {"allowed remaining retry_us reset_us" or "", active job count}.
RATE_LUA = """
local active = redis.call('SCARD', KEYS[2])
local limit = tonumber(ARGV[1])
if limit <= 0 then return {'', active} end
local st = redis.call('HMGET', KEYS[1], 'tat', 'n', 'r')
if st[2] == ARGV[3] and st[3] then return {st[3], active} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[2])
local interval = window / limit
local tat = math.max(tonumber(st[1]) or 0, now)
local answer
if tat + interval - now > window then
  answer = '0 0 ' .. string.format('%.0f', tat + interval - now - window) .. ' ' .. string.format('%.0f', tat - now)
else
  tat = tat + interval
  answer = '1 ' .. math.floor((window - (tat - now)) / interval) .. ' 0 ' .. string.format('%.0f', tat - now)
end
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), 'n', ARGV[3], 'r', answer)
redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now) / 1000) + 1000)
return {answer, active}
"""

#: KEYS: failure hash. ARGV: window (ms), nonce. Answers {failures in this window, ms left of it}.
AUTH_FAIL_LUA = """
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  redis.call('HSET', KEYS[1], 'n', ARGV[2])
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  left = tonumber(ARGV[1])
end
return {tonumber(redis.call('HGET', KEYS[1], 'c')), left}
"""

#: KEYS: streams zset. ARGV: limit, lease (ms), stream id. Answers {1, 0} (held) or {0, ms until a lease ends}.
STREAM_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[3]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now + 1000)
return {1, 0}
"""

#: The principal and its active-job count as read by this request's admission (saves a round trip at submit).
_admitted: ContextVar[tuple[str, int] | None] = ContextVar("tasks_backend_admitted", default=None)


class Limiter:
    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.client, self.keys, self.settings = client, keys, settings
        self._sha: dict[str, str] = {}
        s = settings
        self.policy = f'"rate";q={s.rate_limit};w={max(1, math.ceil(s.rate_window_s))}'
        self._window_us = int(s.rate_window_s * 1_000_000)

    # -- scripts ------------------------------------------------------------------------------
    def _run(self, build: Any) -> list[Any]:
        """Execute a pipeline built by `build(pipe, sha_of)`; a script Redis lost (restart) is loaded again."""
        for attempt in (0, 1):
            pipe = self.client.pipeline(transaction=False)
            build(pipe, self._sha_of)
            try:
                with redis_errors():
                    return list(pipe.execute())
            except redis.exceptions.NoScriptError:
                if attempt:
                    raise
                self._sha.clear()
        raise AssertionError("unreachable")

    def _sha_of(self, source: str) -> str:
        sha = self._sha.get(source)
        if sha is None:
            with redis_errors():
                sha = self._sha[source] = str(self.client.script_load(source))
        return sha

    # -- per request ---------------------------------------------------------------------------
    def admit(self, principal: Principal, address: str | None) -> None:
        """Count one request of `principal` from `address`; raises `RateLimited` over a limit."""
        s, owner = self.settings, principal.name
        check_address = bool(address and s.auth_failure_limit > 0)
        fail_key = self.keys.auth_failures(address or "")
        nonce = secrets.token_hex(8)

        def build(pipe: Any, sha_of: Any) -> None:
            if check_address:
                pipe.hget(fail_key, "c")
                pipe.pttl(fail_key)
            pipe.evalsha(sha_of(RATE_LUA), 2, self.keys.rate(owner), self.keys.active_jobs(owner),
                         s.rate_limit, self._window_us, nonce)

        replies = self._run(build)
        (answer, active) = replies[-1]
        _admitted.set((owner, int(active)))
        if check_address and int(replies[0] or 0) >= s.auth_failure_limit:
            raise RateLimited("Too many failed authentications from this address; retry later.",
                              retry_after_s=math.ceil(max(int(replies[1]), 1000) / 1000))
        if answer:
            allowed, remaining, retry_us, reset_us = (int(x) for x in answer.split())
            if not allowed:
                raise RateLimited(retry_after_s=math.ceil(retry_us / 1_000_000), headers=[
                    ("RateLimit-Policy", self.policy),
                    ("RateLimit", f'"rate";r={remaining};t={math.ceil(reset_us / 1_000_000)}'),
                ])

    def auth_failed(self, address: str | None) -> None:
        """Count a failed authentication from `address`; raises `RateLimited` once past the limit."""
        s = self.settings
        if not address or s.auth_failure_limit <= 0:
            return
        key, window_ms, nonce = self.keys.auth_failures(address), int(s.auth_failure_window_s * 1000), \
            secrets.token_hex(8)
        [(count, left_ms)] = self._run(lambda pipe, sha_of: pipe.evalsha(
            sha_of(AUTH_FAIL_LUA), 1, key, window_ms, nonce))
        if int(count) > s.auth_failure_limit:
            raise RateLimited("Too many failed authentications from this address; retry later.",
                              retry_after_s=math.ceil(max(int(left_ms), 1000) / 1000))

    # -- active jobs -----------------------------------------------------------------------------
    def check_active(self, owner: str) -> None:
        """Refuse a new job when `owner` has `max_active_jobs` jobs not yet terminal."""
        limit = self.settings.max_active_jobs
        if limit <= 0:
            return
        admitted = _admitted.get()
        if admitted is not None and admitted[0] == owner:
            count = admitted[1]
        else:
            with redis_errors():
                count = int(self.client.scard(self.keys.active_jobs(owner)))
        if count >= limit:
            count = self._prune(owner)
            _admitted.set((owner, count))
        if count >= limit:
            raise QuotaExceeded(f"This principal has {count} unfinished jobs; at most {limit} are allowed.",
                                retry_after_s=max(1, math.ceil(self.settings.default_poll_s)))

    def _prune(self, owner: str) -> int:
        """Drop the jobs that are terminal or gone from the owner's active set; how many remain."""
        key = self.keys.active_jobs(owner)
        with redis_errors():
            ids = sorted(str(i) for i in self.client.smembers(key))  # type: ignore[union-attr]
            pipe = self.client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hget(self.keys.job(job_id), "state")
            states = pipe.execute() if ids else []
            done = [i for i, state in zip(ids, states, strict=True) if state is None or state in TERMINAL_STATES]
            if done:
                self.client.srem(key, *done)
        return len(ids) - len(done)

    def track_job(self, owner: str, job_id: str) -> None:
        if self.settings.max_active_jobs <= 0:
            return
        key = self.keys.active_jobs(owner)
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.sadd(key, job_id)
            pipe.pexpire(key, int(self.settings.max_ttl_s * 1000))
            pipe.execute()
        admitted = _admitted.get()
        if admitted is not None and admitted[0] == owner:
            _admitted.set((owner, admitted[1] + 1))

    # -- streams ---------------------------------------------------------------------------------
    def open_stream(self, principal: Principal, lease_s: float | None = None) -> StreamSlot:
        """Take one of the principal's stream slots (raises `QuotaExceeded` when none is free)."""
        slot = StreamSlot(self, principal.name, lease_s or self.settings.sse_max_s + 30)
        slot.renew(first=True)
        return slot

    def hold(self, principal: Principal, events: Iterator[T], lease_s: float | None = None) -> Held[T]:
        """`events`, counted as one open stream of `principal` until exhausted or closed."""
        return Held(self.open_stream(principal, lease_s), events)


class StreamSlot:
    def __init__(self, limiter: Limiter, owner: str, lease_s: float) -> None:
        self.limiter, self.owner, self.lease_ms = limiter, owner, int(lease_s * 1000)
        self.id = secrets.token_hex(8)
        self.key = limiter.keys.streams(owner)
        self.renew_at = 0.0
        self.open = True

    def renew(self, *, first: bool = False) -> None:
        """Extend the lease (done by long holders every half lease); the first call may be refused."""
        limit = self.limiter.settings.max_streams
        if limit <= 0 or (not first and time.monotonic() < self.renew_at):
            return
        [(held, wait_ms)] = self.limiter._run(lambda pipe, sha_of: pipe.evalsha(
            sha_of(STREAM_LUA), 1, self.key, limit if first else 2**31, self.lease_ms, self.id))
        self.renew_at = time.monotonic() + self.lease_ms / 2000
        if not int(held):
            self.open = False
            raise QuotaExceeded(f"This principal has {limit} open streams; at most {limit} are allowed.",
                                retry_after_s=min(30, math.ceil(max(int(wait_ms), 1000) / 1000)))

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.limiter.settings.max_streams > 0:
            try:
                with redis_errors():
                    self.limiter.client.zrem(self.key, self.id)
            except Exception:  # the lease runs out by itself
                return

    def __enter__(self) -> StreamSlot:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Held(Generic[T]):
    """An iterator that holds a stream slot until it is exhausted or closed (WSGI servers call `close`)."""

    def __init__(self, slot: StreamSlot, events: Iterator[T]) -> None:
        self.slot, self.events = slot, events

    def __iter__(self) -> Held[T]:
        return self

    def __next__(self) -> T:
        try:
            item = next(self.events)
        except BaseException:
            self.close()
            raise
        self.slot.renew()
        return item

    def close(self) -> None:
        self.slot.close()
        close = getattr(self.events, "close", None)
        if close is not None:
            close()


class Gate:
    """Authentication plus the per-request limits: the one call an entrance makes for each request."""

    def __init__(self, authenticator: Authenticator, limiter: Limiter) -> None:
        self.authenticator, self.limiter = authenticator, limiter

    def authenticate(self, authorization: str | None, address: str | None) -> Principal:
        """The caller, once within its limits. With Redis unreachable the limits are skipped (fail open): what
        needs Redis answers 503 by itself, and what does not (metrics, the operation list) keeps working."""
        try:
            principal = self.authenticator.authenticate(authorization)
        except Unauthenticated:
            with contextlib.suppress(StoreUnavailable):
                self.limiter.auth_failed(address)
            raise
        try:
            self.limiter.admit(principal, address)
        except StoreUnavailable:
            log.warning("limits skipped: Redis unreachable")
        return principal


class LimitedJobService(JobService):
    """The job service with the submit-time limits: params size, requested-TTL ceiling, active jobs."""

    def __init__(self, store: RedisStore, registry: Registry, dispatcher: Dispatcher, settings: Settings,
                 limiter: Limiter) -> None:
        super().__init__(store, registry, dispatcher, settings)
        self.limiter = limiter

    def submit(self, principal: Principal | str, operation: str, params: Any = None, *,
               idempotency_key: str | None = None, ttl_s: float | None = None) -> tuple[JobRecord, SubmitOutcome]:
        s = self.settings
        if s.max_params_bytes > 0 and params is not None:
            size = params_size(params)
            if size is not None and size > s.max_params_bytes:
                raise PayloadTooLarge(f"The params take {size} bytes; at most {s.max_params_bytes} are accepted.")
        if ttl_s is not None and s.max_requested_ttl_s > 0:
            ttl_s = min(ttl_s, s.max_requested_ttl_s)
        owner = as_principal(principal).name
        self.limiter.check_active(owner)
        record, outcome = super().submit(principal, operation, params, idempotency_key=idempotency_key,
                                         ttl_s=ttl_s)
        if outcome is SubmitOutcome.CREATED:
            self.limiter.track_job(owner, record.id)
        return record, outcome


def params_size(params: Any) -> int | None:
    """Bytes of params as JSON (what the store keeps, give or take key order); None if not JSON at all."""
    try:
        return len(json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return None  # the operation's schema refuses it

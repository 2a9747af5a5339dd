"""Limits per principal, kept in Redis so that they hold across web processes and hosts.

- Request rate: GCRA (a burst of `rate_limit`, refilled evenly over `rate_window_s`), in one small script, with
  the caller's address's failed-authentication count read in the same round trip. A busy principal's
  requests are granted in small batches per process (at most 1/50 of its limit, for at most a second), so most
  requests cost no round trip at all; a principal with a small limit (under 100) is counted request by request.
- Failed authentication per client address: counted in a fixed window; past the limit every request from that
  address is refused, good token or not (otherwise the 429 would tell a right guess from a wrong one).
- Active jobs: counted by the per-request script from the owner index the store already keeps (no write when a
  job is created or finishes, no round trip of its own); when the count reaches the limit, a prune reads the
  states of the counted jobs, so finished jobs stop counting without a hook in the finish path.
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
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis

from ..config import Settings
from ..errors import PayloadTooLarge, QuotaExceeded, RateLimited, StoreUnavailable, Unauthenticated
from ..model.domain import TERMINAL_STATES, JobRecord, SubmitOutcome
from ..running.dispatch import Dispatcher
from ..running.registry import Registry
from ..service.jobs import JobService, as_principal
from ..store.connect import redis_errors
from ..store.jobs import RedisStore, job_states
from ..store.keys import Keys
from .auth import Authenticator, Principal

T = TypeVar("T")
#: Jobs a prune reads past its mark at once (a first prune of a principal with a long history takes several).
PRUNE_BATCH = 5000
log = logging.getLogger(__name__)

#: Counts the owner's unfinished jobs: those known unfinished at the last prune, plus every job indexed since.
#: KEYS: unfinished set, prune mark, owner index (from the 2nd).
ACTIVE_COUNT_LUA = """
local function active(k)
  local mark = redis.call('GET', KEYS[k + 1])
  return redis.call('SCARD', KEYS[k]) + redis.call('ZCOUNT', KEYS[k + 2], mark and ('(' .. mark) or '-inf', '+inf')
end
"""

#: The rate hash KEYS[1] keeps the theoretical arrival time `tat` (µs) of the next request, and the fields given
#: after it; it lives until that time has passed (it then says nothing a missing hash would not).
_KEEP_TAT_FN = """
local function keep_tat(now, tat, ...)
  redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), ...)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now) / 1000) + 1000)
end
"""

#: KEYS: rate hash, unfinished set, prune mark, owner index (all the owner's: one Redis Cluster slot).
#: ARGV: limit, window (µs), nonce, requests wanted at once.
#: Answers {"granted remaining retry_us reset_us" or "" (no rate limit), unfinished job count, Redis's time in ms}.
RATE_LUA = ACTIVE_COUNT_LUA + _KEEP_TAT_FN + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local active = active(2)
local now_ms = math.floor(now / 1000)
local limit = tonumber(ARGV[1])
if limit <= 0 then return {'', active, now_ms} end
local st = redis.call('HMGET', KEYS[1], 'tat', 'n', 'r')
if st[2] == ARGV[3] and st[3] then return {st[3], active, now_ms} end
local window = tonumber(ARGV[2])
local interval = window / limit
local tat = math.max(tonumber(st[1]) or 0, now)
local fit = math.floor((window - (tat - now)) / interval)
local answer
if fit < 1 then
  answer = '0 0 ' .. string.format('%.0f', tat + interval - now - window) .. ' ' .. string.format('%.0f', tat - now)
else
  local granted = math.min(fit, tonumber(ARGV[4]))
  tat = tat + granted * interval
  answer = granted .. ' ' .. (fit - granted) .. ' 0 ' .. string.format('%.0f', tat - now)
end
keep_tat(now, tat, 'n', ARGV[3], 'r', answer)
return {answer, active, now_ms}
"""

#: KEYS: rate hash. ARGV: limit, window (µs), nonce, requests' worth to charge.
#: Charges the extra work of a request already admitted, past the limit if need be: the requests that follow are
#: refused until the debt has refilled. Applied twice it charges once (`cn`: the last charge's nonce).
CHARGE_LUA = _KEEP_TAT_FN + """
local limit = tonumber(ARGV[1])
if limit <= 0 or redis.call('HGET', KEYS[1], 'cn') == ARGV[3] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0, now)
keep_tat(now, tat + tonumber(ARGV[4]) * tonumber(ARGV[2]) / limit, 'cn', ARGV[3])
return 1
"""

#: KEYS: failure hash (c: count, e: end of the window in ms, n: last nonce). ARGV: window (ms), nonce.
#: Answers {failures in this window, ms left of it}.
AUTH_FAIL_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = tonumber(redis.call('HGET', KEYS[1], 'e'))
if not ends or ends <= now then
  redis.call('DEL', KEYS[1])
  ends = now + tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'e', ends)
  redis.call('PEXPIREAT', KEYS[1], ends)
end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  redis.call('HSET', KEYS[1], 'n', ARGV[2])
end
return {tonumber(redis.call('HGET', KEYS[1], 'c')), ends - now}
"""

#: KEYS: unfinished set, prune mark, owner index.
COUNT_LUA = ACTIVE_COUNT_LUA + "return active(1)"

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

#: Jobs a listing may read per request: reading and sorting about this many costs the web process and Redis what
#: one request does, so a listing that reads more (a filtered one, A2A ListTasks) is charged one request per this
#: many beyond its first page (`Limiter.charge`).
JOBS_PER_REQUEST = 20
#: What a listing reads for the price of the request itself: one full page.
FREE_SCAN = 200

#: How long requests granted in a batch may be used: past it the next request asks Redis again.
GRANT_S = 1.0
#: The most requests one batch grants.
GRANT_MAX = 20


@dataclass
class Grant:
    """Requests of one principal from one address that this process may admit without asking Redis."""

    left: int
    until: float
    active: int  # the principal's unfinished jobs, as last counted


#: The limiter, the principal and the grant as this request's admission left them (the submit reads the
#: unfinished count). Nothing clears it when a request ends, so a reader checks that it is its own limiter's,
#: for the same principal, and within the grant's batch: a later call in the same thread (the in-process API,
#: another runtime's service) otherwise counts afresh.
_admitted: ContextVar[tuple[Limiter, str, Grant] | None] = ContextVar("tasks_backend_admitted", default=None)


class Limiter:
    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.client, self.keys, self.settings = client, keys, settings
        self._sha: dict[str, str] = {}
        s = settings
        self.policy = f'"rate";q={s.rate_limit};w={max(1, math.ceil(s.rate_window_s))}'
        self._window_us = int(s.rate_window_s * 1_000_000)
        self._batch = max(1, min(GRANT_MAX, s.rate_limit // 50)) if s.rate_limit > 0 else GRANT_MAX
        self._grants: dict[tuple[str, str], Grant] = {}
        self._lock = threading.Lock()

    # -- scripts ------------------------------------------------------------------------------
    def _eval(self, source: str, keys: list[str], *args: Any) -> Any:
        """Run a script by its SHA (loading it first, or again after a Redis restart lost it)."""
        with redis_errors():
            sha = self._sha.get(source)
            if sha is not None:
                try:
                    return self.client.evalsha(sha, len(keys), *keys, *args)
                except redis.exceptions.NoScriptError:
                    pass
            sha = self._sha[source] = str(self.client.script_load(source))
            return self.client.evalsha(sha, len(keys), *keys, *args)

    def _eval_with(self, source: str, keys: list[str], args: tuple[Any, ...], also: Callable[[Any], None]) -> list[Any]:
        """A script and the commands `also` adds, in one round trip (on a Redis Cluster, one per slot)."""
        with redis_errors():
            for attempt in (1, 2):
                if attempt == 2 or source not in self._sha:
                    self._sha[source] = str(self.client.script_load(source))
                pipe = self.client.pipeline(transaction=False)
                pipe.evalsha(self._sha[source], len(keys), *keys, *args)
                also(pipe)
                try:
                    return list(pipe.execute())
                except redis.exceptions.NoScriptError:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    # -- per request ---------------------------------------------------------------------------
    def admit(self, principal: Principal, address: str | None) -> None:
        """Count one request of `principal` from `address`; raises `RateLimited` over a limit.

        A busy principal's requests are granted in small batches (at most 1/50 of its rate limit, and only for
        `GRANT_S`), so most of its requests cost no round trip; the unfinished-job count and the address check
        are then as fresh as the batch. A principal with a small limit is counted request by request."""
        s, owner = self.settings, principal.name
        check_address = bool(address and s.auth_failure_limit > 0)
        if not check_address and s.rate_limit <= 0 and s.max_active_jobs <= 0:
            _admitted.set(None)
            return
        key, now = (owner, address or ""), time.monotonic()
        with self._lock:
            grant = self._grants.get(key)
            if grant is not None and grant.left > 0 and now < grant.until:
                grant.left -= 1
                _admitted.set((self, owner, grant))
                return
        # One round trip: the address's failure count is read by a command of its own in the same pipeline (the
        # address and the principal hash to different Redis Cluster slots), against the rate script's clock.
        rate_keys = [self.keys.rate(owner), *self._active_keys(owner)]
        rate_args = (s.rate_limit, self._window_us, secrets.token_hex(8), self._batch)
        blocked_ms = 0
        if check_address:
            failures_key = self.keys.auth_failures(address or "")
            (answer, active, now_ms), (count, ends) = self._eval_with(
                RATE_LUA, rate_keys, rate_args, lambda p: p.hmget(failures_key, ["c", "e"]))
            if int(count or 0) >= s.auth_failure_limit:
                blocked_ms = max(0, int(ends or 0) - int(now_ms))
        else:
            answer, active, _ = self._eval(RATE_LUA, rate_keys, *rate_args)
        granted = int(answer.split(" ", 1)[0]) if answer else self._batch
        grant = Grant(left=granted - 1, until=now + GRANT_S, active=int(active))
        _admitted.set((self, owner, grant))
        if int(blocked_ms) <= 0 and granted > 0:
            with self._lock:
                if len(self._grants) > 10_000:  # principals and addresses come and go: forget old grants
                    self._grants.clear()
                self._grants[key] = grant
        if int(blocked_ms) > 0:
            raise RateLimited("Too many failed authentications from this address; retry later.",
                              retry_after_s=math.ceil(int(blocked_ms) / 1000))
        if answer:
            allowed, remaining, retry_us, reset_us = (int(x) for x in answer.split())
            if not allowed:
                raise RateLimited(retry_after_s=math.ceil(retry_us / 1_000_000), headers=[
                    ("RateLimit-Policy", self.policy),
                    ("RateLimit", f'"rate";r={remaining};t={math.ceil(reset_us / 1_000_000)}'),
                ])

    def charge(self, owner: str, requests: int) -> None:
        """Count `requests` more of `owner`'s, taken even past the rate limit: its next requests wait it off."""
        if requests > 0 and self.settings.rate_limit > 0:
            self._eval(CHARGE_LUA, [self.keys.rate(owner)], self.settings.rate_limit, self._window_us,
                       secrets.token_hex(8), requests)
            with self._lock:  # batches granted before the charge must not outlive it
                for key in [k for k in self._grants if k[0] == owner]:
                    del self._grants[key]

    def auth_failed(self, address: str | None) -> None:
        """Count a failed authentication from `address`; raises `RateLimited` once past the limit."""
        s = self.settings
        if not address or s.auth_failure_limit <= 0:
            return
        key, window_ms, nonce = self.keys.auth_failures(address), int(s.auth_failure_window_s * 1000), \
            secrets.token_hex(8)
        count, left_ms = self._eval(AUTH_FAIL_LUA, [key], window_ms, nonce)
        if int(count) > s.auth_failure_limit:
            raise RateLimited("Too many failed authentications from this address; retry later.",
                              retry_after_s=math.ceil(max(int(left_ms), 1000) / 1000))

    # -- active jobs -----------------------------------------------------------------------------
    # Nothing is written when a job is created or finishes: the owner index the store keeps already lists every
    # job. The count is the jobs known unfinished at the last prune plus those indexed after its mark; when it
    # reaches the limit, a prune reads the states of those jobs and moves the mark. A job indexed with a score
    # below the mark after a concurrent prune read past it goes uncounted: the limit is soft by a few jobs.
    def _active_keys(self, owner: str) -> list[str]:
        return [self.keys.active_jobs(owner), self.keys.active_mark(owner), self.keys.owner_index(owner)]

    def check_active(self, owner: str) -> None:
        """Refuse a new job when `owner` has `max_active_jobs` jobs not yet terminal."""
        limit = self.settings.max_active_jobs
        if limit <= 0:
            return
        admitted = _admitted.get()
        grant = admitted[2] if admitted is not None and admitted[0] is self and admitted[1] == owner \
            and time.monotonic() < admitted[2].until else None
        # Without an admission (the in-process API), one read.
        count = grant.active if grant is not None else int(self._eval(COUNT_LUA, self._active_keys(owner)))
        if count >= limit:
            count = self._prune(owner)
        if count >= limit:
            raise QuotaExceeded(f"This principal has {count} unfinished jobs; at most {limit} are allowed.",
                                retry_after_s=max(1, math.ceil(self.settings.default_poll_s)))
        if grant is not None:
            grant.active = count + 1  # this submit's job, for the grant's next requests

    def _prune(self, owner: str) -> int:
        """Keep only the unfinished of the owner's counted jobs, move the mark; how many remain counted."""
        unfinished_key, mark_key, index_key = self._active_keys(owner)
        ttl_ms = int(self.settings.max_ttl_s * 1000)
        r: Any = self.client  # decode_responses=True: every reply is str
        with redis_errors():
            mark = r.get(mark_key)
            known = set(r.smembers(unfinished_key))
            fresh = r.zrangebyscore(index_key, f"({mark}" if mark else "-inf", "+inf", start=0, num=PRUNE_BATCH,
                                    withscores=True)
            ids = sorted(known | {member for member, _ in fresh})
            states = dict(zip(ids, job_states(r, self.keys, ids), strict=True))
            alive = [i for i in ids if states[i] is not None and states[i] not in TERMINAL_STATES]
            pipe = r.pipeline(transaction=False)
            done = [i for i in known if i not in alive]
            if done:
                pipe.srem(unfinished_key, *done)
            if alive:
                pipe.sadd(unfinished_key, *alive)
            pipe.pexpire(unfinished_key, ttl_ms)
            left = 0
            if fresh:
                last = repr(float(fresh[-1][1]))
                pipe.set(mark_key, last, px=ttl_ms)
                pipe.zcount(index_key, f"({last}", "+inf")
                left = int(pipe.execute()[-1])
            else:
                pipe.execute()
        return len(alive) + left

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
        held, wait_ms = self.limiter._eval(STREAM_LUA, [self.key], limit if first else 2**31, self.lease_ms, self.id)
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
        self.admit(principal, address)
        return principal

    def admit(self, principal: Principal, address: str | None) -> None:
        """Count one request of a caller already known (by a bearer token, or by the web page's session) against
        the per-request limits; raises `RateLimited` over one. Fails open as `authenticate` does."""
        try:
            self.limiter.admit(principal, address)
        except StoreUnavailable as exc:
            log.warning("limits skipped: Redis unreachable (%r)", exc.__cause__)


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
        return record, outcome

    def scanned(self, owner: str, jobs: int) -> None:
        # A long scan is paid for after it is served: refusing it half-way would waste what it read, and an owner
        # with many jobs could then never list them at all.
        try:
            self.limiter.charge(owner, max(0, jobs - FREE_SCAN) // JOBS_PER_REQUEST)
        except StoreUnavailable:
            log.debug("a listing's scan went uncharged: Redis is unreachable")


def params_size(params: Any) -> int | None:
    """Bytes of params as JSON (what the store keeps, give or take key order); None if not JSON at all."""
    try:
        return len(json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return None  # the operation's schema refuses it

"""The request rate per principal (GCRA) and failed authentication per client address.

- Rate: a burst of `rate_limit`, refilled evenly over `rate_window_s`, in one small script that also counts the
  principal's unfinished jobs (for `active`) and reads the caller's address's failure count in the same round trip.
  A busy principal's requests are granted in small batches per process (at most 1/50 of its limit, for at most a
  second), so most requests cost no round trip; a principal with a limit under 100 is counted request by request.
- Failed authentication per client address: counted in a fixed window; past the limit every request from that
  address is refused, good token or not (otherwise the 429 would tell a right guess from a wrong one).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..errors import RateLimited
from ..store.keys import Keys
from ..store.runner import ScriptRunner
from .active import active_keys
from .auth import Principal

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


#: The rate limiter, the principal and the grant as this request's admission left them (the submit reads the
#: unfinished count). Nothing clears it when a request ends, so a reader checks that it is its own limiter's,
#: for the same principal, and within the grant's batch: a later call in the same thread (the in-process API,
#: another runtime's service) otherwise counts afresh.
_admitted: ContextVar[tuple[RateLimiter, str, Grant] | None] = ContextVar("tasks_backend_admitted", default=None)


class RateLimiter:
    def __init__(self, scripts: ScriptRunner, keys: Keys, settings: Settings) -> None:
        self.scripts, self.keys, self.settings = scripts, keys, settings
        s = settings
        #: The `RateLimit-Policy` header of a refusal.
        self.policy_header = f'"rate";q={s.rate_limit};w={max(1, math.ceil(s.rate_window_s))}'
        self._window_us = int(s.rate_window_s * 1_000_000)
        self._batch = max(1, min(GRANT_MAX, s.rate_limit // 50)) if s.rate_limit > 0 else GRANT_MAX
        self._grants: dict[tuple[str, str], Grant] = {}
        self._lock = threading.Lock()

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
        rate_keys = [self.keys.rate(owner), *active_keys(self.keys, owner)]
        rate_args = (s.rate_limit, self._window_us, secrets.token_hex(8), self._batch)
        blocked_ms = 0
        if check_address:
            failures_key = self.keys.auth_failures(address or "")

            def build(pipe: Any) -> None:
                self.scripts.queue(pipe, "limits.rate", rate_keys, *rate_args)
                pipe.hmget(failures_key, ["c", "e"])

            (answer, active, now_ms), (count, ends) = self.scripts.run(build)
            if int(count or 0) >= s.auth_failure_limit:
                blocked_ms = max(0, int(ends or 0) - int(now_ms))
        else:
            answer, active, _ = self.scripts.call("limits.rate", rate_keys, *rate_args)
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
                    ("RateLimit-Policy", self.policy_header),
                    ("RateLimit", f'"rate";r={remaining};t={math.ceil(reset_us / 1_000_000)}'),
                ])

    def admitted(self, owner: str) -> Grant | None:
        """The grant this thread's last admission left for `owner`, if it was this limiter's and its batch is not
        over yet; None otherwise (the in-process API, say, admits nothing)."""
        admitted = _admitted.get()
        if admitted is not None and admitted[0] is self and admitted[1] == owner \
                and time.monotonic() < admitted[2].until:
            return admitted[2]
        return None

    def charge(self, owner: str, requests: int) -> None:
        """Count `requests` more of `owner`'s, taken even past the rate limit: its next requests wait it off."""
        if requests > 0 and self.settings.rate_limit > 0:
            self.scripts.call("limits.charge", [self.keys.rate(owner)], self.settings.rate_limit, self._window_us,
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
        count, left_ms = self.scripts.call("limits.auth_fail", [key], window_ms, nonce)
        if int(count) > s.auth_failure_limit:
            raise RateLimited("Too many failed authentications from this address; retry later.",
                              retry_after_s=math.ceil(max(int(left_ms), 1000) / 1000))

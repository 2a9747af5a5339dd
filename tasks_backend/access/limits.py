"""The limits per principal, kept in Redis so that they hold across web processes and hosts: each kind in a module
of its own (`rate`, `active`, `streams`; their scripts are `store/scripts/limits/`), and `Limiter`, which holds
them all.

`Limiter` is the `Limits` policy the runtime hands the job service (params size and the ceiling on a requested TTL
are checked there, without Redis) and what the entrances admit requests and open streams through.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, TypeVar

import redis

from ..config import Settings
from ..errors import PayloadTooLarge, StoreUnavailable
from ..store.keys import Keys
from ..store.runner import ScriptRunner
from ..store.scripts import SCRIPTS
from .active import ActiveJobs
from .auth import Principal
from .rate import RateLimiter
from .streams import Held, Streams, StreamSlot

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Jobs a listing may read per request: reading and sorting about this many costs the web process and Redis what
#: one request does, so a listing that reads more (a filtered one, A2A ListTasks) is charged one request per this
#: many beyond its first page (`RateLimiter.charge`).
JOBS_PER_REQUEST = 20
#: What a listing reads for the price of the request itself: one full page.
FREE_SCAN = 200
#: The limits' scripts (`store/scripts/limits/`), by name: "limits.rate", "limits.stream"...
LIMIT_SCRIPTS = {name: body for name, body in SCRIPTS.items() if name.startswith("limits.")}


class Limiter:
    """The limits kept in Redis, one part per kind; a `Limits` policy."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.client, self.keys, self.settings = client, keys, settings
        #: The runner the limits' scripts go through (the limits send their plain commands through `client`).
        self.scripts = ScriptRunner(client, LIMIT_SCRIPTS)
        self.rate = RateLimiter(self.scripts, keys, settings)
        self.active = ActiveJobs(client, self.scripts, keys, settings)
        self.streams = Streams(client, self.scripts, keys, settings)

    # -- per request ---------------------------------------------------------------------------
    def admit(self, principal: Principal, address: str | None) -> None:
        """Count one request of `principal` from `address`; raises `RateLimited` over a limit (`RateLimiter.admit`)."""
        self.rate.admit(principal, address)

    def charge(self, owner: str, requests: int) -> None:
        """Count `requests` more of `owner`'s, taken even past the rate limit: its next requests wait it off."""
        self.rate.charge(owner, requests)

    def auth_failed(self, address: str | None) -> None:
        """Count a failed authentication from `address`; raises `RateLimited` once past the limit."""
        self.rate.auth_failed(address)

    # -- the policy the job service calls -----------------------------------------------------
    def check_submit(self, owner: str, params: Any, ttl_s: float | None) -> float | None:
        s = self.settings
        if s.max_params_bytes > 0 and params is not None:
            size = params_size(params)
            if size is not None and size > s.max_params_bytes:
                raise PayloadTooLarge(f"The params take {size} bytes; at most {s.max_params_bytes} are accepted.")
        if ttl_s is not None and s.max_requested_ttl_s > 0:
            ttl_s = min(ttl_s, s.max_requested_ttl_s)
        self.check_active(owner)
        return ttl_s

    def scanned(self, owner: str, jobs: int) -> None:
        try:
            self.charge(owner, max(0, jobs - FREE_SCAN) // JOBS_PER_REQUEST)
        except StoreUnavailable:
            log.debug("a listing's scan went uncharged: Redis is unreachable")

    def check_active(self, owner: str) -> None:
        """Refuse a new job when `owner` has `max_active_jobs` jobs not yet terminal; counted with the admission of
        this request when there was one (`RateLimiter.admitted`), else read now."""
        grant = self.rate.admitted(owner)
        count = self.active.check(owner, grant.active if grant is not None else None)
        if grant is not None and count is not None:
            grant.active = count + 1  # this submit's job, for the grant's next requests

    # -- streams ---------------------------------------------------------------------------------
    def open_stream(self, principal: Principal, lease_s: float | None = None) -> StreamSlot:
        """Take one of the principal's stream slots (raises `QuotaExceeded` when none is free)."""
        return self.streams.open(principal, lease_s)

    def hold(self, principal: Principal, events: Iterator[T], lease_s: float | None = None) -> Held[T]:
        """`events`, counted as one open stream of `principal` until exhausted or closed."""
        return self.streams.hold(principal, events, lease_s)


#: `json.dumps` with options builds its encoder on every call: this one is built once.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def params_size(params: Any) -> int | None:
    """Bytes of params as JSON (what the store keeps, give or take key order); None if not JSON at all."""
    try:
        return len(_COMPACT(params).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return None  # the operation's schema refuses it

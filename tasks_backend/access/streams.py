"""Open streams per principal: a sorted set of leases (stream id -> expiry) in Redis, so that a process that dies
frees its streams when their leases run out.

Rule: a stream takes its slot before it sends anything, renews the lease while it is held, and gives it back when
it ends or its client goes (WSGI servers call `close` on what a response iterates).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterator
from typing import Generic, TypeVar

import redis

from ..config import Settings
from ..errors import QuotaExceeded
from ..store.connect import redis_errors
from ..store.keys import Keys
from ..store.runner import ScriptRunner
from .auth import Principal

T = TypeVar("T")


class Streams:
    def __init__(self, client: redis.Redis, scripts: ScriptRunner, keys: Keys, settings: Settings) -> None:
        self.client, self.scripts, self.keys, self.settings = client, scripts, keys, settings

    def open(self, principal: Principal, lease_s: float | None = None) -> StreamSlot:
        """Take one of the principal's stream slots (raises `QuotaExceeded` when none is free)."""
        slot = StreamSlot(self, principal.name, lease_s or self.settings.sse_max_s + 30)
        slot.renew(first=True)
        return slot

    def hold(self, principal: Principal, events: Iterator[T], lease_s: float | None = None) -> Held[T]:
        """`events`, counted as one open stream of `principal` until exhausted or closed."""
        return Held(self.open(principal, lease_s), events)


class StreamSlot:
    def __init__(self, streams: Streams, owner: str, lease_s: float) -> None:
        self.streams, self.owner, self.lease_ms = streams, owner, int(lease_s * 1000)
        self.id = secrets.token_hex(8)
        self.key = streams.keys.streams(owner)
        self.renew_at = 0.0
        self.open = True

    def renew(self, *, first: bool = False) -> None:
        """Extend the lease (done by long holders every half lease); the first call may be refused."""
        limit = self.streams.settings.max_streams
        if limit <= 0 or (not first and time.monotonic() < self.renew_at):
            return
        held, wait_ms = self.streams.scripts.call("limits.stream", [self.key], limit if first else 2**31,
                                                  self.lease_ms, self.id)
        self.renew_at = time.monotonic() + self.lease_ms / 2000
        if not int(held):
            self.open = False
            raise QuotaExceeded(f"This principal has {limit} open streams; at most {limit} are allowed.",
                                retry_after_s=min(30, math.ceil(max(int(wait_ms), 1000) / 1000)))

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.streams.settings.max_streams > 0:
            try:
                with redis_errors():
                    self.streams.client.zrem(self.key, self.id)
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

"""One job's pass of push delivery: its configs posted in the delivery pool, then saved together.

Rule: the last config of a pass to finish saves every config's cursor and the job's next due time in one write;
times come from Redis's clock as read when the pass began (`Clock`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from ..errors import StoreUnavailable
from ..store.connect import through_outage
from .subscriptions import Cursor, Pending, PushStore

log = logging.getLogger(__name__)

#: How long a pass's save is retried while Redis is unreachable (a restart, a stall).
SAVE_TOLERANCE_S = 4.0
#: How often an unfinished job's feed is read for new events.
FOLLOW_MS = 250
#: Backoff between attempts of one event: 0.5 s, 1 s, 2 s, ... capped.
BACKOFF_BASE_MS = 500
BACKOFF_MAX_MS = 60_000


def backoff_ms(attempts: int) -> int:
    return int(min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** max(0, attempts - 1)))


class Deliverer(Protocol):
    """What a pass needs of the delivery loop (`delivery.PushDeliverer`)."""

    push: PushStore
    stop: threading.Event

    def submit(self, job_pass: JobPass, config_id: str) -> None: ...

    def pass_ended(self, job_pass: JobPass) -> None: ...


class Clock:
    """Redis's time as read at the start of a pass, moved on by this process's monotonic clock."""

    def __init__(self, redis_ms: int) -> None:
        self.redis_ms = redis_ms
        self.started = time.monotonic()

    def now(self) -> int:
        return self.redis_ms + int((time.monotonic() - self.started) * 1000)


class JobPass:
    """One job's pass: its configs are delivered in the pool; the last one to finish saves them all."""

    def __init__(self, deliverer: Deliverer, pending: Pending, token: str, clock: Clock,
                 owner: str = "", claimed_at_ms: int | None = None) -> None:
        self.deliverer = deliverer
        self.pending = pending
        self.token = token
        self.clock = clock
        self.owner = owner
        #: The due time the claim gave the job: it leaves the due set only if nobody moved it since.
        self.claimed_at_ms = claimed_at_ms
        self.posted = 0
        self.cursors: dict[str, Cursor] = {}
        self.more: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._left = 0

    def start(self) -> int:
        """Submit the configs that have something to do now; returns how many were submitted."""
        work = sorted(self.pending.ready) if self.pending.record is not None else []
        self._left = len(work)
        if not work:
            self._finish()
        for config_id in work:
            self.deliverer.submit(self, config_id)
        return len(work)

    def config_done(self, config_id: str, posted: int, cursor: Cursor, more: bool) -> None:
        with self._lock:
            self.posted += posted
            self.cursors[config_id] = cursor
            if more:
                self.more.add(config_id)
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def next_at(self) -> int | None:
        """When the job is next due: never in the past unless there is more to send right away."""
        record = self.pending.record
        if record is None:
            return None  # expired: its configs and cursors expire with it
        now = self.clock.now()
        times: list[int] = []
        for config_id in self.pending.configs:
            cursor = self.cursors.get(config_id) or self.pending.cursor(config_id)
            if cursor.done:
                continue
            if cursor.attempts:
                times.append(max(cursor.retry_at_ms, now + 1))
            elif config_id in self.more:
                times.append(now)
            else:
                times.append(now + FOLLOW_MS)  # following a running job's feed
        return min(times) if times else None

    def _finish(self) -> None:
        # A brief outage (a Redis restart or stall) is waited out here: left to the lock's lapse, the save would
        # wait a minute, and every event this pass posted would be posted again.
        try:
            through_outage(lambda: self.deliverer.push.finish(self.pending, self.token, self.cursors, self.next_at(),
                                                              claimed_at_ms=self.claimed_at_ms),
                           SAVE_TOLERANCE_S, self.deliverer.stop)
        except StoreUnavailable:
            log.warning("push delivery for job %s not saved: Redis is unreachable (retried after the lease)",
                        self.pending.job_id)
        except Exception as exc:
            log.warning("push delivery for job %s not saved: %s", self.pending.job_id, type(exc).__name__)
        finally:
            self.deliverer.pass_ended(self)
            self.done.set()

"""Finished jobs' records, kept in this process for a moment so that a job polled again is answered from memory.

A finished job never changes state again: its record only goes away (its expiry, or Redis losing it), or, for a job
a schedule made, gains the schedule's name a moment after it was made, or, for a child a rerun takes over, gains a
new parent and a longer retention (`forget`s it here; another process may answer the old ones for a moment). A
record is kept for at most `max_age_s` (what a lost record or those changes may go unseen for), never past its
job's expiry by Redis's clock (read every `RESYNC_S`, carried on by this host's monotonic clock); only the store's
reads for callers come here.
Rule: only terminal records, only whole records as Redis gave them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import StoreUnavailable
from ..model.domain import JobRecord

#: How long a finished record is answered from memory before Redis is asked again.
MAX_AGE_S = 30.0
#: Records kept per process (the oldest go first).
SIZE = 4096
#: How often Redis's clock is read again (between reads, this host's monotonic clock carries it on).
RESYNC_S = 10.0
#: A record larger than this (its params and outcome as JSON) is not kept: a full memory stays under 64 MiB.
MAX_RECORD_BYTES = 16 * 1024


class FinishedRecords:
    """A small, bounded, thread-safe memory of finished jobs' records by id."""

    def __init__(self, redis_time: Callable[[], int], size: int = SIZE, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`redis_time`: Redis's clock in ms (`RedisStore.now_ms`); `clock`: this host's monotonic one, in s."""
        self.redis_time, self.size, self.max_age_s, self.clock = redis_time, size, max_age_s, clock
        self._synced: tuple[float, int] | None = None  # (clock(), Redis ms) when Redis's clock was last read
        self._kept: OrderedDict[str, tuple[float, JobRecord, tuple[str, str | None] | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str, meta: str | None = None) -> tuple[JobRecord, str | None] | None:
        """The record kept for `job_id` (and its adapter metadata field `meta`, when that was kept with it), or
        None: never kept, kept too long ago, or kept without that field."""
        with self._lock:
            kept = self._kept.get(job_id)
            if kept is None:
                return None
            until, record, field = kept
            if self.clock() >= until:
                del self._kept[job_id]
                return None
        if meta is None:
            return record, None
        return (record, field[1]) if field is not None and field[0] == meta else None

    def keep(self, record: JobRecord, meta: tuple[str, str | None] | None = None) -> None:
        """Remember `record` if its job is finished (anything else is left alone), with one metadata field (name,
        value). Kept again, a record keeps its first time: it is never answered from memory for longer."""
        if self.size <= 0 or not record.terminal or not _small(record):
            return
        try:
            left_s = (record.expires_ms - self._redis_ms()) / 1000
        except StoreUnavailable:
            return
        with self._lock:
            old = self._kept.pop(record.id, None)
            until = old[0] if old is not None else self.clock() + min(self.max_age_s, left_s)
            if until <= self.clock():
                return
            self._kept[record.id] = (until, record, meta)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def forget(self, job_id: str) -> None:
        """Drop what is kept for `job_id` (its record changed)."""
        with self._lock:
            self._kept.pop(job_id, None)

    def _redis_ms(self) -> float:
        now = self.clock()
        synced = self._synced
        if synced is None or now - synced[0] >= RESYNC_S:
            synced = self._synced = (now, self.redis_time())
        return synced[1] + (now - synced[0]) * 1000


def _small(record: JobRecord) -> bool:
    size = len(record.params_json)
    for part in (record.result, record.error, record.input_requests):
        if part is not None and size <= MAX_RECORD_BYTES:
            size += len(json.dumps(part, default=str))
    return size <= MAX_RECORD_BYTES


class FinishedReads:
    """The store's reads for callers (the job service's), through `finished`; a part of `RedisStore`."""

    finished: FinishedRecords
    get: Callable[[str], JobRecord | None]
    get_with_meta: Callable[[str, str], tuple[JobRecord | None, str | None]]

    def read(self, job_id: str) -> JobRecord | None:
        """`get` for a caller: a finished job read a moment ago is answered from memory."""
        return self._read(job_id, None)[0]

    def read_with_meta(self, job_id: str, field: str) -> tuple[JobRecord | None, str | None]:
        """`get_with_meta` for a caller, as `read` is `get`'s."""
        return self._read(job_id, field)

    def _read(self, job_id: str, field: str | None) -> tuple[JobRecord | None, str | None]:
        kept = self.finished.get(job_id, field)
        if kept is not None:
            return kept
        found, value = (self.get(job_id), None) if field is None else self.get_with_meta(job_id, field)
        if found is not None:
            self.finished.keep(found, None if field is None else (field, value))
        return found, value

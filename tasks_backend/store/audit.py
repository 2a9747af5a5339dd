"""The audit trail in Redis: who did what, to which job or schedule, from where, and when (Redis's clock).

Each entry goes to up to three streams, in one round trip: the whole system's, the job's (when about a job) and
the owner's (the owner of the job or schedule acted on), so that "about this job" and "about my things" are
read without scanning everything. Each stream is bounded: entries older than the retention are trimmed at every
write (and never read back), its length is capped, and the stream expires the retention after its last write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from .connect import redis_errors
from .jobs import RedisStore

#: Length caps (entries): the system's stream, one owner's, one job's (at roughly 200 bytes an entry: about
#: 40 MB, 4 MB and 0.2 MB of Redis memory at most).
MAX_ENTRIES = 200_000
MAX_OWNER_ENTRIES = 20_000
MAX_JOB_ENTRIES = 1_000

#: The entry's fields as stored (short: one copy per stream) -> `AuditEntry` attribute.
_FIELDS = {"p": "principal", "a": "action", "ip": "address", "j": "job_id", "t": "target", "o": "owner",
           "d": "detail", "r": "request_id"}


class AuditNotWritten(Exception):
    """Redis refused the entry in some of its streams (a key of another type there, a script error); the streams
    named in `streams` lack it, the others have it."""

    def __init__(self, streams: list[str], reason: str) -> None:
        super().__init__(f"{reason} ({len(streams)} stream(s))")
        self.streams, self.reason = streams, reason


@dataclass(frozen=True)
class AuditEntry:
    #: The stream id: `<Redis ms>-<sequence>`; its ms is when the entry was written.
    id: str
    principal: str
    action: str
    address: str = ""
    job_id: str = ""
    target: str = ""
    owner: str = ""
    detail: str = ""
    request_id: str = ""

    @property
    def at_ms(self) -> int:
        return int(self.id.partition("-")[0])


def _entry(raw: Any) -> AuditEntry:
    entry_id, values = raw  # redis-py gives a stream entry as (id, {field: value})
    return AuditEntry(id=entry_id, **{attr: values.get(name) or "" for name, attr in _FIELDS.items()})


class AuditStore:
    def __init__(self, store: RedisStore) -> None:
        self.redis = store.redis
        self.keys = store.keys
        self.scripts = store.scripts

    def append(self, fields: Mapping[str, str], *, retention_ms: int) -> None:
        """Write one entry (`fields`: `AuditEntry`'s attributes but `id`; empty ones are left out)."""
        stored = {name: fields[attr] for name, attr in _FIELDS.items() if fields.get(attr)}
        flat = [part for pair in stored.items() for part in pair]
        uid = os.urandom(8).hex()  # the same in every stream, and in a replay
        streams = [(self.keys.audit(), MAX_ENTRIES)]
        if stored.get("j"):
            streams.append((self.keys.audit_job(stored["j"]), MAX_JOB_ENTRIES))
        if stored.get("o"):
            streams.append((self.keys.audit_owner(stored["o"]), MAX_OWNER_ENTRIES))

        # The system's stream first: its entry id is then asked of the others, so that one entry has one id in
        # every view (a stream that already holds a later id, on another Cluster node's clock, makes its own).
        # A stream Redis refuses the entry in does not keep it from the others.
        refused: list[str] = []
        reason = ""
        system_key, system_cap = streams[0]
        try:
            entry_id = self.scripts.call("audit.append", [system_key], uid, max(1, retention_ms), system_cap, "",
                                         *flat)
        except redis.ResponseError as exc:
            refused.append(system_key)
            entry_id, reason = "", _reason(exc)
        if len(streams) > 1:
            def build(pipe: Any) -> None:
                for key, cap in streams[1:]:  # one command each: they live in different Redis Cluster slots
                    self.scripts.queue(pipe, "audit.append", [key], uid, max(1, retention_ms), cap, entry_id, *flat)

            try:
                self.scripts.run(build)
            except redis.ResponseError as exc:  # every command was sent: only the refused ones lack the entry
                refused += [key for key, _ in streams[1:] if not self._holds(key, uid)]
                reason = reason or _reason(exc)
        if refused:
            raise AuditNotWritten(refused, reason)

    def _holds(self, key: str, uid: str) -> bool:
        """Whether stream `key` ends with the entry `uid` (False for a key that is no stream)."""
        try:
            with redis_errors():
                last = self.redis.xrevrange(key, "+", "-", count=1)
        except redis.ResponseError:
            return False
        return bool(last) and last[0][1].get("uid") == uid

    def stream(self, *, job_id: str | None = None, owner: str | None = None) -> str:
        """The stream to read: the job's, else the owner's, else the system's."""
        if job_id:
            return self.keys.audit_job(job_id)
        return self.keys.audit_owner(owner) if owner else self.keys.audit()

    def read(self, key: str, *, before: str | None, since_ms: int, count: int) -> list[AuditEntry]:
        """Up to `count` entries of stream `key`, newest first, older than entry `before` (exclusive) and not
        older than `since_ms`."""
        with redis_errors():
            raw = self.redis.xrevrange(key, f"({before}" if before else "+", f"{max(0, since_ms)}-0", count=count)
        return [_entry(r) for r in raw]

    def now_ms(self) -> int:
        """Redis's clock, in ms."""
        with redis_errors():
            seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000


def _reason(exc: redis.ResponseError) -> str:
    """What Redis said, without the script's name and place (`WRONGTYPE ...`, or the script's error)."""
    text = str(exc)
    return text.rsplit(": ", 1)[-1][:200] if "script" in text else text[:200]

"""The domain model: job states, the one transition table, and the job record.

Everything else (Lua scripts, protocol tables, adapters) derives from the definitions here.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any


class JobState(enum.StrEnum):
    """Where a job is in its life. Our own record is the source of truth, never Celery's backend."""

    QUEUED = "queued"
    """Accepted and published (or about to be republished by the sweeper); no worker holds it."""
    RUNNING = "running"
    """A worker holds the lease and is running the job function."""
    INPUT_REQUIRED = "input_required"
    """Parked until every open input request is answered; holds no worker."""
    SUSPENDED = "suspended"
    """Parked until a time (a long `ctx.sleep`) or until its child jobs finish (`ctx.wait_for`); holds no worker."""
    COMPLETED = "completed"
    """The job function returned; its result is stored."""
    FAILED = "failed"
    """The job function raised, or the job used up its attempts; the error is stored."""
    CANCELLED = "cancelled"
    """Stopped on request (or abandoned at the end of its TTL)."""


TERMINAL_STATES: frozenset[JobState] = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # running -> queued: a lapsed lease (dead worker) or a transient error being retried.
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {JobState.QUEUED, JobState.INPUT_REQUIRED, JobState.SUSPENDED, JobState.COMPLETED, JobState.FAILED,
         JobState.CANCELLED}
    ),
    JobState.INPUT_REQUIRED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}),
    # suspended -> queued: its time came, or its children finished (`running.waking`).
    JobState.SUSPENDED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


@functools.cache
def sources_of(target: JobState) -> tuple[JobState, ...]:
    """The states from which `target` may be entered, in declaration order."""
    return tuple(s for s in JobState if target in ALLOWED_TRANSITIONS[s])


class SubmitOutcome(enum.Enum):
    """What a submit did. A repeated idempotency key returns the existing handle rather than raising."""

    CREATED = "created"
    EXISTING = "existing"


#: A job's priority when its submit names none (0 lowest, 9 highest).
DEFAULT_PRIORITY = 5


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_uuid() -> str:
    """A random (version 4) UUID's canonical text, as `str(uuid.uuid4())` gives: a job's id, a message's tag.

    Built from its 16 random bytes directly: `uuid.UUID` checks and stores them as an integer first, and its text
    is formatted from that integer again, which costs twice as much on every submit."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122's variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC with a `Z` suffix (on every poll, so kept cheap)."""
    seconds, milli = divmod(ms, 1000)
    t = time.gmtime(seconds)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{milli:03d}Z"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as stored. Persistence lives in the store (its hash fields: `store.fields`); this is only the data."""

    id: str
    owner: str
    operation: str
    state: JobState
    created_ms: int
    updated_ms: int
    ttl_ms: int
    poll_ms: int
    params_json: str = "{}"
    status_message: str | None = None
    progress: float | None = None
    total: float | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    attempts: int = 0
    retries: int = 0
    token: int = 0
    lease_until_ms: int = 0
    idempotency_key: str | None = None
    #: The name of the schedule whose tick made the job (None: submitted).
    schedule: str | None = None
    #: The job whose `ctx.spawn` made this one (None: submitted by a caller).
    parent_id: str | None = None
    #: When the job may start (Redis ms; None: at once), and its priority among its owner's queued jobs (0-9).
    run_at_ms: int | None = None
    priority: int = DEFAULT_PRIORITY
    #: The submit's trace context (a W3C `traceparent`; None: not traced), which the worker's spans join.
    trace: str | None = None
    #: Since when this run waited in the queue (Redis ms; set by a claim only, from the last move before it; a
    #: replayed claim sees its own move instead). Not part of the job: records that differ in it alone are equal.
    queued_ms: int = field(default=0, compare=False)
    #: The failed or cancelled job this one reruns (None: not a rerun).
    rerun_of: str | None = None
    #: Who answered each question: key -> {"by": principal or "link:<id>", "at": Redis ms, "from": address}.
    answered_by: dict[str, Any] | None = None

    @property
    def params(self) -> dict[str, Any]:
        """The job's parameters (parsed on use: polls never need them)."""
        value = json.loads(self.params_json)
        return value if isinstance(value, dict) else {}

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def expires_ms(self) -> int:
        return self.created_ms + self.ttl_ms

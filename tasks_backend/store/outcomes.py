"""What the store's scripts answer, as enums (their values are the scripts' own replies).

Rule: a caller compares an outcome with these members, never with a string or a number.
"""

from __future__ import annotations

import enum


class Moved(enum.StrEnum):
    """A transition's outcome."""

    OK = "ok"
    MISSING = "missing"
    #: The caller's token no longer holds the job (lapsed lease, expiry, another worker).
    FENCED = "fenced"
    #: The owner cancelled this token's run.
    CANCELLED = "cancelled"
    #: The state table does not allow the move.
    ILLEGAL = "illegal"


class Claimed(enum.StrEnum):
    """A claim's outcome."""

    OK = "ok"
    MISSING = "missing"
    TERMINAL = "terminal"
    #: Waiting for input: no worker runs it.
    PARKED = "parked"
    #: Another worker holds a lease that has not lapsed.
    BUSY = "busy"
    #: It used up its attempts, and failed now.
    EXHAUSTED = "exhausted"


class Standing(enum.IntEnum):
    """A running job's worker's standing, after a renew or a progress report."""

    CANCELLED = 1
    CARRY_ON = 0
    LOST = -1


class Stepped(enum.StrEnum):
    """Recording a step's value."""

    OK = "ok"
    #: Recorded before (by an earlier run, or a replay): the value recorded first comes with it.
    EXISTS = "exists"
    FENCED = "fenced"
    CANCELLED = "cancelled"


class Cancelled(enum.StrEnum):
    """An owner's cancel."""

    CANCELLED = "cancelled"
    #: Already finished.
    TERMINAL = "terminal"
    MISSING = "missing"


class Answered(enum.StrEnum):
    """Answers to a job's input requests."""

    #: Every request answered: the job is queued again.
    QUEUED = "queued"
    #: Some requests still open.
    WAITING = "waiting"
    #: The job does not wait for input.
    CONFLICT = "conflict"
    MISSING = "missing"


class Swept(enum.StrEnum):
    """What the sweeper does with a job it looked at."""

    REPUBLISH = "republish"
    LATER = "later"
    DONE = "done"
    GONE = "gone"


class Locked(enum.IntEnum):
    """Taking a job's push lock."""

    HELD = 1
    #: Another worker holds it.
    TAKEN = 0


class Saved(enum.IntEnum):
    """Saving a push pass's cursors (and releasing its lock)."""

    #: A config was added, changed or replaced during the pass: look again at once.
    CHANGED = 1
    SAVED = 0
    #: Another worker holds the lock: nothing written.
    NOT_OURS = -1


class Woken(enum.StrEnum):
    """Waking a waiting job."""

    #: Back in the queue: hand it to the workers.
    QUEUED = "queued"
    #: A sleeper whose time has not come.
    EARLY = "early"
    #: Not waiting (any more), or waiting since another run parked it.
    IDLE = "idle"
    MISSING = "missing"

"""How each internal state reads in a task handle, and how Celery's states fold into ours.

A protocol with a state vocabulary of its own maps these states in its adapter (A2A: `adapters/a2a/wire.py`).

One row per state; a test checks that every table covers every state.
"""

from __future__ import annotations

from typing import Final

from .domain import JobState

#: Plain HTTP and both MCP revisions share the status vocabulary.
WIRE_STATUS: Final[dict[JobState, str]] = {
    JobState.QUEUED: "working",
    JobState.RUNNING: "working",
    JobState.INPUT_REQUIRED: "input_required",
    JobState.SUSPENDED: "working",
    JobState.COMPLETED: "completed",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}

#: Celery states each of ours absorbs (for operators reading Flower next to our API).
CELERY_STATES: Final[dict[JobState, tuple[str, ...]]] = {
    JobState.QUEUED: ("PENDING", "RECEIVED"),
    JobState.RUNNING: ("STARTED", "RETRY"),
    JobState.INPUT_REQUIRED: (),
    JobState.SUSPENDED: (),
    JobState.COMPLETED: ("SUCCESS",),
    JobState.FAILED: ("FAILURE",),
    JobState.CANCELLED: ("REVOKED",),
}

_FROM_CELERY: Final[dict[str, JobState]] = {c: s for s, names in CELERY_STATES.items() for c in names}

#: Wire statuses a caller may filter a listing by, and the internal states behind each.
STATES_FOR_STATUS: Final[dict[str, frozenset[JobState]]] = {
    status: frozenset(s for s, w in WIRE_STATUS.items() if w == status) for status in set(WIRE_STATUS.values())
}


def from_celery(celery_state: str) -> JobState | None:
    """Our state for a Celery state, or None for states we never rely on (REJECTED, custom ones)."""
    return _FROM_CELERY.get(celery_state)

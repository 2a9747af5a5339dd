"""What Flower shows for a job: the runner's Celery outcome follows our state through the one table.

The runner task returns normally whatever happened to the job, so Celery would call every run a
SUCCESS. For a job that ended `failed`, the runner instead raises `JobFailedOutcome`, an expected
exception (declared in the task's `throws`, so it is logged in one line without a traceback, and
the message is acked): Celery then emits `task-failed` and Flower shows FAILURE, as `CELERY_STATES`
says it should. The job's record in Redis stays the source of truth; this only changes the display.
"""

from __future__ import annotations

from tasks_backend.domain import JobState
from tasks_backend.states import CELERY_STATES


class JobFailedOutcome(Exception):
    """The job this run executed ended `failed` (its error is in the job record, not here)."""


_STATE_VALUES = frozenset(s.value for s in JobState)


def celery_outcome(outcome: str) -> str:
    """Return the runner's outcome, or raise when our state maps to Celery's FAILURE."""
    state = JobState(outcome) if outcome in _STATE_VALUES else None
    if state is not None and "FAILURE" in CELERY_STATES[state]:
        raise JobFailedOutcome(f"job {state.value}; see its record for the error")
    return outcome

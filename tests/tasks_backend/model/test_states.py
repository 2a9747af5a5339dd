from __future__ import annotations

import pytest

from adapters.a2a.wire import A2A_STATE
from tasks_backend import errors
from tasks_backend.model.domain import ALLOWED_TRANSITIONS, TERMINAL_STATES, JobState, rfc3339, sources_of
from tasks_backend.model.states import CELERY_STATES, STATES_FOR_STATUS, WIRE_STATUS, from_celery


@pytest.mark.parametrize("table", [WIRE_STATUS, A2A_STATE, CELERY_STATES, ALLOWED_TRANSITIONS])
def test_every_table_covers_every_state(table: dict[JobState, object]) -> None:
    assert set(table) == set(JobState)


def test_terminal_states_never_change() -> None:
    for state in TERMINAL_STATES:
        assert ALLOWED_TRANSITIONS[state] == frozenset()
    assert {s for s in JobState if not ALLOWED_TRANSITIONS[s]} == TERMINAL_STATES


def test_wire_vocabularies() -> None:
    assert set(WIRE_STATUS.values()) == {"working", "input_required", "completed", "failed", "cancelled"}
    assert all(v.startswith("TASK_STATE_") for v in A2A_STATE.values())
    assert A2A_STATE[JobState.CANCELLED] == "TASK_STATE_CANCELED"
    assert STATES_FOR_STATUS["working"] == {JobState.QUEUED, JobState.RUNNING, JobState.SUSPENDED}


def test_celery_states_fold_into_ours() -> None:
    assert from_celery("PENDING") is JobState.QUEUED
    assert from_celery("STARTED") is JobState.RUNNING
    assert from_celery("SUCCESS") is JobState.COMPLETED
    assert from_celery("REVOKED") is JobState.CANCELLED
    assert from_celery("REJECTED") is None


def test_sources_follow_the_table() -> None:
    assert sources_of(JobState.RUNNING) == (JobState.QUEUED,)
    assert JobState.COMPLETED not in sources_of(JobState.CANCELLED)


def test_rfc3339_is_utc_with_z() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_795_000_000_123) == "2026-11-18T11:06:40.123Z"


def test_every_error_class_has_its_own_slug() -> None:
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.TasksBackendError)}
    assert classes == set(errors.error_classes())
    slugs = [c.__dict__.get("slug") for c in classes]
    assert None not in slugs and len(slugs) == len(set(slugs))
    assert all(c.__dict__.get("title") for c in classes)
    assert errors.error_for_slug("not-found") is errors.JobNotFound
    assert errors.error_for_slug("no-such-slug") is errors.TasksBackendError

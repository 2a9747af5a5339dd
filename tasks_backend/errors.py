"""One error hierarchy, with protocol-neutral data only: a stable slug, a title and a message.

The tree is drawn in docs/architecture.md ("Errors"). Each adapter owns its protocol's codes: one table per
adapter from these classes to its codes (HTTP status in `adapters.problems`, JSON-RPC codes in the MCP and A2A
adapters), read through `most_specific`.
Rule: anything that is not a `TasksBackendError` is an internal error, logged, and never described to the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class TasksBackendError(Exception):
    """Root of every error the service raises on purpose.

    `slug` names the kind of error for every protocol (stable: clients rebuild typed errors from it),
    `title` is its short human name, `message` the default detail."""

    message = "Request failed."
    slug = "internal"
    title = "Internal error"

    def __init__(self, detail: str | None = None, *, extra: dict[str, Any] | None = None) -> None:
        self.detail = detail or self.message
        self.extra = extra or {}
        super().__init__(self.detail)


class BadRequest(TasksBackendError):
    message = "The request is malformed."
    slug = "bad-request"
    title = "Bad request"


class PayloadTooLarge(BadRequest):
    message = "The request body is too large."
    slug = "payload-too-large"
    title = "Payload too large"


class InvalidParams(BadRequest):
    message = "The parameters are invalid."
    slug = "invalid-params"
    title = "Invalid parameters"


class UnknownOperation(InvalidParams):
    message = "No such operation."
    slug = "unknown-operation"
    title = "Unknown operation"


class Unauthenticated(TasksBackendError):
    message = "A valid bearer token is required."
    slug = "unauthenticated"
    title = "Unauthenticated"


class OriginNotAllowed(TasksBackendError):
    message = "Requests from this Origin are not allowed."
    slug = "origin-not-allowed"
    title = "Origin not allowed"


class JobNotFound(TasksBackendError):
    # Deliberately carries no id: another owner's job must read exactly like a missing one.
    message = "No such job."
    slug = "not-found"
    title = "Not found"


class ScheduleNotFound(JobNotFound):
    # Another owner's schedule reads exactly like a missing one.
    message = "No such schedule."
    slug = "schedule-not-found"
    title = "Schedule not found"


class Conflict(TasksBackendError):
    message = "The job is not in a state that allows this."
    slug = "conflict"
    title = "Conflict"


class JobNotCancelable(Conflict):
    message = "The job has already finished."
    slug = "not-cancelable"
    title = "Job not cancelable"


class JobNotFinished(Conflict):
    message = "The job has not finished; only a failed or cancelled job can be rerun."
    slug = "not-finished"
    title = "Job not finished"


class NotWaitingForInput(Conflict):
    message = "The job is not waiting for input."
    slug = "not-waiting-for-input"
    title = "Not waiting for input"


class ScheduleConflict(Conflict):
    message = "A schedule of this name exists with another definition; delete it first."
    slug = "schedule-conflict"
    title = "Schedule exists"


class ScheduleLimitReached(Conflict):
    """A 409, not a 429 like the quotas that free up by themselves: only deleting a schedule makes room."""

    message = "This principal has as many schedules as it may define; delete one first."
    slug = "schedule-limit-reached"
    title = "Schedule limit reached"


class IdempotencyConflict(TasksBackendError):
    message = "This idempotency key was already used with a different request."
    slug = "idempotency-conflict"
    title = "Idempotency key reused"


class RateLimited(TasksBackendError):
    """Over a limit: HTTP 429 with `Retry-After` (and the IETF RateLimit fields when a rate policy was hit);
    JSON-RPC callers get the retry hint in the error's `data`."""

    message = "Too many requests; retry later."
    slug = "rate-limited"
    title = "Too many requests"

    def __init__(self, detail: str | None = None, *, retry_after_s: int | None = None,
                 headers: list[tuple[str, str]] | None = None, extra: dict[str, Any] | None = None) -> None:
        hint = retry_after_s if retry_after_s is not None else (extra or {}).get("retryAfterSeconds")
        self.retry_after_s = max(1, hint if isinstance(hint, int) else 1)
        super().__init__(detail, extra={**(extra or {}), "retryAfterSeconds": self.retry_after_s})
        #: What an HTTP answer carries besides the body: `Retry-After`, and `RateLimit*` for a rate policy.
        self.headers = [("Retry-After", str(self.retry_after_s)), *(headers or [])]


class QuotaExceeded(RateLimited):
    message = "A quota of this principal is used up; retry once some of its work has finished."
    slug = "quota-exceeded"
    title = "Quota exceeded"


class ServiceUnavailable(TasksBackendError):
    message = "The service is temporarily unavailable; retry later."
    slug = "unavailable"
    title = "Service unavailable"
    retry_after_s = 2


class StoreUnavailable(ServiceUnavailable):
    message = "The job store is unreachable; retry later."
    slug = "store-unavailable"
    title = "Job store unavailable"


class DispatchUnavailable(ServiceUnavailable):
    message = "The job queue is unreachable; retry later."
    slug = "queue-unavailable"
    title = "Job queue unavailable"


#: Error kinds are named by URIs under this base (RFC 9457 problem types over HTTP; clients read them back).
PROBLEM_TYPE_BASE = "https://tasks-backend.dev/problems/"


def most_specific(table: Mapping[type[TasksBackendError], T], exc: BaseException) -> T | None:
    """The row of an adapter's table for the most specific class of `exc`; None when none matches."""
    for cls in type(exc).__mro__:
        row = table.get(cls)  # type: ignore[call-overload]
        if row is not None:
            return row  # type: ignore[no-any-return]
    return None


def error_classes() -> list[type[TasksBackendError]]:
    """Every error class, root first: what each adapter's table must cover."""
    found: list[type[TasksBackendError]] = []
    pending: list[type[TasksBackendError]] = [TasksBackendError]
    while pending:
        cls = pending.pop(0)
        if cls.__module__ == __name__:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def error_for_slug(slug: str) -> type[TasksBackendError]:
    """The error class behind a slug (used by clients to rebuild typed errors)."""
    for cls in error_classes():
        if cls.__dict__.get("slug") == slug:
            return cls
    return TasksBackendError

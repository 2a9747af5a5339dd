"""One error hierarchy, mapped once to HTTP status and JSON-RPC codes.

    TasksBackendError
    ├── BadRequest                 malformed body, unknown field types, bad cursor
    │   ├── PayloadTooLarge
    │   └── InvalidParams          params that fail the operation's schema
    │       └── UnknownOperation
    ├── Unauthenticated            no or bad credentials
    ├── OriginNotAllowed           a browser page from an origin not in TASKS_BACKEND_ALLOWED_ORIGINS
    ├── JobNotFound                missing, expired, or another owner's job: all alike
    ├── Conflict                   the job is not in a state that allows the call
    │   ├── JobNotCancelable       already terminal
    │   └── NotWaitingForInput
    ├── IdempotencyConflict        same key, different request
    ├── RateLimited                a limit of the caller's was reached; retry after `retry_after_s`
    │   └── QuotaExceeded          too many active jobs or open streams
    └── ServiceUnavailable         Redis or the broker cannot be reached; retry later
        ├── StoreUnavailable
        └── DispatchUnavailable

Adapters never choose a status or code themselves: they read `ERROR_MAP`. Anything that is not a
`TasksBackendError` is an internal error (500 / -32603), logged, and never described to the caller.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class TasksBackendError(Exception):
    """Root of every error the service raises on purpose."""

    message = "Request failed."

    def __init__(self, detail: str | None = None, *, extra: dict[str, Any] | None = None) -> None:
        self.detail = detail or self.message
        self.extra = extra or {}
        super().__init__(self.detail)


class BadRequest(TasksBackendError):
    message = "The request is malformed."


class PayloadTooLarge(BadRequest):
    message = "The request body is too large."


class InvalidParams(BadRequest):
    message = "The parameters are invalid."


class UnknownOperation(InvalidParams):
    message = "No such operation."


class Unauthenticated(TasksBackendError):
    message = "A valid bearer token is required."


class OriginNotAllowed(TasksBackendError):
    message = "Requests from this Origin are not allowed."


class JobNotFound(TasksBackendError):
    # Deliberately carries no id: another owner's job must read exactly like a missing one.
    message = "No such job."


class Conflict(TasksBackendError):
    message = "The job is not in a state that allows this."


class JobNotCancelable(Conflict):
    message = "The job has already finished."


class NotWaitingForInput(Conflict):
    message = "The job is not waiting for input."


class IdempotencyConflict(TasksBackendError):
    message = "This idempotency key was already used with a different request."


class RateLimited(TasksBackendError):
    """Over a limit: HTTP 429 with `Retry-After` (and the IETF RateLimit fields when a rate policy was hit);
    JSON-RPC callers get the retry hint in the error's `data`."""

    message = "Too many requests; retry later."

    def __init__(self, detail: str | None = None, *, retry_after_s: int | None = None,
                 headers: list[tuple[str, str]] | None = None, extra: dict[str, Any] | None = None) -> None:
        hint = retry_after_s if retry_after_s is not None else (extra or {}).get("retryAfterSeconds")
        self.retry_after_s = max(1, hint if isinstance(hint, int) else 1)
        super().__init__(detail, extra={**(extra or {}), "retryAfterSeconds": self.retry_after_s})
        #: What an HTTP answer carries besides the body: `Retry-After`, and `RateLimit*` for a rate policy.
        self.headers = [("Retry-After", str(self.retry_after_s)), *(headers or [])]


class QuotaExceeded(RateLimited):
    message = "A quota of this principal is used up; retry once some of its work has finished."


class ServiceUnavailable(TasksBackendError):
    message = "The service is temporarily unavailable; retry later."
    retry_after_s = 2


class StoreUnavailable(ServiceUnavailable):
    message = "The job store is unreachable; retry later."


class DispatchUnavailable(ServiceUnavailable):
    message = "The job queue is unreachable; retry later."


class ErrorMapping(NamedTuple):
    http_status: int
    mcp_code: int
    a2a_code: int
    slug: str
    title: str


# JSON-RPC: -32600 invalid request, -32602 invalid params, -32603 internal.
# A2A: -32001 TaskNotFound, -32002 TaskNotCancelable, -32004 UnsupportedOperation (no input expected).
ERROR_MAP: dict[type[TasksBackendError], ErrorMapping] = {
    TasksBackendError: ErrorMapping(500, -32603, -32603, "internal", "Internal error"),
    # A service-level BadRequest is about a call's arguments (cursor, key, filter); a malformed JSON-RPC
    # envelope is answered by the JSON-RPC layer itself with -32600.
    BadRequest: ErrorMapping(400, -32602, -32602, "bad-request", "Bad request"),
    PayloadTooLarge: ErrorMapping(413, -32602, -32602, "payload-too-large", "Payload too large"),
    InvalidParams: ErrorMapping(422, -32602, -32602, "invalid-params", "Invalid parameters"),
    UnknownOperation: ErrorMapping(422, -32602, -32602, "unknown-operation", "Unknown operation"),
    Unauthenticated: ErrorMapping(401, -32001, -32001, "unauthenticated", "Unauthenticated"),
    # -32600: the request as a whole is refused, before any method is looked at.
    OriginNotAllowed: ErrorMapping(403, -32600, -32600, "origin-not-allowed", "Origin not allowed"),
    JobNotFound: ErrorMapping(404, -32602, -32001, "not-found", "Not found"),
    Conflict: ErrorMapping(409, -32602, -32002, "conflict", "Conflict"),
    JobNotCancelable: ErrorMapping(409, -32602, -32002, "not-cancelable", "Job not cancelable"),
    NotWaitingForInput: ErrorMapping(409, -32602, -32004, "not-waiting-for-input", "Not waiting for input"),
    IdempotencyConflict: ErrorMapping(422, -32602, -32602, "idempotency-conflict", "Idempotency key reused"),
    # JSON-RPC has no rate-limit code: -32000 is the first implementation-defined server error.
    RateLimited: ErrorMapping(429, -32000, -32000, "rate-limited", "Too many requests"),
    QuotaExceeded: ErrorMapping(429, -32000, -32000, "quota-exceeded", "Quota exceeded"),
    ServiceUnavailable: ErrorMapping(503, -32603, -32603, "unavailable", "Service unavailable"),
    StoreUnavailable: ErrorMapping(503, -32603, -32603, "store-unavailable", "Job store unavailable"),
    DispatchUnavailable: ErrorMapping(503, -32603, -32603, "queue-unavailable", "Job queue unavailable"),
}

PROBLEM_TYPE_BASE = "https://tasks-backend.dev/problems/"


def mapping_for(exc: BaseException) -> ErrorMapping:
    """The most specific row for an exception; unknown exceptions map to the internal error row."""
    for cls in type(exc).__mro__:
        row = ERROR_MAP.get(cls)  # type: ignore[call-overload]
        if row is not None:
            return row
    return ERROR_MAP[TasksBackendError]


def error_for_slug(slug: str) -> type[TasksBackendError]:
    """The error class behind a problem type slug (used by clients to rebuild typed errors)."""
    for cls, row in ERROR_MAP.items():
        if row.slug == slug:
            return cls
    return TasksBackendError

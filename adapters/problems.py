"""Errors to `application/problem+json` (RFC 9457), in one place: HTTP's status per error class is here.

The problem type is the error's slug under `PROBLEM_TYPE_BASE`, its title the error's title; both are
the core's, protocol-neutral. The status is HTTP's own, from `HTTP_STATUS`.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from tasks_backend.errors import (
    PROBLEM_TYPE_BASE,
    BadRequest,
    Conflict,
    IdempotencyConflict,
    InvalidParams,
    JobNotFound,
    OriginNotAllowed,
    PayloadTooLarge,
    RateLimited,
    ServiceUnavailable,
    TasksBackendError,
    Unauthenticated,
    most_specific,
)

log = logging.getLogger(__name__)
PROBLEM_JSON = "application/problem+json"
#: Slug, title and detail of the answer to anything unexpected: nothing about it reaches the caller.
INTERNAL = ("internal", "Internal error", "An unexpected error occurred.")

#: HTTP status per error class; a subclass not listed answers with its nearest listed ancestor's.
HTTP_STATUS: dict[type[TasksBackendError], int] = {
    TasksBackendError: 500,
    BadRequest: 400,
    PayloadTooLarge: 413,
    InvalidParams: 422,
    Unauthenticated: 401,
    OriginNotAllowed: 403,
    JobNotFound: 404,
    Conflict: 409,
    IdempotencyConflict: 422,
    RateLimited: 429,
    ServiceUnavailable: 503,
}


def status_for(exc: BaseException) -> int:
    """The HTTP status of an error; anything not ours is a 500."""
    return most_specific(HTTP_STATUS, exc) or 500


def problem_body(status: int, slug: str, title: str, detail: str,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": PROBLEM_TYPE_BASE + slug, "title": title, "status": status, "detail": detail}
    body.update(extra or {})
    return body


def problem(status: int, slug: str, title: str, detail: str, extra: dict[str, Any] | None = None) -> Response:
    response = jsonify(problem_body(status, slug, title, detail, extra))
    response.status_code = status
    response.mimetype = PROBLEM_JSON
    return response


def error_parts(exc: Exception) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
    """Status, problem body and extra headers for an error; Flask-free, for the WSGI fast path too.

    Anything that is not one of ours is logged and answered as a bare 500."""
    if not isinstance(exc, TasksBackendError):
        log.error("unhandled error", exc_info=exc)
        return 500, problem_body(500, *INTERNAL), []
    status = status_for(exc)
    body = problem_body(status, exc.slug, exc.title, exc.detail, exc.extra)
    headers: list[tuple[str, str]] = []
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="tasks-backend"'))
    if isinstance(exc, ServiceUnavailable):
        headers.append(("Retry-After", str(exc.retry_after_s)))
    if isinstance(exc, RateLimited):
        headers.extend(exc.headers)
    return status, body, headers


def from_error(exc: Exception) -> Response:
    status, body, headers = error_parts(exc)
    response = jsonify(body)
    response.status_code = status
    response.mimetype = PROBLEM_JSON
    response.headers.extend(headers)
    return response


def register(app: Flask) -> None:
    @app.errorhandler(TasksBackendError)
    def _ours(exc: TasksBackendError) -> Response:
        return from_error(exc)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        code = exc.code or 500
        slug = (exc.name or "error").lower().replace(" ", "-")
        response = problem(code, slug, exc.name or "Error", exc.description or "")
        if code == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> Response:
        return from_error(exc)

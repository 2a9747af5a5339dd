"""Errors to `application/problem+json` (RFC 9457), in one place, from `ERROR_MAP`."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from tasks_backend.errors import PROBLEM_TYPE_BASE, RateLimited, ServiceUnavailable, TasksBackendError, mapping_for

log = logging.getLogger(__name__)
PROBLEM_JSON = "application/problem+json"
#: Slug, title and detail of the answer to anything unexpected: nothing about it reaches the caller.
INTERNAL = ("internal", "Internal error", "An unexpected error occurred.")


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
    row = mapping_for(exc)
    body = problem_body(row.http_status, row.slug, row.title, exc.detail, exc.extra)
    headers: list[tuple[str, str]] = []
    if row.http_status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="tasks-backend"'))
    if isinstance(exc, ServiceUnavailable):
        headers.append(("Retry-After", str(exc.retry_after_s)))
    if isinstance(exc, RateLimited):
        headers.extend(exc.headers)
    return row.http_status, body, headers


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

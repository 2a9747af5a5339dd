"""A WSGI fast path for the most frequent call, `GET /v1/jobs/<id>`.

A polling client asks this every `pollIntervalMs`, so it is answered here without Flask's request
context, routing and hooks. Only the success is answered here: anything else (a bad token, a missing
job, Redis down, any other path) goes to the Flask app, so every error still comes from the one error
mapping. The body and headers are built by the same function the Flask route uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tasks_backend.auth import Authenticator
from tasks_backend.errors import TasksBackendError
from tasks_backend.service import JobService

from .http_jobs import handle_body

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_PREFIX = "/v1/jobs/"


class FastPoll:
    def __init__(self, app: WSGIApp, service: JobService, authenticator: Authenticator) -> None:
        self.app, self.service, self.authenticator = app, service, authenticator

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not path.startswith(_PREFIX) or "/" in path[len(_PREFIX):]:
            return self.app(environ, start_response)
        try:
            principal = self.authenticator.authenticate(environ.get("HTTP_AUTHORIZATION"))
            record = self.service.get(principal, path[len(_PREFIX):])
        except TasksBackendError:
            return self.app(environ, start_response)  # the Flask route answers it, with the usual problem
        payload, headers = handle_body(record)
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                                  *headers])
        return [payload]

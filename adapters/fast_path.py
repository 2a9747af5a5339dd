"""A WSGI fast path for the hottest calls: poll (`GET /v1/jobs/<id>`), submit (`POST /v1/jobs`) and the
MCP calls a task client makes most (`tools/call`, `tasks/get`).

They are answered here without Flask's request context, routing and hooks, by the same functions the
Flask routes call, and every error through the same mapping (`problems.error_parts`). Anything else,
and any request this layer is unsure of (no Content-Length, a body over the limit), goes to Flask
before anything has been done, with its body intact.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from werkzeug.datastructures import EnvironHeaders

from tasks_backend.auth import Authenticator, Principal
from tasks_backend.errors import RateLimited
from tasks_backend.runtime import Runtime

from . import mcp
from .http_jobs import handle_body, submit_body
from .limits_http import ADMITTED, jsonrpc_refusal
from .mcp_tools import Stream
from .problems import PROBLEM_JSON, error_parts

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
StartResponse = Callable[..., Any]
log = logging.getLogger(__name__)

_JOB_PREFIX = "/v1/jobs/"
#: The MCP methods answered here; they never answer with a stream.
MCP_METHODS = frozenset({"tools/call", "tasks/get"})


def _respond(start_response: StartResponse, status: int, payload: bytes, headers: list[tuple[str, str]],
             content_type: str = "application/json") -> list[bytes]:
    start_response(f"{status} {HTTPStatus(status).phrase}",
                   [("Content-Type", content_type), ("Content-Length", str(len(payload))), *headers])
    return [payload]


class FastPath:
    def __init__(self, app: WSGIApp, runtime: Runtime, authenticator: Authenticator) -> None:
        self.app, self.runtime, self.authenticator = app, runtime, authenticator
        self.gate = runtime.gate(authenticator)
        self.service = runtime.service
        self.max_body = runtime.settings.max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO", "")
        if method == "GET" and path.startswith(_JOB_PREFIX) and "/" not in path[len(_JOB_PREFIX):]:
            return self._guarded(start_response, lambda: self._poll(environ, start_response, path))
        if method == "POST" and path in ("/v1/jobs", "/mcp"):
            raw = self._body(environ)
            if raw is not None:
                handler = self._submit if path == "/v1/jobs" else self._mcp
                return self._guarded(start_response, lambda: handler(environ, start_response, raw))
        return self.app(environ, start_response)

    def _guarded(self, start_response: StartResponse, answer: Callable[[], Iterable[bytes]]) -> Iterable[bytes]:
        try:
            return answer()
        except Exception as exc:
            status, body, headers = error_parts(exc)
            return _respond(start_response, status, json.dumps(body).encode(), headers, PROBLEM_JSON)

    def _body(self, environ: dict[str, Any]) -> bytes | None:
        """The whole body when its length is known and allowed (put back for Flask); None leaves it to Flask."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        if not 0 < length <= self.max_body:
            return None
        raw: bytes = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(raw)
        return raw

    def _principal(self, environ: dict[str, Any]) -> Principal:
        """Authentication and the per-request limits: one call per request (as in the Flask app)."""
        return self.gate.authenticate(environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR"))

    def _poll(self, environ: dict[str, Any], start_response: StartResponse, path: str) -> Iterable[bytes]:
        principal = self._principal(environ)
        payload, headers = handle_body(self.service.get(principal, path[len(_JOB_PREFIX):]))
        return _respond(start_response, 200, payload, headers)

    def _submit(self, environ: dict[str, Any], start_response: StartResponse, raw: bytes) -> Iterable[bytes]:
        principal = self._principal(environ)
        payload, headers = submit_body(self.service, principal, raw, environ.get("HTTP_IDEMPOTENCY_KEY"))
        return _respond(start_response, 202, payload, headers)

    def _mcp(self, environ: dict[str, Any], start_response: StartResponse, raw: bytes) -> Iterable[bytes]:
        try:
            principal = self._principal(environ)
        except RateLimited as exc:
            status, payload, headers = jsonrpc_refusal(exc, "/mcp") or (429, b"", [])
            return _respond(start_response, status, payload, headers)
        answer = mcp.handle_post(raw, EnvironHeaders(environ), principal, self.runtime, only=MCP_METHODS)
        if answer is None:  # not one of ours, and nothing was done yet but admitting the caller (counted once)
            environ[ADMITTED] = principal
            return self.app(environ, start_response)
        if isinstance(answer, Stream):
            raise TypeError(f"{sorted(MCP_METHODS)} never answer with a stream")
        return _respond(start_response, answer.status, answer.payload(), list(answer.headers.items()))

"""Fast answers for the hottest calls: poll (`GET /v1/jobs/<id>`), submit (`POST /v1/jobs`), the MCP
calls a task client makes most (`tools/call`, `tasks/get`) and their A2A counterparts (`SendMessage` that
returns at once, `GetTask`).

They are answered without Flask's request context, routing and hooks, by the same functions the Flask
routes call. This is routing only: the entrance (`adapters.entrance`) has already authenticated the
caller, checked the Origin, the limits and the body's size, and maps any error raised here. A request
this layer does not answer (None) goes on to Flask with its body intact.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import EnvironHeaders

from tasks_backend.access.auth import Principal
from tasks_backend.service.runtime import Runtime

from .a2a import endpoint as a2a
from .http.jobs import submit_body, view_body
from .mcp import endpoint as mcp
from .mcp.shared import Stream

_JOB_PREFIX = "/v1/jobs/"
#: The MCP methods answered here; they never answer with a stream.
MCP_METHODS = frozenset({"tools/call", "tasks/get"})
#: (method, path or path prefix) of the requests this layer may answer, for tests and documentation.
ROUTES = (("GET", "/v1/jobs/<job_id>"), ("POST", "/v1/jobs"), ("POST", "/mcp"), ("POST", a2a.RPC_PATH))


def a2a_hot(message: Any) -> bool:
    """The A2A calls answered here: GetTask, and a SendMessage that returns at once (a blocking one waits
    for the job, which is the Flask route's to do)."""
    if not isinstance(message, dict):
        return False
    method = message.get("method")
    if method == "GetTask":
        return True
    params = message.get("params")
    configuration = params.get("configuration") if isinstance(params, dict) else None
    return (method == "SendMessage" and isinstance(configuration, dict)
            and configuration.get("returnImmediately") is True)


@dataclass
class FastAnswer:
    status: int
    payload: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


class FastRoutes:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime, self.service = runtime, runtime.service
        self.max_body = runtime.settings.max_body_bytes

    def answer(self, environ: dict[str, Any], principal: Principal | None) -> FastAnswer | None:
        """The answer to a hot call, or None to leave the request to Flask (nothing done yet)."""
        if principal is None:
            return None
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO", "")
        if method == "GET" and path.startswith(_JOB_PREFIX) and "/" not in path[len(_JOB_PREFIX):]:
            payload, headers = view_body(self.service.read(principal, path[len(_JOB_PREFIX):]))
            return FastAnswer(200, payload, headers)
        if method != "POST" or path not in ("/v1/jobs", "/mcp", a2a.RPC_PATH):
            return None
        raw = self._body(environ)
        if raw is None:
            return None
        if path == "/v1/jobs":
            payload, headers = submit_body(self.service, principal, raw, environ.get("HTTP_IDEMPOTENCY_KEY"))
            return FastAnswer(202, payload, headers)
        if path == a2a.RPC_PATH:
            return self._a2a(environ, raw, principal)
        answer = mcp.handle_post(raw, EnvironHeaders(environ), principal, self.runtime, only=MCP_METHODS)
        if answer is None:
            return None  # not one of ours, and nothing was done yet
        if isinstance(answer, Stream):
            raise TypeError(f"{sorted(MCP_METHODS)} never answer with a stream")
        return FastAnswer(answer.status, answer.payload(), list(answer.headers.items()))

    def _a2a(self, environ: dict[str, Any], raw: bytes, principal: Principal) -> FastAnswer | None:
        if "A2A-Version" in environ.get("QUERY_STRING", ""):
            return None  # the version in the query string: Flask reads it
        version = environ.get("HTTP_A2A_VERSION") or ""
        body = a2a.handle_post(raw, version, principal, self.runtime, only=a2a_hot)
        if body is None:
            return None
        if not isinstance(body, dict):
            raise TypeError("GetTask and an immediate SendMessage never answer with a stream")
        return FastAnswer(200, a2a.payload(body))

    def _body(self, environ: dict[str, Any]) -> bytes | None:
        """The whole body when its length is known (put back for Flask); None leaves it to Flask."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        if not 0 < length <= self.max_body:
            return None
        raw: bytes = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(raw)
        return raw

"""MCP over Streamable HTTP at `/mcp`: one endpoint serving both protocol revisions. Translation only.

Each request picks its revision by what it carries:

- `_meta["io.modelcontextprotocol/protocolVersion"]` (2026-07-28, stateless, tasks extension): `revision_2026`;
- `initialize` naming a handshake version, or `Mcp-Session-Id` after it (2025-11-25): `revision_2025`.

HTTP status of JSON-RPC errors: 2026-07-28 uses 400 (404 for an unknown method), as its transport
says; 2025-11-25 clients treat any 4xx as a transport failure (and 404 as a lost session), so their
errors travel with 200. Errors in the envelope itself (not JSON, not JSON-RPC) are 400 for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from flask import Blueprint, Response, current_app, g, request

from tasks_backend.access.auth import Principal
from tasks_backend.errors import (
    RateLimited,
    ServiceUnavailable,
    TasksBackendError,
)
from tasks_backend.model.wire import wire_json
from tasks_backend.service.runtime import Runtime

from .. import jsonrpc, problems
from ..protocol import Adapter
from . import revision_2025 as mcp_2025
from . import revision_2026 as mcp_2026
from .shared import (
    CLIENT_CAPABILITIES_META,
    CODES,
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    MODERN_VERSION,
    PROTOCOL_VERSION_META,
    SERVER_INFO,
    SERVER_INFO_META,
    SUPPORTED_VERSIONS,
    UNSUPPORTED_VERSION,
    McpRequest,
    Reply,
    Stream,
    sse_response,
)

bp = Blueprint("mcp", __name__)
ADAPTER = Adapter("mcp", bp, rpc_paths=frozenset({"/mcp"}), codes=CODES)

MODERN, LEGACY = "2026-07-28", "2025-11-25"
#: Methods whose `Mcp-Name` header must repeat a param, and which param.
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri", "tasks/get": "taskId",
               "tasks/update": "taskId", "tasks/cancel": "taskId", "tasks/result": "taskId"}


def _runtime() -> Runtime:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime


class HeaderLookup(Protocol):
    """Request headers, looked up without regard to case (Flask's, or werkzeug's over a WSGI environ)."""

    def get(self, key: str) -> str | None: ...

    def __contains__(self, key: str, /) -> bool: ...


@dataclass
class Answer:
    """One HTTP answer to a POST: a JSON body (or none) with its status and extra headers."""

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        return b"" if self.body is None else wire_json(self.body)


@bp.post("/mcp")
def post() -> Response:
    answer = handle_post(request.get_data(cache=False), request.headers, g.principal, _runtime())
    assert answer is not None
    if isinstance(answer, Stream):
        return sse_response(answer)
    if answer.body is None:  # 202 to a notification or a response: no body, so no Content-Type either
        response = Response(status=answer.status, headers=answer.headers)
        del response.headers["Content-Type"]
        return response
    return Response(answer.payload(), status=answer.status, mimetype="application/json", headers=answer.headers)


def handle_post(raw: bytes, headers: HeaderLookup, principal: Principal, runtime: Runtime,
                only: frozenset[str] | None = None) -> Answer | Stream | None:
    """Answer one POSTed JSON-RPC message; Flask-free, so the WSGI fast path serves the hot methods with it.

    With `only`, a message whose method is not in it is left alone (None): nothing has been done yet."""
    try:
        message = jsonrpc.decode(raw)
    except jsonrpc.RpcError as exc:
        return None if only is not None else _error(exc.request_id, exc, None)
    is_dict = isinstance(message, dict)
    if is_dict and "method" not in message and ("result" in message or "error" in message):
        return None if only is not None else _client_response(message, principal, runtime)
    if only is not None and (not is_dict or message.get("method") not in only):
        return None
    request_id: jsonrpc.Id = None
    revision: str | None = None
    try:
        rpc = jsonrpc.request_from(message)
        request_id = rpc.id
        if rpc.is_notification:
            return Answer(202)  # notifications/initialized, notifications/cancelled: nothing to do
        revision = _revision(rpc, headers)
        _check_headers(rpc, headers)
        session = headers.get("Mcp-Session-Id")
        reply = _dispatch(McpRequest(rpc, principal, runtime, {"Mcp-Session-Id": session} if session else {}), revision)
    except Exception as exc:
        return _error(request_id, exc, revision)
    if isinstance(reply, Stream):
        return reply
    if revision == MODERN:
        reply.setdefault("_meta", {})[SERVER_INFO_META] = SERVER_INFO
    answer = Answer(200, jsonrpc.success(request_id, reply))
    if revision == LEGACY and rpc.method == "initialize":
        answer.headers["Mcp-Session-Id"] = mcp_2025.new_session_id(rpc.params)
    return answer


@bp.get("/mcp")
def get() -> Response:
    """Only resumes a `tasks/result` stream; there is no standalone server-to-client stream."""
    last_event_id = request.headers.get("Last-Event-ID")
    if last_event_id:
        stream = mcp_2025.resume(_runtime().streaming(), g.principal, last_event_id)
        if stream is not None:  # one of the principal's open streams until it ends or the client goes away
            return sse_response(Stream(_runtime().limits().hold(g.principal, stream.events)))
    response = problems.problem(405, "method-not-allowed", "Method Not Allowed",
                                "POST JSON-RPC requests to /mcp; GET only resumes a stream by Last-Event-ID.")
    response.headers["Allow"] = "GET, POST"
    return response


def _dispatch(call: McpRequest, revision: str) -> Reply:
    if revision == MODERN and call.rpc.method == "initialize":
        raise _unsupported(call.params.get("protocolVersion"))
    table = mcp_2026.METHODS if revision == MODERN else mcp_2025.METHODS
    handler = table.get(call.rpc.method)
    if handler is None:
        raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {call.rpc.method}")
    return handler(call)


def _revision(rpc: jsonrpc.Request, headers: HeaderLookup) -> str:
    """Which revision a request speaks, or the error that says why it speaks none we serve."""
    header = headers.get("MCP-Protocol-Version")
    # The transport says an unsupported version header is a 400. The older dated revisions negotiate
    # down to 2025-11-25 (clients, the conformance suite among them, keep sending the one they know).
    if header is not None and header not in SUPPORTED_VERSIONS and header not in HANDSHAKE_VERSIONS:
        raise _unsupported(header)
    meta = rpc.params.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "`_meta` must be an object.", http_status=400)
    meta_version = (meta or {}).get(PROTOCOL_VERSION_META)
    if meta_version is not None:
        if header is not None and header != meta_version:
            raise jsonrpc.RpcError(HEADER_MISMATCH, "MCP-Protocol-Version does not match `_meta`.",
                                   http_status=400)
        if meta_version != MODERN_VERSION:
            raise _unsupported(meta_version)
        if not isinstance((meta or {}).get(CLIENT_CAPABILITIES_META), dict):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS,
                                   f"`_meta[{CLIENT_CAPABILITIES_META!r}]` is required.", http_status=400)
        return MODERN
    if rpc.method == "initialize":
        requested = rpc.params.get("protocolVersion")
        # A handshake version (they are all dates before 2026) gets 2025-11-25, as that negotiation allows.
        if isinstance(requested, str) and requested < "2026":
            return LEGACY
        raise _unsupported(requested)
    if header == MODERN_VERSION or (header is None and "Mcp-Session-Id" not in headers):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS,
                               f"`_meta[{PROTOCOL_VERSION_META!r}]` is required (or `initialize` first).",
                               http_status=400)
    if header is not None and header >= "2026":
        raise _unsupported(header)
    session = headers.get("Mcp-Session-Id") or ""
    if not session or len(session) > 128 or not all("\x21" <= ch <= "\x7e" for ch in session):
        raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST,
                               "A valid Mcp-Session-Id is required: call initialize.", http_status=400)
    return LEGACY


def _unsupported(requested: Any) -> jsonrpc.RpcError:
    return jsonrpc.RpcError(UNSUPPORTED_VERSION, "Unsupported protocol version",
                            {"supported": SUPPORTED_VERSIONS, "requested": requested}, http_status=400)


def _check_headers(rpc: jsonrpc.Request, headers: HeaderLookup) -> None:
    """`Mcp-Method` and `Mcp-Name` are optional, but when sent they must agree with the body."""
    method = headers.get("Mcp-Method")
    if method is not None and method != rpc.method:
        raise jsonrpc.RpcError(HEADER_MISMATCH, "Mcp-Method does not match the method.", http_status=400)
    name = headers.get("Mcp-Name")
    param = NAME_PARAMS.get(rpc.method)
    if name is not None and param is not None and name != rpc.params.get(param):
        raise jsonrpc.RpcError(HEADER_MISMATCH, f"Mcp-Name does not match `{param}`.", http_status=400)


def _client_response(message: dict[str, Any], principal: Principal, runtime: Runtime) -> Answer:
    """A JSON-RPC response from the client: the answer to an `elicitation/create` we sent."""
    try:
        mcp_2025.accept_answer(runtime.service, principal, message)
    except TasksBackendError as exc:
        return Answer(400, jsonrpc.error_for(None, exc, CODES))
    return Answer(202)


def _error(request_id: jsonrpc.Id, exc: Exception, revision: str | None) -> Answer:
    body = jsonrpc.error_for(request_id, exc, CODES)
    answer = Answer(_error_status(body["error"]["code"], exc, revision), body)
    if isinstance(exc, ServiceUnavailable):
        answer.headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, RateLimited):  # a limit: 429 with its retry hint, in every revision but the legacy one
        answer.headers.update(exc.headers)
        answer.status = answer.status if revision == LEGACY else 429
    return answer


def _error_status(code: int, exc: BaseException, revision: str | None) -> int:
    if revision is None:
        return exc.http_status if isinstance(exc, jsonrpc.RpcError) and exc.http_status >= 400 else 400
    if revision == LEGACY:
        return 200
    if isinstance(exc, ServiceUnavailable):
        return 503
    if code == jsonrpc.METHOD_NOT_FOUND:
        return 404
    return 500 if code == jsonrpc.INTERNAL_ERROR else 400

"""JSON-RPC 2.0 envelopes, shared by the MCP and A2A adapters.

The service's errors get the codes of the calling protocol's table (`CODES` here holds what every
JSON-RPC protocol of ours shares; the MCP and A2A adapters each add their own rows to it). Unknown
exceptions become -32603 with a fixed message and are logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks_backend import errors
from tasks_backend.errors import TasksBackendError, most_specific

from . import body

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

Id = str | int | None
Codes = Mapping[type[TasksBackendError], int]

#: The rows every JSON-RPC protocol here shares; a protocol's table adds its own to these.
CODES: Codes = {
    TasksBackendError: INTERNAL_ERROR,
    # A service-level BadRequest is about a call's arguments (cursor, key, filter); a malformed
    # envelope is answered by this layer itself with -32600.
    errors.BadRequest: INVALID_PARAMS,
    errors.IdempotencyConflict: INVALID_PARAMS,
    errors.Unauthenticated: -32001,
    # The request as a whole is refused, before any method is looked at.
    errors.OriginNotAllowed: INVALID_REQUEST,
    # JSON-RPC has no rate-limit code: -32000 is the first implementation-defined server error.
    errors.RateLimited: -32000,
    errors.ServiceUnavailable: INTERNAL_ERROR,
}


@dataclass
class Request:
    method: str
    id: Id
    params: dict[str, Any] = field(default_factory=dict)
    is_notification: bool = False


class RpcError(Exception):
    """An error to answer with as is (protocol-level errors the adapters raise themselves)."""

    def __init__(self, code: int, message: str, data: Any = None, http_status: int = 200,
                 request_id: Id = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data, self.http_status = code, message, data, http_status
        #: The id of the request, when it could be read although the request was refused as a whole.
        self.request_id = request_id


def parse(raw: bytes) -> Request:
    """Parse one request object; raises `RpcError` for -32700 / -32600 (batches are not supported)."""
    return request_from(decode(raw))


def decode(raw: bytes) -> Any:
    """The JSON in a body, or -32700 (not JSON, too deep) or -32602 (text no encoder can write)."""
    try:
        return body.loads(raw)
    except body.LoneSurrogate as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}", http_status=400,
                       request_id=_id_of(exc.value)) from exc
    except body.Unreadable as exc:
        raise RpcError(PARSE_ERROR, "Parse error", str(exc), http_status=400) from exc


def _id_of(message: Any) -> Id:
    """A readable request id, or None: the id an error about the rest of the message is answered with."""
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int) or (
            isinstance(request_id, str) and body.has_lone_surrogate(request_id)):
        return None
    return request_id


def readable_id(body: Any) -> Id:
    """The request's id if it can be read, for answering a request that is otherwise invalid."""
    request_id = body.get("id") if isinstance(body, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def request_from(body: Any) -> Request:
    """One request object from decoded JSON, or -32600 / -32602."""
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC request object", http_status=400)
    has_id = "id" in body
    request_id = body.get("id")
    if body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str) or (
        has_id and (isinstance(request_id, bool) or not isinstance(request_id, str | int | None))
    ):
        raise RpcError(INVALID_REQUEST, "Invalid Request", http_status=400)
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: expected an object", http_status=400)
    return Request(method=body["method"], id=request_id, params=params, is_notification=not has_id)


def success(request_id: Id, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: Id, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def error_for(request_id: Id, exc: BaseException, codes: Codes) -> dict[str, Any]:
    """The JSON-RPC error for any exception, by the calling protocol's code table."""
    if isinstance(exc, RpcError):
        return error(request_id, exc.code, exc.message, exc.data)
    if not isinstance(exc, TasksBackendError):
        log.exception("unhandled error in a JSON-RPC call", exc_info=exc)
        return error(request_id, INTERNAL_ERROR, "Internal error")
    code = most_specific(codes, exc)
    data = dict(exc.extra) if exc.extra else None
    return error(request_id, INTERNAL_ERROR if code is None else code, exc.detail, data)

"""A2A's JSON-RPC error codes and the error reply that carries the `ErrorInfo` A2A clients read.

Rule: the one table from the service's errors to A2A codes; shared by the transport and the methods.
"""

from __future__ import annotations

import json
from typing import Any

from tasks_backend.errors import Conflict, JobNotFound, NotWaitingForInput

from .. import jsonrpc

TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENDED_CARD_NOT_CONFIGURED = -32007
VERSION_NOT_SUPPORTED = -32009

#: `ErrorInfo.reason` per code, which the SDK clients read next to the code ([spec] §5.4).
_REASONS = {
    -32001: "TASK_NOT_FOUND", -32002: "TASK_NOT_CANCELABLE", -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION", -32005: "CONTENT_TYPE_NOT_SUPPORTED", -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED", -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
}
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
#: A2A's error codes ([spec] §5.4): a job the caller cannot see is TaskNotFound (also another owner's),
#: a terminal one TaskNotCancelable, input to a job that asks for none UnsupportedOperation.
CODES: jsonrpc.Codes = {**jsonrpc.CODES, JobNotFound: TASK_NOT_FOUND, Conflict: TASK_NOT_CANCELABLE,
                        NotWaitingForInput: UNSUPPORTED_OPERATION}


def a2a_error(request_id: jsonrpc.Id, exc: BaseException) -> dict[str, Any]:
    """The JSON-RPC error by A2A's code table, with the `ErrorInfo` detail A2A clients read."""
    body = jsonrpc.error_for(request_id, exc, CODES)
    err = body["error"]
    reason = _REASONS.get(err["code"])
    if reason is not None:
        extra = err.get("data") if isinstance(err.get("data"), dict) else {}
        metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()}
        err["data"] = [{"@type": _ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org",
                        "metadata": metadata}]
    return body

"""MCP 2025-11-25 tasks (the shape most deployed clients speak). Translation only.

`initialize` opens a session; tools declare `execution.taskSupport: "required"`; `tools/call` with
`params.task` answers `{"task": …}`; `tasks/result` waits on an SSE stream, asking for input on it with
`elicitation/create` (in URL mode, pointing at `/ui/jobs/<id>`, for a client that declares it). A stream lasts
at most `sse_max_s`; its event ids carry what resuming needs (`GET` + `Last-Event-ID`).
Rule: nothing is kept between requests, so any web process serves any request: the session id only marks the
handshake (and URL-mode support), jobs belong to the bearer's principal, and an `elicitation/create` request id
names its task and input key, so the client's answer goes straight to `provide_input`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tasks_backend.access.auth import Principal
from tasks_backend.errors import InvalidParams, JobNotFound, NotWaitingForInput, TasksBackendError
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.model.wire import handle
from tasks_backend.service.jobs import JobService
from tasks_backend.service.questions import JobView
from tasks_backend.service.runtime import STREAM_BLOCK_MS

from .. import jsonrpc
from . import shared
from .shared import (
    CODES,
    INSTRUCTIONS,
    LEGACY_VERSION,
    RELATED_TASK_META,
    SERVER_INFO,
    McpRequest,
    Reply,
    Stream,
    elicitation_id,
)

#: Prefix of the ids of the `elicitation/create` requests we send: `<prefix><task id>/<input key>`.
INPUT_REQUEST_PREFIX = "tasks-backend/input/"
#: The same for URL-mode requests, whose answer is only the person's consent to open the page.
URL_REQUEST_PREFIX = "tasks-backend/url/"
#: Ends the session id of a client that declared URL-mode elicitation (the id stays opaque to it).
URL_SESSION_MARK = ".url"
#: Prefix of `tasks/result` stream event ids (a versioned, base64url JSON cursor follows).
CURSOR_PREFIX = "tbr1."
#: How long the client waits before it resumes a `tasks/result` stream we ended.
RESUME_RETRY_MS = 500


def new_session_id(initialize_params: dict[str, Any] | None = None) -> str:
    """A session id; it remembers whether the client declared URL-mode elicitation (nothing is stored)."""
    return secrets.token_hex(16) + (URL_SESSION_MARK if declares_url_mode(initialize_params or {}) else "")


def declares_url_mode(initialize_params: dict[str, Any]) -> bool:
    """`capabilities.elicitation.url` in `initialize` (2025-11-25 elicitation, Capabilities)."""
    return shared.declares_url_elicitation(initialize_params.get("capabilities"))


def url_mode(session_id: str | None) -> bool:
    return bool(session_id) and str(session_id).endswith(URL_SESSION_MARK)


def task(record: JobRecord, *, whole: bool = True) -> dict[str, Any]:
    """The 2025-11-25 Task: the shared handle with `ttlMs`/`pollIntervalMs` named `ttl`/`pollInterval` (not
    `whole`: read by one its questions were addressed to, who does not own it, so without its error)."""
    out = shared.parent_in_meta(handle(record))
    out["ttl"] = out.pop("ttlMs")
    out["pollInterval"] = out.pop("pollIntervalMs")
    if record.state is JobState.FAILED and "statusMessage" not in out:
        out["statusMessage"] = shared.error_message(record) if whole else shared.WITHHELD[record.state]
    return out


def related(task_id: str) -> dict[str, Any]:
    return {RELATED_TASK_META: {"taskId": task_id}}


def final_result(view: JobView) -> dict[str, Any]:
    """What `tasks/result` answers: the call's own result (failed and cancelled jobs carry `isError`); to one the
    job's questions were addressed to, who does not own it, only how it ended."""
    return shared.tool_result(view) | {"_meta": related(view.record.id)}


def initialize(call: McpRequest) -> Reply:
    return {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"tools": {"listChanged": False},
                         "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }


def ping(call: McpRequest) -> Reply:
    return {}


def list_tools(call: McpRequest) -> Reply:
    return {"tools": shared.tools(call.runtime, legacy=True)}


def call_tool(call: McpRequest) -> Reply:
    name = shared.string_param(call.params, "name")
    call.runtime.registry.get(name)
    requested = call.params.get("task")
    if requested is None:
        # The revision's rule for a tool whose taskSupport is "required" called without `params.task`.
        raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Tool {name!r} runs only as a task (params.task).")
    if not isinstance(requested, dict):
        raise InvalidParams("`task` must be an object.")
    ttl = requested.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0):
        raise InvalidParams("`task.ttl` must be a positive number of milliseconds.")
    record, _ = shared.submit_call(call, ttl_s=ttl / 1000 if ttl else None)
    return {"task": task(record)}


def get_task(call: McpRequest) -> Reply:
    view = call.service.read(call.principal, shared.string_param(call.params, "taskId"))
    return task(view.record, whole=not view.limited)


def list_tasks(call: McpRequest) -> Reply:
    cursor = call.params.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidParams("`cursor` must be a string.")
    records, next_cursor = call.service.list(call.principal, cursor=cursor or None)
    out: dict[str, Any] = {"tasks": [task(r) for r in records]}
    if next_cursor:
        out["nextCursor"] = next_cursor
    return out


def cancel_task(call: McpRequest) -> Reply:
    """Cancel and return the Task, now cancelled (a running job's worker is fenced out at once)."""
    return task(call.service.cancel(call.principal, shared.string_param(call.params, "taskId")))


def task_result(call: McpRequest) -> Reply:
    task_id = shared.string_param(call.params, "taskId")
    view = call.service.read(call.principal, task_id)
    if view.record.terminal:
        return final_result(view)
    asking = Asking(task_id, call.rpc.id, set(), set() if url_mode(call.headers.get("Mcp-Session-Id")) else None)
    # One of the principal's open streams until it ends or the client goes away.
    return Stream(call.runtime.limits().hold(
        call.principal, _result_events(call.runtime.streaming(), call.principal, asking)))


def resume(service: JobService, principal: Principal, last_event_id: str) -> Stream | None:
    """Resume a `tasks/result` stream from the id of its last event (None: not one of ours)."""
    asking = _decode_cursor(last_event_id)
    if asking is None:
        return None
    return Stream(_result_events(service, principal, asking))


@dataclass
class Asking:
    """Where a `tasks/result` stream stands: what it asked, and (URL mode only) which of those the person
    has answered on the page since. Carried in each event id, so any process can resume the stream."""

    task_id: str
    request_id: jsonrpc.Id
    asked: set[str]
    #: None in form mode; in URL mode, the asked keys whose completion was announced.
    completed: set[str] | None

    def cursor(self) -> str:
        return _encode_cursor(self)


def _result_events(service: JobService, principal: Principal, asking: Asking) -> Iterator[str]:
    task_id, request_id, asked = asking.task_id, asking.request_id, asking.asked
    cursor = asking.cursor

    yield shared.sse_event(None, cursor(), retry_ms=RESUME_RETRY_MS)  # from here on the client can resume
    try:
        for _, view in service.watch_view(principal, task_id, max_s=service.settings.sse_max_s,
                                          block_ms=STREAM_BLOCK_MS):
            record = view.record  # an addressee's holds only its own questions
            page = shared.question_page(service.settings, view) if asking.completed is not None else None
            open_keys = (record.input_requests or {}) if record.state is JobState.INPUT_REQUIRED else {}
            if asking.completed is not None:
                for key in sorted(asked - asking.completed - set(open_keys)):
                    asking.completed.add(key)  # answered on the page (or no longer asked)
                    yield shared.sse_event(_completion(task_id, key), cursor())
            for key, request in open_keys.items():
                if key not in asked:
                    asked.add(key)
                    yield shared.sse_event(_input_request(task_id, key, request, page), cursor())
            if record.terminal:
                yield shared.sse_event(jsonrpc.success(request_id, final_result(view)))
                return
    except TasksBackendError as exc:  # expired meanwhile, or Redis went away
        yield shared.sse_event(jsonrpc.error_for(request_id, exc, CODES))
        return
    # Still running at the bound: end this stream; the client comes back with the last event id.
    yield shared.sse_event(None, cursor(), retry_ms=RESUME_RETRY_MS)


def _input_request(task_id: str, key: str, request: dict[str, Any], page: str | None) -> dict[str, Any]:
    prefix = INPUT_REQUEST_PREFIX
    if page is not None:
        asked = shared.url_elicitation(task_id, key, request, page)
        prefix = URL_REQUEST_PREFIX if asked is not request else prefix
        request = asked
    params = dict(request.get("params") or {})
    params["_meta"] = related(task_id)
    return {"jsonrpc": "2.0", "id": f"{prefix}{task_id}/{key}",
            "method": request.get("method", "elicitation/create"), "params": params}


def _completion(task_id: str, key: str) -> dict[str, Any]:
    """2025-11-25 elicitation, Completion Notifications for URL Mode Elicitation."""
    return {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
            "params": {"elicitationId": elicitation_id(task_id, key)}}


def accept_answer(service: JobService, principal: Principal, message: dict[str, Any]) -> None:
    """A client's JSON-RPC response to one of our `elicitation/create` requests: record the answer.

    Answers for tasks that are gone, not the caller's, or no longer waiting are ignored (the same rule
    as `tasks/update`); an answer that does not fit the requested schema raises `InvalidParams`.
    """
    response_id = message.get("id")
    if not isinstance(response_id, str):
        return
    result = message.get("result")
    if response_id.startswith(URL_REQUEST_PREFIX):
        # URL mode: declining to open the page declines the question, as in form mode (SDKs declare URL
        # mode for any elicitation handler, so a form-shaped answer is taken too: `consent_only`).
        if not isinstance(result, dict) or shared.consent_only(result):
            return
        response_id = INPUT_REQUEST_PREFIX + response_id.removeprefix(URL_REQUEST_PREFIX)
    if not response_id.startswith(INPUT_REQUEST_PREFIX):
        return
    task_id, sep, key = response_id.removeprefix(INPUT_REQUEST_PREFIX).partition("/")
    if not sep or not key or not isinstance(result, dict):
        return  # an error answer (the client cannot elicit): the job keeps waiting for input
    with contextlib.suppress(JobNotFound, NotWaitingForInput):
        service.provide_input(principal, task_id, {key: result})


def _encode_cursor(asking: Asking) -> str:
    data: dict[str, Any] = {"t": asking.task_id, "r": asking.request_id, "a": sorted(asking.asked)}
    if asking.completed is not None:
        data["c"] = sorted(asking.completed)
    raw = json.dumps(data, separators=(",", ":"))
    return CURSOR_PREFIX + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(value: str) -> Asking | None:
    if not value.startswith(CURSOR_PREFIX) or len(value) > 8192:
        return None
    body = value.removeprefix(CURSOR_PREFIX)
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    task_id, request_id, asked, completed = data.get("t"), data.get("r"), data.get("a"), data.get("c")
    if (not isinstance(task_id, str) or isinstance(request_id, bool) or not isinstance(request_id, str | int)
            or not _strings(asked) or (completed is not None and not _strings(completed))):
        return None
    return Asking(task_id, request_id, {str(k) for k in asked or ()},
                  None if completed is None else {str(k) for k in completed})


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(k, str) for k in value)


METHODS: dict[str, Callable[[McpRequest], Reply]] = {
    "initialize": initialize,
    "ping": ping,
    "tools/list": list_tools,
    "tools/call": call_tool,
    "tasks/get": get_task,
    "tasks/list": list_tasks,
    "tasks/cancel": cancel_task,
    "tasks/result": task_result,
}

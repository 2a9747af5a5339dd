"""MCP 2026-07-28, stateless, with the `io.modelcontextprotocol/tasks` extension. Translation only.

Every request names its version and capabilities in `_meta` (checked by the transport in `mcp.py`).
`tools/call` answers with the flat task handle when the caller declared the extension; the task is
then read with `tasks/get` (result, error or input requests inlined), answered with `tasks/update`,
stopped with `tasks/cancel`, and followed with `subscriptions/listen`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from tasks_backend.errors import InvalidParams, JobNotCancelable, JobNotFound, NotWaitingForInput, StoreUnavailable
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.model.wire import handle
from tasks_backend.service.follow import follow
from tasks_backend.service.questions import JobView
from tasks_backend.service.runtime import STREAM_BLOCK_MS

from .. import jsonrpc
from . import shared
from .shared import (
    CLIENT_CAPABILITIES_META,
    INSTRUCTIONS,
    MISSING_CAPABILITY,
    MODERN_VERSION,
    SUBSCRIPTION_META,
    SUPPORTED_VERSIONS,
    TASKS_EXTENSION,
    McpRequest,
    Reply,
    Stream,
)

log = logging.getLogger(__name__)

#: How long a client may cache `server/discover` and `tools/list`: both change only on deploy.
LIST_TTL_MS = 60_000
#: A listen stream follows at most this many tasks (all of them through one blocking read at a time).
MAX_LISTEN_TASKS = 32
ACK: dict[str, Any] = {"resultType": "complete"}


def declared_tasks(call: McpRequest) -> bool:
    capabilities = call.meta.get(CLIENT_CAPABILITIES_META)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def _require_tasks(call: McpRequest) -> None:
    if not declared_tasks(call):
        raise jsonrpc.RpcError(MISSING_CAPABILITY, "Missing required client capability",
                               {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def url_mode(call: McpRequest) -> bool:
    """Whether this request's client capabilities declare URL-mode elicitation."""
    return shared.declares_url_elicitation(call.meta.get(CLIENT_CAPABILITIES_META))


def detailed_task(view: JobView, page: str | None = None) -> dict[str, Any]:
    """The extension's DetailedTask: the handle plus what its status carries (to one the job's questions were
    addressed to, who does not own it: its questions, and how it ended without its result or error). With `page`
    (a client that declares URL-mode elicitation), its questions point at the job's web page instead of carrying
    forms."""
    record = view.record
    out = shared.parent_in_meta(handle(record))
    if record.state is JobState.COMPLETED:
        out["result"] = shared.tool_result(view) | {"resultType": "complete"}
    elif record.state is JobState.FAILED:
        # A job that raised is a failed task (not a completed one with isError): the tool never produced
        # a result, and HTTP and A2A report the same job as failed.
        message = shared.WITHHELD[record.state] if view.limited else shared.error_message(record)
        out.setdefault("statusMessage", message)
        out["error"] = {"code": jsonrpc.INTERNAL_ERROR, "message": message}
        if record.error and not view.limited:
            out["error"]["data"] = record.error
    elif record.state is JobState.INPUT_REQUIRED:
        requests = record.input_requests or {}
        out["inputRequests"] = requests if page is None else {
            key: shared.url_elicitation(record.id, key, request, page) for key, request in requests.items()}
    return out


def _with_meta(out: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    return out | {"_meta": {**out.get("_meta", {}), **meta}}


def _detailed(call: McpRequest, view: JobView) -> dict[str, Any]:
    return detailed_task(view, shared.question_page(call.service.settings, view) if url_mode(call) else None)


def discover(call: McpRequest) -> Reply:
    return {"resultType": "complete", "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": {"tools": {"listChanged": False}, "extensions": {TASKS_EXTENSION: {}}},
            "instructions": INSTRUCTIONS,
            "ttlMs": LIST_TTL_MS, "cacheScope": "private"}


def ping(call: McpRequest) -> Reply:
    return dict(ACK)


def list_tools(call: McpRequest) -> Reply:
    return {"resultType": "complete", "tools": shared.tools(call.runtime, legacy=False), "ttlMs": LIST_TTL_MS,
            "cacheScope": "private"}


def call_tool(call: McpRequest) -> Reply:
    # Validate the tool first, so an unknown tool reads the same with or without the extension.
    call.runtime.registry.get(shared.string_param(call.params, "name"))
    _require_tasks(call)
    record, _ = shared.submit_call(call)
    return {"resultType": "task", **shared.parent_in_meta(handle(record))}


def get_task(call: McpRequest) -> Reply:
    _require_tasks(call)
    view = call.service.read(call.principal, shared.string_param(call.params, "taskId"))
    return {"resultType": "complete", **_detailed(call, view)}


def update_task(call: McpRequest) -> Reply:
    _require_tasks(call)
    task_id = shared.string_param(call.params, "taskId")
    responses = call.params.get("inputResponses")
    if url_mode(call) and isinstance(responses, dict) and responses:
        # Consent to open the job's page is not an answer: the person gives it there.
        responses = {key: answer for key, answer in responses.items() if not shared.consent_only(answer)}
        if not responses:
            return dict(ACK)
    # Answers to a task no longer waiting are stale or repeated; the extension says to ignore them.
    with contextlib.suppress(NotWaitingForInput):
        call.service.provide_input(call.principal, task_id, responses)
    return dict(ACK)


def cancel_task(call: McpRequest) -> Reply:
    _require_tasks(call)
    # Cancel is an acknowledgement; a terminal task simply keeps the state it reached.
    with contextlib.suppress(JobNotCancelable):
        call.service.cancel(call.principal, shared.string_param(call.params, "taskId"))
    return dict(ACK)


def listen(call: McpRequest) -> Reply:
    """`subscriptions/listen`: `notifications/tasks` for each change of the named tasks, over SSE.

    Only tasks the caller may read are accepted, its own and those whose questions were addressed to it (others
    are left out of the acknowledgement, exactly like ids that do not exist). The stream ends, with a result,
    once every task is terminal or after `sse_max_s`, so a sync web worker is never held for long; the client
    listens again to go on.
    """
    _require_tasks(call)
    wanted = call.params.get("notifications")
    ids = wanted.get("taskIds") if isinstance(wanted, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_LISTEN_TASKS:
        raise InvalidParams(f"`notifications.taskIds` must list at most {MAX_LISTEN_TASKS} task ids.")
    records: list[JobRecord] = []
    for task_id in dict.fromkeys(ids):
        try:
            records.append(call.service.read(call.principal, task_id).record)
        except JobNotFound:
            continue
    meta = {SUBSCRIPTION_META: call.rpc.id}
    max_s = call.service.settings.sse_max_s

    def events() -> Iterator[str]:
        yield shared.sse_event({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                         "params": {"notifications": {"taskIds": [r.id for r in records]}, "_meta": meta}})
        try:
            # One read over every task's feed, in this stream's own greenlet: one Redis connection whatever
            # the number of tasks, and no reader outlives the stream (or the slot that counts it).
            for record in follow(call.runtime.streaming(), records, max_s=max_s, block_ms=STREAM_BLOCK_MS):
                view = call.service.questions.seen_by(call.principal, record)
                yield shared.sse_event({"jsonrpc": "2.0", "method": "notifications/tasks",
                                 "params": _with_meta(_detailed(call, view), meta)})
        except StoreUnavailable as exc:  # Redis failed: the client listens again
            log.info("listen ended early: %r", exc.__cause__)
        yield shared.sse_event(jsonrpc.success(call.rpc.id, {"resultType": "complete", "_meta": meta}))

    # One of the principal's open streams until it ends or the client goes away.
    return Stream(call.runtime.limits().hold(call.principal, events()))


METHODS: dict[str, Callable[[McpRequest], Reply]] = {
    "server/discover": discover,
    "ping": ping,
    "tools/list": list_tools,
    "tools/call": call_tool,
    "tasks/get": get_task,
    "tasks/update": update_task,
    "tasks/cancel": cancel_task,
    "subscriptions/listen": listen,
}

__all__ = ["METHODS", "MODERN_VERSION", "declared_tasks", "detailed_task"]

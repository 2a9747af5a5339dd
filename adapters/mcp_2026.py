"""MCP 2026-07-28, stateless, with the `io.modelcontextprotocol/tasks` extension. Translation only.

Every request names its version and capabilities in `_meta` (checked by the transport in `mcp.py`).
`tools/call` answers with the flat task handle when the caller declared the extension; the task is
then read with `tasks/get` (result, error or input requests inlined), answered with `tasks/update`,
stopped with `tasks/cancel`, and followed with `subscriptions/listen`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from tasks_backend.domain import JobRecord, JobState
from tasks_backend.errors import InvalidParams, JobNotCancelable, JobNotFound, NotWaitingForInput
from tasks_backend.runtime import STREAM_BLOCK_MS
from tasks_backend.views import handle

from . import jsonrpc
from .mcp_tools import (
    CLIENT_CAPABILITIES_META,
    INSTRUCTIONS,
    MISSING_CAPABILITY,
    MODERN_VERSION,
    SUBSCRIPTION_META,
    SUPPORTED_VERSIONS,
    TASKS_EXTENSION,
    Call,
    Reply,
    Stream,
    call_tool_result,
    consent_only,
    declares_url_elicitation,
    error_message,
    job_page,
    sse_event,
    string_param,
    submit_call,
    tools,
    url_elicitation,
)

log = logging.getLogger(__name__)

#: How long a client may cache `server/discover` and `tools/list`: both change only on deploy.
LIST_TTL_MS = 60_000
#: A listen stream follows at most this many tasks (each costs one blocking reader while it lasts).
MAX_LISTEN_TASKS = 32
ACK: dict[str, Any] = {"resultType": "complete"}


def declared_tasks(call: Call) -> bool:
    capabilities = call.meta.get(CLIENT_CAPABILITIES_META)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def _require_tasks(call: Call) -> None:
    if not declared_tasks(call):
        raise jsonrpc.RpcError(MISSING_CAPABILITY, "Missing required client capability",
                               {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def url_mode(call: Call) -> bool:
    """Whether this request's client capabilities declare URL-mode elicitation."""
    return declares_url_elicitation(call.meta.get(CLIENT_CAPABILITIES_META))


def detailed_task(record: JobRecord, page: str | None = None) -> dict[str, Any]:
    """The extension's DetailedTask: the handle plus what its status carries. With `page` (a client that
    declares URL-mode elicitation), its questions point at the job's web page instead of carrying forms."""
    out = handle(record)
    if record.state is JobState.COMPLETED:
        out["result"] = call_tool_result(record) | {"resultType": "complete"}
    elif record.state is JobState.FAILED:
        # A job that raised is a failed task (not a completed one with isError): the tool never produced
        # a result, and HTTP and A2A report the same job as failed.
        out.setdefault("statusMessage", error_message(record))
        out["error"] = {"code": jsonrpc.INTERNAL_ERROR, "message": error_message(record)}
        if record.error:
            out["error"]["data"] = record.error
    elif record.state is JobState.INPUT_REQUIRED:
        requests = record.input_requests or {}
        out["inputRequests"] = requests if page is None else {
            key: url_elicitation(record.id, key, request, page) for key, request in requests.items()}
    return out


def _detailed(call: Call, record: JobRecord) -> dict[str, Any]:
    return detailed_task(record, job_page(call.service.settings, record.id) if url_mode(call) else None)


def discover(call: Call) -> Reply:
    return {"resultType": "complete", "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": {"tools": {"listChanged": False}, "extensions": {TASKS_EXTENSION: {}}},
            "instructions": INSTRUCTIONS,
            "ttlMs": LIST_TTL_MS, "cacheScope": "private"}


def ping(call: Call) -> Reply:
    return dict(ACK)


def list_tools(call: Call) -> Reply:
    return {"resultType": "complete", "tools": tools(call.runtime, legacy=False), "ttlMs": LIST_TTL_MS,
            "cacheScope": "private"}


def call_tool(call: Call) -> Reply:
    # Validate the tool first, so an unknown tool reads the same with or without the extension.
    call.runtime.registry.get(string_param(call.params, "name"))
    _require_tasks(call)
    record, _ = submit_call(call)
    return {"resultType": "task", **handle(record)}


def get_task(call: Call) -> Reply:
    _require_tasks(call)
    record = call.service.get(call.principal, string_param(call.params, "taskId"))
    return {"resultType": "complete", **_detailed(call, record)}


def update_task(call: Call) -> Reply:
    _require_tasks(call)
    task_id = string_param(call.params, "taskId")
    responses = call.params.get("inputResponses")
    if url_mode(call) and isinstance(responses, dict) and responses:
        # Consent to open the job's page is not an answer: the person gives it there.
        responses = {key: answer for key, answer in responses.items() if not consent_only(answer)}
        if not responses:
            return dict(ACK)
    # Answers to a task no longer waiting are stale or repeated; the extension says to ignore them.
    with contextlib.suppress(NotWaitingForInput):
        call.service.provide_input(call.principal, task_id, responses)
    return dict(ACK)


def cancel_task(call: Call) -> Reply:
    _require_tasks(call)
    # Cancel is an acknowledgement; a terminal task simply keeps the state it reached.
    with contextlib.suppress(JobNotCancelable):
        call.service.cancel(call.principal, string_param(call.params, "taskId"))
    return dict(ACK)


def listen(call: Call) -> Reply:
    """`subscriptions/listen`: `notifications/tasks` for each change of the named tasks, over SSE.

    Only the caller's own tasks are accepted (others are left out of the acknowledgement, exactly like
    ids that do not exist). The stream ends, with a result, once every task is terminal or after
    `sse_max_s`, so a sync web worker is never held for long; the client listens again to go on.
    """
    _require_tasks(call)
    wanted = call.params.get("notifications")
    ids = wanted.get("taskIds") if isinstance(wanted, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_LISTEN_TASKS:
        raise InvalidParams(f"`notifications.taskIds` must list at most {MAX_LISTEN_TASKS} task ids.")
    accepted: list[str] = []
    for task_id in dict.fromkeys(ids):
        try:
            call.service.get(call.principal, task_id)
        except JobNotFound:
            continue
        accepted.append(task_id)
    meta = {SUBSCRIPTION_META: call.rpc.id}
    max_s = call.service.settings.sse_max_s

    def events() -> Iterator[str]:
        yield sse_event({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                         "params": {"notifications": {"taskIds": accepted}, "_meta": meta}})
        for record in _merged_watch(call, accepted, max_s):
            yield sse_event({"jsonrpc": "2.0", "method": "notifications/tasks",
                             "params": {**_detailed(call, record), "_meta": meta}})
        yield sse_event(jsonrpc.success(call.rpc.id, {"resultType": "complete", "_meta": meta}))

    # One of the principal's open streams until it ends or the client goes away.
    return Stream(call.runtime.limits().hold(call.principal, events()))


def _merged_watch(call: Call, task_ids: list[str], max_s: float) -> Iterator[JobRecord]:
    """Each task's changes (its current state first), merged from one watcher thread per task."""
    changes: queue.Queue[JobRecord | None] = queue.Queue()
    stop = threading.Event()

    def follow(task_id: str) -> None:
        try:
            for _, record in call.runtime.streaming().watch(call.principal, task_id, max_s=max_s,
                                                            block_ms=STREAM_BLOCK_MS):
                if stop.is_set():
                    return
                changes.put(record)
        except Exception as exc:  # the task expired or Redis failed: this task's feed just ends
            log.info("task feed for %s ended: %s", task_id, exc)
        finally:
            changes.put(None)

    for task_id in task_ids:
        threading.Thread(target=follow, args=(task_id,), name=f"mcp-listen-{task_id}", daemon=True).start()
    open_feeds = len(task_ids)
    deadline = time.monotonic() + max_s + 2
    try:
        while open_feeds and (left := deadline - time.monotonic()) > 0:
            try:
                item = changes.get(timeout=left)
            except queue.Empty:
                return
            if item is None:
                open_feeds -= 1
            else:
                yield item
    finally:
        stop.set()


METHODS: dict[str, Callable[[Call], Reply]] = {
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

"""What both MCP revisions share: operations as tools, a job as a `CallToolResult`, submitting a call.

Every registered operation is one tool, named like the operation. Every tool runs as a task (jobs run
on workers, and a job nobody can reach by its handle would be orphaned), so a caller that cannot take a
task handle is refused rather than served synchronously.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flask import Response

from tasks_backend import __version__
from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.errors import Conflict, InvalidParams, JobNotFound
from tasks_backend.model.domain import JobRecord, JobState, SubmitOutcome
from tasks_backend.model.timing import from_wire
from tasks_backend.service.jobs import JobService
from tasks_backend.service.questions import JobView
from tasks_backend.service.runtime import Runtime

from .. import jsonrpc, sse

#: MCP's error codes: a missing job and a call the job's state does not allow are bad params to MCP.
CODES: jsonrpc.Codes = {**jsonrpc.CODES, JobNotFound: jsonrpc.INVALID_PARAMS, Conflict: jsonrpc.INVALID_PARAMS}

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
#: Handshake versions a 2025-style `initialize` may name; all are answered with `LEGACY_VERSION`.
HANDSHAKE_VERSIONS = frozenset({LEGACY_VERSION, "2025-06-18", "2025-03-26", "2024-11-05"})
SUPPORTED_VERSIONS = [MODERN_VERSION, LEGACY_VERSION]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
SUBSCRIPTION_META = "io.modelcontextprotocol/subscriptionId"
#: The `_meta` key of a task that names the job whose `ctx.spawn` started it (the handle's `parentId`).
PARENT_META = "io.tasks-backend/parentId"
#: The `_meta` key of a task that names the job it reruns (the handle's `rerunOf`).
RERUN_META = "io.tasks-backend/rerunOf"
#: The `_meta` key of a task that says who answered its questions (the handle's `answeredBy`).
ANSWERED_META = "io.tasks-backend/answeredBy"


def parent_in_meta(task: dict[str, Any]) -> dict[str, Any]:
    """A task built from the shared handle, with `parentId` and `rerunOf` moved into its `_meta` (MCP's Task has no
    such fields)."""
    for name, meta in (("parentId", PARENT_META), ("rerunOf", RERUN_META), ("answeredBy", ANSWERED_META)):
        value = task.pop(name, None)
        if value is not None:
            task.setdefault("_meta", {})[meta] = value
    return task


#: The `_meta` key of `tools/call` that carries an idempotency key (same rules as HTTP `Idempotency-Key`).
IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"
#: The `_meta` keys of `tools/call` that delay a job and rank it (the HTTP body's `runAt`, `delayMs`, `priority`).
TIMING_META = ("io.tasks-backend/runAt", "io.tasks-backend/delayMs", "io.tasks-backend/priority")

HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

SERVER_INFO = {"name": "tasks-backend", "version": __version__}
INSTRUCTIONS = ("Each tool starts a long-running job and answers with a task handle; "
                "poll it, answer its input requests, or cancel it.")


@dataclass
class McpRequest:
    """One JSON-RPC request as an MCP handler sees it."""

    rpc: jsonrpc.Request
    principal: Principal
    runtime: Runtime
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def service(self) -> JobService:
        return self.runtime.service

    @property
    def params(self) -> dict[str, Any]:
        return self.rpc.params

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.rpc.params.get("_meta")
        return meta if isinstance(meta, dict) else {}


@dataclass
class Stream:
    """A reply sent as server-sent events: each item is one SSE event, already framed."""

    events: Iterator[str]


Reply = dict[str, Any] | Stream


def sse_event(message: dict[str, Any] | None, event_id: str | None = None, retry_ms: int | None = None,
              ) -> str:
    """One MCP SSE event; `message=None` makes an empty (priming) event that only carries an id."""
    if message is None:
        return sse.frame("", event="message", event_id=event_id, retry_ms=retry_ms)
    return sse.json_frame(message, event="message", event_id=event_id, retry_ms=retry_ms, separators=sse.COMPACT)


def sse_response(stream: Stream) -> Response:
    return sse.response(stream.events)


def tools(runtime: Runtime, *, legacy: bool) -> list[dict[str, Any]]:
    """Every operation as a tool. Only 2025-11-25 knows `execution.taskSupport`."""
    out = []
    for spec in runtime.registry:
        tool: dict[str, Any] = {"name": spec.name, "description": spec.description,
                                "inputSchema": runtime.registry.json_schema(spec.name)}
        if legacy:
            tool["execution"] = {"taskSupport": "required"}
        out.append(tool)
    return out


def string_param(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"`{name}` must be a non-empty string.")
    return value


def submit_call(call: McpRequest, ttl_s: float | None = None) -> tuple[JobRecord, SubmitOutcome]:
    """Submit `tools/call` as a job: the tool names the operation, the arguments are its params."""
    name = string_param(call.params, "name")
    arguments = call.params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise InvalidParams("`arguments` must be an object.")
    key = call.meta.get(IDEMPOTENCY_META)
    if key is not None and not isinstance(key, str):
        raise InvalidParams(f"`_meta[{IDEMPOTENCY_META!r}]` must be a string.")
    timing = from_wire(call.meta, TIMING_META)
    return call.service.submit(call.principal, name, arguments, idempotency_key=key, ttl_s=ttl_s,
                               run_at_ms=timing.run_at_ms, delay_ms=timing.delay_ms, priority=timing.priority)


#: What one a job's questions were addressed to, who does not own it, reads of how it ended (the rest is the owner's).
WITHHELD = {JobState.COMPLETED: "The task completed; its result is for its owner.",
            JobState.FAILED: "The task failed.", JobState.CANCELLED: "The task was cancelled."}


def error_message(record: JobRecord) -> str:
    return str((record.error or {}).get("message") or "The job failed.")


def tool_result(view: JobView) -> dict[str, Any]:
    """`call_tool_result` of a finished job for whoever reads it: to one its questions were addressed to, who does
    not own it, only how it ended."""
    record = view.record
    if not view.limited:
        return call_tool_result(record)
    return {"content": [{"type": "text", "text": WITHHELD[record.state]}],
            "isError": record.state is not JobState.COMPLETED}


def call_tool_result(record: JobRecord) -> dict[str, Any]:
    """The `CallToolResult` a terminal job stands for, in the one shape both revisions use.

    A completed job's result is sent as JSON text, and also as `structuredContent` when it is an
    object (MCP allows only objects there). A failed or cancelled job is a result with `isError`.
    """
    if record.state is JobState.COMPLETED:
        out: dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(record.result)}]}
        if isinstance(record.result, dict):
            out["structuredContent"] = record.result
        out["isError"] = False
        return out
    text = error_message(record) if record.state is JobState.FAILED else "The task was cancelled."
    return {"content": [{"type": "text", "text": text}], "isError": True}


# -- URL-mode elicitation (2025-11-25 elicitation, "URL Mode Elicitation Requests"; kept in 2026-07-28) ------
def declares_url_elicitation(capabilities: Any) -> bool:
    """Whether client capabilities declare URL-mode elicitation (`elicitation.url` is an object)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def question_page(settings: Settings, view: JobView) -> str:
    """Where a person signs in and answers the job's questions: the job's web page, or to one they were addressed
    to, who does not own it, "Waiting for me" (the job's page is its owner's)."""
    base = settings.public_url.rstrip("/")
    return f"{base}/ui/waiting" if view.limited else f"{base}/ui/jobs/{view.record.id}"


def elicitation_id(task_id: str, key: str) -> str:
    return f"{task_id}/{key}"


def url_elicitation(task_id: str, key: str, request: dict[str, Any], page: str) -> dict[str, Any]:
    """An input request as a URL-mode `elicitation/create`: the person answers on `page`, so nothing of
    the form or the answer passes through the client. Requests other than elicitation stay as they are."""
    if request.get("method", "elicitation/create") != "elicitation/create":
        return request
    params = request.get("params") or {}
    return {"method": "elicitation/create",
            "params": {"mode": "url", "message": params.get("message") or "This job needs your answer.",
                       "url": page, "elicitationId": elicitation_id(task_id, key)}}


def consent_only(answer: Any) -> bool:
    """A URL-mode `accept` without `content`: the person agreed to open the page, which is not an answer.
    (An `accept` that carries `content` anyway, from a handler that treats every request as a form, is
    taken as the answer, as the same request in form mode would be.)"""
    return isinstance(answer, dict) and answer.get("action") == "accept" and not isinstance(
        answer.get("content"), dict)


"""A2A's JSON-RPC methods: messages, tasks and push-notification configs, by method name (`METHODS`).

Rule: translation only; each method reads its params, calls the service and returns the wire form.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Response, stream_with_context

from tasks_backend.access.auth import Principal
from tasks_backend.access.streams import Held, StreamSlot
from tasks_backend.errors import InvalidParams, JobNotFound
from tasks_backend.model.domain import JobRecord, JobState, SubmitOutcome
from tasks_backend.model.timing import from_wire
from tasks_backend.push.subscriptions import PushStore, resolve_target
from tasks_backend.service.jobs import JobService
from tasks_backend.service.questions import JobView
from tasks_backend.service.runtime import STREAM_BLOCK_MS, Runtime
from tasks_backend.serving.drain import HangUpWatch

from .. import jsonrpc, sse
from ..jsonrpc import RpcError
from . import wire
from .codes import CONTENT_TYPE_NOT_SUPPORTED, EXTENDED_CARD_NOT_CONFIGURED, UNSUPPORTED_OPERATION, a2a_error
from .push import CONTEXT_FIELD, FORMAT, Contexts, normalize_config, shown

_STATE_BY_NAME = {name: state for state, name in wire.A2A_STATE.items()}
MAX_PAGE_SIZE = 100
MAX_CONTEXT_ID = 256
MAX_HISTORY = 0  # tasks keep no message history; a longer request is clamped to it
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class A2AScope:
    """One A2A request's scope, what every method needs: the caller and the runtime's parts."""

    principal: Principal
    service: JobService
    push: PushStore
    runtime: Runtime
    contexts: Contexts


# -- parameter helpers -------------------------------------------------------------------
def _object(params: dict[str, Any], name: str, *, required: bool = False) -> dict[str, Any]:
    value = params.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise InvalidParams(f"`{name}` must be an object.")
    return value


def _text(params: dict[str, Any], name: str, *, required: bool = False, limit: int = 256) -> str | None:
    value = params.get(name)
    if value is None or (value == "" and not required):
        if required:
            raise InvalidParams(f"`{name}` is required.")
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidParams(f"`{name}` must be a non-empty string of at most {limit} characters.")
    return value


def _count(params: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidParams(f"`{name}` must be an integer from {low} to {high}.")
    return value


def _history_length(params: dict[str, Any]) -> int:
    """`historyLength`, clamped to what this server keeps: tasks carry no message history ([spec] §3.2.4)."""
    return min(_count(params, "historyLength", 0, 0, 2**31 - 1), MAX_HISTORY)


def _timestamp_ms(params: dict[str, Any], name: str) -> int | None:
    """A ProtoJSON Timestamp (RFC 3339 with a zone) in whole milliseconds, rounded up."""
    value = params.get(name)
    if value is None:
        return None
    moment = None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            moment = datetime.fromisoformat(value)
    if moment is None or moment.tzinfo is None:
        raise InvalidParams(f"`{name}` must be an RFC 3339 timestamp such as 2026-01-31T09:00:00Z.")
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return -(-micros // 1000)


def _context(call: A2AScope, record: JobRecord) -> str:
    return call.contexts.of([record.id])[record.id]


def _seen_context(call: A2AScope, view: JobView, stored: str | None = None) -> str:
    """The contextId the caller reads: the owner's context, or to one the job's questions were addressed to
    (whose conversation it is not) the task's own id."""
    if view.limited:
        return view.record.id
    return stored or _context(call, view.record)


def _task(view: JobView, context: str) -> dict[str, Any]:
    return wire.task(view.record, context, whole=not view.limited)


def _task_id(params: dict[str, Any], name: str = "id") -> str:
    value = _text(params, name, required=True)
    assert value is not None
    return value


# -- messages ----------------------------------------------------------------------------------
def _accept_message(call: A2AScope, params: dict[str, Any]) -> tuple[JobView, str]:
    """Start a job from a message, or answer a parked job's input requests (as its owner or one its questions
    were addressed to); returns the job as the caller sees it, and the contextId it reads."""
    message = _object(params, "message", required=True)
    # [proto] Message: messageId, role and parts are REQUIRED; a client sends ROLE_USER.
    _text(message, "messageId", required=True)
    if message.get("role") != "ROLE_USER":
        raise InvalidParams("`message.role` is required and must be ROLE_USER.")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidParams("`message.parts` must be a non-empty list.")
    data = [p["data"] for p in parts if isinstance(p, dict) and isinstance(p.get("data"), dict)]
    context_id = _text(message, "contextId", limit=MAX_CONTEXT_ID)
    task_id = _text(message, "taskId")
    configuration = _object(params, "configuration")
    push_config = configuration.get("taskPushNotificationConfig")
    if push_config is not None:
        checked = normalize_config(push_config, task_id or "pending")
        resolve_target(checked["url"], call.runtime.settings.push_allow_private)

    if task_id is not None:
        view = call.service.read(call.principal, task_id)
        record, context = view.record, _seen_context(call, view)
        if push_config is not None and view.limited:
            raise RpcError(UNSUPPORTED_OPERATION, "Only the task's owner may set its push notifications.")
        if context_id is not None and context_id != context:
            raise InvalidParams("`contextId` does not match the task's context.")
        if record.terminal:
            raise RpcError(UNSUPPORTED_OPERATION, "The task has finished; it takes no more messages.")
        _require_data(data)
        responses = next((d["inputResponses"] for d in data if "inputResponses" in d), None)
        if responses is None:
            raise InvalidParams("A message to an existing task must carry a data part "
                                '{"inputResponses": {...}}.')
        after = call.push.last_event_id(record.id)
        record = call.service.provide_input(call.principal, task_id, responses)
        if push_config is not None:
            call.push.put(record, normalize_config(push_config, record.id), after=after, format=FORMAT)
        return call.service.questions.seen_by(call.principal, record), context

    _require_data(data)
    order = next((d for d in data if "operation" in d), None)
    if order is None:
        raise InvalidParams('Name the operation with a data part {"operation": "...", "params": {...}}.',
                            extra={"operations": [spec.name for spec in call.runtime.registry]})
    unknown = set(order) - {"operation", "params"}
    if unknown:
        raise InvalidParams(f"Unknown fields in the operation part: {sorted(unknown)}.")
    metadata = _object(message, "metadata") or _object(params, "metadata")
    key = metadata.get("idempotencyKey")
    if key is not None and not isinstance(key, str):
        raise InvalidParams("`metadata.idempotencyKey` must be a string.")
    timing = from_wire(metadata)  # `runAt`, `delayMs`, `priority`, as in the HTTP body
    record, outcome = call.service.submit(call.principal, order["operation"], order.get("params"),
                                          idempotency_key=key, run_at_ms=timing.run_at_ms,
                                          delay_ms=timing.delay_ms, priority=timing.priority)
    if context_id is not None:
        call.contexts.set(record, context_id)
    if push_config is not None:
        call.push.put(record, normalize_config(push_config, record.id), after="0-0", format=FORMAT)
    if context_id is None and outcome is SubmitOutcome.CREATED:
        return JobView(record), record.id  # a job made just now has no context but its own id: nothing to read
    return JobView(record), context_id or _context(call, record)


def _require_data(data: list[dict[str, Any]]) -> None:
    if not data:
        raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, "This agent reads only data parts (application/json); "
                       'send {"data": {"operation": "...", "params": {...}}}.')


def send_message(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    if _object(params, "configuration").get("returnImmediately"):
        view, context = _accept_message(call, params)
        return {"task": _task(view, context)}
    # A blocking send is one of the principal's open streams; its slot is taken before any job is created, and
    # given back only once nothing reads for it (after its client hung up, say).
    with call.runtime.limits().open_stream(call.principal) as slot, sse.hang_up_watch() as client:
        view, context = _accept_message(call, params)
        view = _wait_interrupted(call, view, slot, client)
    return {"task": _task(view, context)}


def _wait_interrupted(call: A2AScope, view: JobView, slot: StreamSlot, client: HangUpWatch | None) -> JobView:
    """Wait for a terminal or interrupted state, as A2A says a blocking send does: as long as the job lives (its
    TTL ends it), until this process is stopping, or until the client hangs up (nobody is left to answer). Waiting
    costs a greenlet of the web worker, not a thread that polls and submits need."""
    job_id, last, service = view.record.id, "0-0", call.runtime.streaming()
    while view.record.state not in wire.STREAM_END and not service.stopping and not (client and client.hung_up):
        for event_id, view in service.watch_view(
                call.principal, job_id, after=last, max_s=call.runtime.settings.sse_max_s,
                block_ms=STREAM_BLOCK_MS):
            last = event_id or last
            if view.record.state in wire.STREAM_END:
                break
        slot.renew()
    return view


def send_streaming_message(call: A2AScope, params: dict[str, Any], request_id: jsonrpc.Id) -> Response:
    slot = call.runtime.limits().open_stream(call.principal)  # before any job is created
    try:
        view, context = _accept_message(call, params)
        return _stream(call, view.record.id, context, request_id, slot)
    except BaseException:
        slot.close()
        raise


def subscribe_to_task(call: A2AScope, params: dict[str, Any], request_id: jsonrpc.Id) -> Response:
    view = call.service.read(call.principal, _task_id(params))
    if view.record.terminal:
        raise RpcError(UNSUPPORTED_OPERATION, "The task has finished; there is nothing to subscribe to.")
    slot = call.runtime.limits().open_stream(call.principal)
    try:
        return _stream(call, view.record.id, _seen_context(call, view), request_id, slot)
    except BaseException:
        slot.close()
        raise


def _stream(call: A2AScope, job_id: str, context: str, request_id: jsonrpc.Id, slot: StreamSlot) -> Response:
    """SSE: the task, then one update per change; closed on a terminal or interrupted state.

    The feed position is taken before the record is read, so no change falls between the two; a
    change that shows in both is skipped by its timestamp. A stream lasts at most `sse_max_s`.
    """
    after = call.push.last_event_id(job_id)
    events = call.runtime.streaming().watch_view(call.principal, job_id, after=after,
                                                 max_s=call.runtime.settings.sse_max_s, block_ms=STREAM_BLOCK_MS)
    _, first = next(events)  # who may read it is checked here, before the response starts

    def frame(result: dict[str, Any]) -> str:
        return sse.json_frame(jsonrpc.success(request_id, result))

    def generate() -> Iterator[str]:
        last = first.record
        yield frame({"task": _task(first, context)})
        if last.state in wire.STREAM_END:
            return
        try:
            for _, view in events:
                record = view.record
                if record.updated_ms < last.updated_ms or (
                        record.updated_ms == last.updated_ms and record.state is last.state):
                    continue
                last = record
                for item in wire.updates(record, context, whole=not view.limited):
                    yield frame(item)
                if record.state in wire.STREAM_END:
                    return
        except Exception as exc:
            yield sse.json_frame(a2a_error(request_id, exc), event="error")

    # `slot` (one of the principal's open streams) is held until the stream ends or the client goes away.
    return sse.response(stream_with_context(Held(slot, generate())))


# -- tasks -------------------------------------------------------------------------------------
def get_task(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    _history_length(params)
    # The record and its contextId in one round trip (what `_context` reads, with the same default).
    view, context = call.service.read_with_meta(call.principal, _task_id(params), CONTEXT_FIELD)
    return _task(view, _seen_context(call, view, context or view.record.id))


def cancel_task(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    record = call.service.cancel(call.principal, _task_id(params))
    return wire.task(record, _context(call, record))


def list_tasks(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    state_name = _text(params, "status", limit=64)
    wanted: JobState | None = None
    if state_name is not None and state_name != "TASK_STATE_UNSPECIFIED":  # the enum's zero: no filter
        if state_name not in _STATE_BY_NAME:
            raise InvalidParams(f"`status` must be one of {sorted(_STATE_BY_NAME)}.")
        wanted = _STATE_BY_NAME[state_name]
    context_id = _text(params, "contextId", limit=MAX_CONTEXT_ID)
    page_size = _count(params, "pageSize", 50, 1, MAX_PAGE_SIZE)
    _history_length(params)
    after_ms = _timestamp_ms(params, "statusTimestampAfter")
    cursor = _text(params, "pageToken", limit=1024)

    def keep(records: list[JobRecord]) -> list[JobRecord]:
        contexts = call.contexts.of([r.id for r in records]) if context_id is not None else {}
        return [r for r in records if (wanted is None or r.state is wanted)
                and (after_ms is None or r.updated_ms >= after_ms)
                and (context_id is None or contexts[r.id] == context_id)]

    where = keep if (wanted, context_id, after_ms) != (None, None, None) else None
    # [spec] §3.1.4 Ordering: "sorted by their status timestamp time in descending order (most recently
    # updated tasks first)". [proto] ListTasksResponse.total_size counts what the filters keep.
    records, next_cursor, total = call.service.list_recent(call.principal, limit=page_size, cursor=cursor,
                                                           where=where)
    contexts = call.contexts.of([r.id for r in records])
    artifacts = params.get("includeArtifacts") is True
    tasks = [wire.task(r, contexts[r.id], artifacts=artifacts) for r in records]
    return {"tasks": tasks, "nextPageToken": next_cursor or "", "pageSize": len(tasks), "totalSize": total}


# -- push-notification configs -----------------------------------------------------------------
def _owned(call: A2AScope, params: dict[str, Any]) -> JobRecord:
    """The task a push-config write names, if the caller owns it: an admin reads any task but changes
    none of another owner's, so to a write that task is missing (as to a cancel)."""
    record = call.service.get(call.principal, _task_id(params, "taskId"))
    if record.owner != call.principal.name:
        raise JobNotFound()
    return record


def create_push_config(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    record = _owned(call, params)
    config = normalize_config(params, record.id)
    resolve_target(config["url"], call.runtime.settings.push_allow_private)
    return shown(call.push.put(record, config, after=call.push.last_event_id(record.id), format=FORMAT))


def get_push_config(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    record = call.service.get(call.principal, _task_id(params, "taskId"))
    config = call.push.get(record.id, _task_id(params))
    if config is None:
        raise JobNotFound("No such push notification config.")
    return shown(config)


def list_push_configs(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    record = call.service.get(call.principal, _task_id(params, "taskId"))
    return {"configs": [shown(c) for c in call.push.configs(record.id)], "nextPageToken": ""}


def delete_push_config(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    record = _owned(call, params)
    if not call.push.delete(record.id, _task_id(params), owner=record.owner):
        raise JobNotFound("No such push notification config.")
    return {}


def get_extended_card(call: A2AScope, params: dict[str, Any], _id: jsonrpc.Id) -> dict[str, Any]:
    raise RpcError(EXTENDED_CARD_NOT_CONFIGURED, "This agent has no extended agent card.")


Method = Callable[[A2AScope, dict[str, Any], jsonrpc.Id], "dict[str, Any] | Response"]

METHODS: dict[str, Method] = {
    "SendMessage": send_message,
    "SendStreamingMessage": send_streaming_message,
    "GetTask": get_task,
    "ListTasks": list_tasks,
    "CancelTask": cancel_task,
    "SubscribeToTask": subscribe_to_task,
    "CreateTaskPushNotificationConfig": create_push_config,
    "GetTaskPushNotificationConfig": get_push_config,
    "ListTaskPushNotificationConfigs": list_push_configs,
    "DeleteTaskPushNotificationConfig": delete_push_config,
    "GetExtendedAgentCard": get_extended_card,
}

"""A job record in A2A 1.0 wire form (ProtoJSON): Task, TaskStatus, artifacts and stream events.

Pure functions with no Flask in them: the JSON-RPC adapter and the workers' push delivery both use
them, so a webhook receives exactly what a stream subscriber reads.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from tasks_backend.model.domain import JobRecord, JobState, rfc3339
from tasks_backend.model.wire import handle

#: Each state as A2A 1.0 names it (TaskState).
A2A_STATE: Final[dict[JobState, str]] = {
    JobState.QUEUED: "TASK_STATE_SUBMITTED",
    JobState.RUNNING: "TASK_STATE_WORKING",
    JobState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    JobState.SUSPENDED: "TASK_STATE_WORKING",
    JobState.COMPLETED: "TASK_STATE_COMPLETED",
    JobState.FAILED: "TASK_STATE_FAILED",
    JobState.CANCELLED: "TASK_STATE_CANCELED",
}

#: States after which a stream is closed: terminal ones, and the interrupted `input_required`.
STREAM_END = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.INPUT_REQUIRED})

_IDS = uuid.UUID("6f1c6a1e-7d38-4d0e-9a55-0c2f3b7b9e41")


def _message_id(record: JobRecord) -> str:
    # Stable per (job, change): the same status reads with the same message id on every channel.
    return str(uuid.uuid5(_IDS, f"{record.id}:{record.state.value}:{record.updated_ms}"))


def status_message(record: JobRecord, context_id: str, *, whole: bool = True) -> dict[str, Any] | None:
    """The agent's message for a status: its text, plus what failed or what input is needed. Not `whole`: to one
    the job's questions were addressed to, who does not own it, the questions that are its and nothing of the error."""
    parts: list[dict[str, Any]] = []
    if record.state is JobState.FAILED and not whole:
        parts.append({"text": "Job failed."})
    elif record.state is JobState.FAILED:
        error = record.error or {"message": "Job failed."}
        parts.append({"text": str(error.get("message") or "Job failed.")})
        parts.append({"data": {"error": error}})
    elif record.status_message:
        parts.append({"text": record.status_message})
    if record.state is JobState.INPUT_REQUIRED:
        parts.append({"data": {"inputRequests": record.input_requests or {}}})
    if not parts:
        return None
    return {"messageId": _message_id(record), "contextId": context_id, "taskId": record.id,
            "role": "ROLE_AGENT", "parts": parts}


def status(record: JobRecord, context_id: str, *, whole: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"state": A2A_STATE[record.state], "timestamp": rfc3339(record.updated_ms)}
    message = status_message(record, context_id, whole=whole)
    if message is not None:
        out["message"] = message
    return out


def artifact(record: JobRecord) -> dict[str, Any]:
    """The result as one artifact with one data part (any JSON value)."""
    return {"artifactId": f"{record.id}:result", "name": "result", "parts": [{"data": record.result}]}


def metadata(record: JobRecord, *, whole: bool = True) -> dict[str, Any]:
    """The handle fields every protocol shares, where A2A allows free-form data (not `whole`: with who owns it)."""
    out = handle(record)
    out["operation"] = record.operation
    if not whole:
        out["owner"] = record.owner
    if record.progress is not None:
        out["progress"] = {"done": record.progress, "total": record.total}
    return out


def task(record: JobRecord, context_id: str, *, artifacts: bool = True, whole: bool = True) -> dict[str, Any]:
    """The Task; not `whole` (see `status_message`): without artifacts."""
    out: dict[str, Any] = {"id": record.id, "contextId": context_id,
                           "status": status(record, context_id, whole=whole)}
    if artifacts and whole and record.state is JobState.COMPLETED:
        out["artifacts"] = [artifact(record)]
    out["metadata"] = metadata(record, whole=whole)
    return out


def updates(record: JobRecord, context_id: str, *, whole: bool = True) -> list[dict[str, Any]]:
    """The StreamResponses announcing a record's current state: the artifact first when completed (and `whole`)."""
    out: list[dict[str, Any]] = []
    if whole and record.state is JobState.COMPLETED:
        out.append({"artifactUpdate": {"taskId": record.id, "contextId": context_id,
                                       "artifact": artifact(record), "lastChunk": True}})
    out.append({"statusUpdate": {"taskId": record.id, "contextId": context_id,
                                 "status": status(record, context_id, whole=whole),
                                 "metadata": metadata(record, whole=whole)}})
    return out


def example(schema: dict[str, Any]) -> dict[str, Any]:
    """Params that the operation's own JSON Schema accepts: its required fields, each a plausible value."""
    props = schema.get("properties") or {}
    return {name: _example_value(props.get(name) or {}) for name in schema.get("required", [])}


def _example_value(prop: dict[str, Any]) -> Any:
    if "default" in prop:
        return prop["default"]
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type")
    if kind in ("number", "integer"):
        value = max(prop.get("minimum", 1), 1)
        value = min(value, prop.get("maximum", value))
        return int(value) if kind == "integer" else value
    if kind == "string":
        return "example"[: prop.get("maxLength", 7)].ljust(prop.get("minLength", 0), "x")
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return example(prop) if kind == "object" else None

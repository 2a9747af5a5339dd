"""The handle's wire form, shared by every protocol that allows its fields."""

from __future__ import annotations

import json
from typing import Any

from .domain import JobRecord, JobState, rfc3339
from .states import WIRE_STATUS


def handle(record: JobRecord) -> dict[str, Any]:
    """The task handle: the same fields in HTTP, MCP 2026 and (renamed) MCP 2025 (MCP moves `parentId`, the job
    that spawned this one, `rerunOf`, the job it reruns, and `answeredBy` into the task's `_meta`)."""
    out: dict[str, Any] = {
        "taskId": record.id,
        "status": WIRE_STATUS[record.state],
    }
    if record.status_message:
        out["statusMessage"] = record.status_message
    elif record.run_at_ms is not None and record.run_at_ms > record.created_ms and record.state is JobState.QUEUED:
        # (A time already past when the job was made is a start now: it waits for a worker, not for its time.)
        out["statusMessage"] = f"Waiting to start at {rfc3339(record.run_at_ms)}."
    out["createdAt"] = created = rfc3339(record.created_ms)
    # A new job's two times are one: formatted once.
    out["lastUpdatedAt"] = created if record.updated_ms == record.created_ms else rfc3339(record.updated_ms)
    out["ttlMs"] = record.ttl_ms
    out["pollIntervalMs"] = record.poll_ms
    out["priority"] = record.priority
    if record.run_at_ms is not None:
        out["runAt"] = rfc3339(record.run_at_ms)
    if record.parent_id:
        out["parentId"] = record.parent_id
    if record.rerun_of:
        out["rerunOf"] = record.rerun_of
    if record.answered_by:
        out["answeredBy"] = answered_by(record.answered_by)
    return out


def answered_by(raw: dict[str, Any]) -> dict[str, Any]:
    """Who answered each question and when (the address is kept for the owner's page and the audit trail)."""
    return {key: {"by": str(v.get("by", "")), "at": rfc3339(int(v.get("at") or 0))}
            for key, v in sorted(raw.items()) if isinstance(v, dict)}


def detailed(record: JobRecord) -> dict[str, Any]:
    """The handle plus what its state carries: result, error or open input requests."""
    out = handle(record)
    out["operation"] = record.operation
    if record.schedule is not None:
        out["schedule"] = record.schedule
    if record.progress is not None:
        out["progress"] = {"done": record.progress, "total": record.total}
    if record.state is JobState.COMPLETED:
        out["result"] = record.result
    elif record.state is JobState.FAILED:
        out["error"] = record.error or {"message": "Job failed."}
    elif record.state is JobState.INPUT_REQUIRED:
        out["inputRequests"] = record.input_requests or {}
    return out


def addressed(record: JobRecord) -> dict[str, Any]:
    """What one a job's question is addressed to reads of it (a limited `JobView`'s record): the handle, the
    operation, who owns it and, while it waits, the questions that are the reader's."""
    out = handle(record)
    out["operation"] = record.operation
    out["owner"] = record.owner
    if record.state is JobState.INPUT_REQUIRED:
        out["inputRequests"] = record.input_requests or {}
    return out


#: `json.dumps` with options builds its encoder on every call: this one is built once.
_WIRE = json.JSONEncoder(separators=(",", ":")).encode


def wire_json(value: Any) -> bytes:
    """A JSON answer's body, the same for every answer, errors included: compact, and ending with a newline (so
    that a shell prompt after `curl` starts on a line of its own)."""
    return _WIRE(value).encode() + b"\n"

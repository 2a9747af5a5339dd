"""Plain HTTP for operating on jobs: `POST /v1/jobs/{id}/rerun` and `POST /v1/jobs/bulk`. Translation only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, g, request

from tasks_backend.errors import BadRequest
from tasks_backend.model.domain import JobRecord, SubmitOutcome
from tasks_backend.model.wire import handle
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter
from .jobs import handle_body, json_object

bp = Blueprint("operate", __name__, url_prefix="/v1")
ADAPTER = Adapter("operate", bp)


def _service() -> JobService:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.service


def _accepted(record: JobRecord, outcome: SubmitOutcome) -> Response:
    payload, headers = handle_body(record, handle(record))
    headers.append(("Location", f"/v1/jobs/{record.id}"))
    if outcome is SubmitOutcome.EXISTING:
        headers.append(("Idempotent-Replayed", "true"))
    return Response(payload, status=202, mimetype="application/json", headers=headers)


@bp.post("/jobs/<job_id>/rerun")
def rerun(job_id: str) -> Response:
    """202 with the new job's handle (its `rerunOf` names this one); 409 unless this one failed or was cancelled."""
    raw = request.get_data(cache=True)
    body = json_object(raw) if raw.strip() else {}
    unknown = sorted(set(body) - {"keepSteps"})
    if unknown:
        raise BadRequest(f"Unknown fields: {', '.join(unknown)}.", extra={"fields": unknown})
    keep = body.get("keepSteps", False)
    if not isinstance(keep, bool):
        raise BadRequest("`keepSteps` must be true or false.", extra={"field": "keepSteps"})
    record, outcome = _service().rerun(g.principal, job_id, keep_steps=keep,
                                       idempotency_key=request.headers.get("Idempotency-Key"))
    return _accepted(record, outcome)


@bp.post("/jobs/bulk")
def bulk() -> Response:
    """202 with the bulk job's handle: its progress counts the jobs acted on, its result says which."""
    record, outcome = _service().start_bulk(g.principal, json_object(request.get_data(cache=True)),
                                            idempotency_key=request.headers.get("Idempotency-Key"))
    return _accepted(record, outcome)


_FILTER_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "status": ({"type": "string"}, "working, input_required, completed, failed or cancelled; several comma-separated"),
    "operation": ({"type": "string"}, "Only jobs of this operation."),
    "createdAfter": ({"type": "string", "format": "date-time"}, "Only jobs created after this time (RFC 3339)."),
    "createdBefore": ({"type": "string", "format": "date-time"}, "Only jobs created before this time (RFC 3339)."),
    "schedule": ({"type": "string"}, "Only the jobs the schedule of this name made."),
    "parent": ({"type": "string"}, "Only the child jobs of this job (404 if the caller cannot see it)."),
    "owner": ({"type": "string"}, "Operators and admins: this principal's jobs, or `*` for every owner's; from "
                                  "anyone else a 400."),
}
#: The listing's filter fields as query parameters (an unknown query field is a 400 naming it).
FILTER_PARAMETERS = [{"name": name, "in": "query", "schema": schema, "description": text}
                     for name, (schema, text) in _FILTER_FIELDS.items()]


def operate_paths(job_id: dict[str, Any], answer: Callable[..., dict[str, Any]],
                  errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """These routes in the OpenAPI document (`openapi.build_spec` passes its helpers)."""
    key = {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
    bulk_body = {"type": "object", "required": ["action"], "additionalProperties": False, "properties": {
        "action": {"enum": ["cancel", "rerun"]},
        "filter": {"type": "object", "additionalProperties": False,
                   "properties": {name: schema for name, (schema, _) in _FILTER_FIELDS.items()}},
        "dryRun": {"type": "boolean", "default": False, "description": "Only say what would be done."},
        "keepSteps": {"type": "boolean", "default": False, "description": "Reruns keep the recorded steps."}}}
    return {
        "/v1/jobs/{job_id}/rerun": {"post": {
            "summary": "Rerun a failed or cancelled job as a new one (owner or operator)", "parameters": [job_id, key],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False,
                "properties": {"keepSteps": {"type": "boolean", "default": False}}}}}},
            "responses": {**answer("202", "The new job; poll the Location"), **errors("400", "404", "409", "422")}}},
        "/v1/jobs/bulk": {"post": {
            "summary": "Cancel or rerun every job a filter matches, as a job of its own", "parameters": [key],
            "requestBody": {"required": True, "content": {"application/json": {"schema": bulk_body}}},
            "responses": {**answer("202", "The bulk job; its result gives the counts and ids"),
                          **errors("400", "413", "422")}}},
    }

"""Plain HTTP for operating on jobs: `POST /v1/jobs/{id}/rerun` and `POST /v1/jobs/bulk`. Translation only."""

from __future__ import annotations

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

"""Plain HTTP for questions addressed to people: `GET /v1/questions` (those open for the caller) and the owner's
one-time answer links, `POST`/`DELETE /v1/jobs/{id}/questions/{key}/link`. Translation only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify

from tasks_backend.service.jobs import JobService
from tasks_backend.service.questions import link_answer
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter

bp = Blueprint("questions", __name__, url_prefix="/v1")
ADAPTER = Adapter("questions", bp)


def _service() -> JobService:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.service


@bp.get("/questions")
def open_questions() -> Response:
    return jsonify({"questions": _service().questions.open_for(g.principal)})


@bp.post("/jobs/<job_id>/questions/<key>/link")
def make_link(job_id: str, key: str) -> Response:
    service = _service()
    link = service.questions.make_link(g.principal, job_id, key, service.settings.public_url)
    # The audit entry names the link, never its token (the URL is the only place the token is).
    service.audit.record(g.principal, "question.link", job_id=job_id, owner=g.principal.name,
                         target=f"link:{link.link_id}", detail=key)
    response = jsonify(link_answer(link))
    response.status_code = 201
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.delete("/jobs/<job_id>/questions/<key>/link")
def revoke_link(job_id: str, key: str) -> Response:
    service = _service()
    revoked = service.questions.revoke_link(g.principal, job_id, key)
    if revoked:
        service.audit.record(g.principal, "question.unlink", job_id=job_id, owner=g.principal.name, detail=key)
    return Response(status=204)


def question_paths(job_id: dict[str, Any], errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """These routes in the OpenAPI document (`openapi.build_spec` passes its helpers)."""
    key = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
    question = {"type": "object", "properties": {
        "jobId": {"type": "string"}, "key": {"type": "string"}, "operation": {"type": "string"},
        "askedBy": {"type": "string"}, "message": {"type": ["string", "null"]}, "requestedSchema": {"type": "object"},
        "to": {"type": "array", "items": {"type": "string"}}, "deadline": {"type": "string", "format": "date-time"}}}
    link = {"type": "object", "required": ["url", "expiresAt"], "properties": {
        "url": {"type": "string"}, "expiresAt": {"type": "string", "format": "date-time"},
        "linkId": {"type": "string"}}}
    return {
        "/v1/questions": {"get": {
            "summary": "The open questions addressed to the caller, by name or by role",
            "responses": {"200": {"description": "The questions", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"questions": {"type": "array", "items": question}}}}}}}}},
        "/v1/jobs/{job_id}/questions/{key}/link": {
            "post": {"summary": "A one-time link that answers the question once, without a token (owner)",
                     "parameters": [job_id, key],
                     "responses": {"201": {"description": "The link", "content": {"application/json": {
                         "schema": link}}}, **errors("404", "409")}},
            "delete": {"summary": "Revoke the question's link (owner)", "parameters": [job_id, key],
                       "responses": {"204": {"description": "Revoked (or there was none)"},
                                     **errors("404")}}},
    }

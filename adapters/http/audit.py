"""Plain HTTP over the audit trail: `GET /v1/audit`. Translation only (who sees what: `service.audit`)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from tasks_backend.errors import BadRequest
from tasks_backend.service.audit import ACTIONS, Audit, wire
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter
from .query import page_limit

bp = Blueprint("audit", __name__, url_prefix="/v1")
ADAPTER = Adapter("audit", bp)

#: The query fields `GET /v1/audit` takes; any other is a 400 naming it.
QUERY_FIELDS = frozenset({"job", "principal", "since", "cursor", "limit"})


def _audit() -> Audit:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.service.audit


@bp.get("/audit")
def list_entries() -> Response:
    unknown = sorted(set(request.args) - QUERY_FIELDS)
    if unknown:
        raise BadRequest(f"Unknown query fields: {unknown}.", extra={"errors": {f: ["is not a field of this query"]
                                                                                for f in unknown}})
    limit = page_limit()
    entries, cursor = _audit().query(g.principal, job=request.args.get("job") or None,
                                     principal=request.args.get("principal") or None,
                                     since=request.args.get("since") or None,
                                     cursor=request.args.get("cursor") or None, limit=limit)
    return jsonify({"entries": [wire(e) for e in entries], "nextCursor": cursor})


#: `GET /v1/audit` and its entries, for the API description (`openapi`).
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["id", "at", "principal", "action"],
    "properties": {
        "id": {"type": "string", "description": "Opaque, ordered: later entries have greater ids."},
        "at": {"type": "string", "format": "date-time", "description": "When, by the store's (Redis's) clock."},
        "principal": {"type": "string", "description": "Who acted."},
        "action": {"type": "string", "enum": list(ACTIONS)},
        "jobId": {"type": "string", "format": "uuid", "description": "The job acted on."},
        "target": {"type": "string", "description": "The schedule's name, the push config's id, a new job's id."},
        "owner": {"type": "string", "description": "The owner of the job or schedule acted on."},
        "detail": {"type": "string", "description": "A short what: for an answer, each key and how it was "
                                                    "answered (`approval:accept`), never the content."},
        "address": {"type": "string", "description": "The caller's address (behind trusted proxies, the "
                                                     "forwarded one)."},
        "requestId": {"type": "string", "description": "The request's `X-Request-Id`."},
    },
}
PATHS: dict[str, Any] = {"/v1/audit": {"get": {
    "summary": "The audit trail, newest first: every entry for admins and operators, the entries about your own "
               "jobs and schedules for anyone else",
    "parameters": [
        {"name": "job", "in": "query", "schema": {"type": "string"}, "description": "Entries about this job."},
        {"name": "principal", "in": "query", "schema": {"type": "string"},
         "description": "Entries of what this principal did."},
        {"name": "since", "in": "query", "schema": {"type": "string"},
         "description": "An RFC 3339 time, or a duration back from now (`90s`, `15m`, `1h`, `7d`)."},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
        {"name": "cursor", "in": "query", "schema": {"type": "string"},
         "description": "Opaque: the `nextCursor` of an earlier page (a page may be short; go on while there "
                        "is one); any other value is a 400."}],
    "responses": {
        "200": {"description": "A page of entries", "content": {"application/json": {"schema": {
            "type": "object", "required": ["entries", "nextCursor"],
            "properties": {"entries": {"type": "array", "items": {"$ref": "#/components/schemas/AuditEntry"}},
                           "nextCursor": {"type": ["string", "null"]}}}}}},
        **{code: {"description": "See the problem details.", "content": {"application/problem+json": {
            "schema": {"$ref": "#/components/schemas/Problem"}}}} for code in ("400", "401", "503")}},
}}}

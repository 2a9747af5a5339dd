"""Plain HTTP over the audit trail: `GET /v1/audit`. Translation only (who sees what: `service.audit`)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify, request

from tasks_backend.errors import BadRequest
from tasks_backend.service.audit import Audit, wire
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter

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
    try:
        limit = int(request.args.get("limit", "50"))
    except ValueError as exc:
        raise BadRequest("`limit` must be an integer.", extra={"errors": {"limit": ["must be an integer"]}}) from exc
    entries, cursor = _audit().query(g.principal, job=request.args.get("job") or None,
                                     principal=request.args.get("principal") or None,
                                     since=request.args.get("since") or None,
                                     cursor=request.args.get("cursor") or None, limit=limit)
    return jsonify({"entries": [wire(e) for e in entries], "nextCursor": cursor})

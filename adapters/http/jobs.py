"""Plain HTTP over the job service: `/v1/jobs` and `/v1/operations`. Translation only."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request, stream_with_context

from tasks_backend.access.auth import Principal
from tasks_backend.errors import BadRequest
from tasks_backend.model.domain import JobRecord, JobState, SubmitOutcome
from tasks_backend.model.timing import DELAY_MS, PRIORITY, RUN_AT, from_wire
from tasks_backend.model.wire import addressed, detailed, handle, wire_json
from tasks_backend.service.filters import parse_filter
from tasks_backend.service.jobs import JobService
from tasks_backend.service.questions import JobView
from tasks_backend.service.runtime import STREAM_BLOCK_MS, Runtime

from .. import body, sse
from ..protocol import Adapter
from . import webhooks
from .query import page_limit

bp = Blueprint("jobs", __name__, url_prefix="/v1")
ADAPTER = Adapter("http", bp)


def _service() -> JobService:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.service


def json_body() -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what is wrong with it."""
    return json_object(request.get_data(cache=True))


def json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequest("A JSON object body is required.")
    try:
        value = body.loads(raw)
    except (body.Unreadable, body.LoneSurrogate) as exc:
        raise BadRequest(str(exc)) from exc
    if not isinstance(value, dict):
        raise BadRequest("The body must be a JSON object.")
    return value


def _retry_after(record: JobRecord) -> str:
    return str(max(1, math.ceil(record.poll_ms / 1000)))


def handle_body(record: JobRecord, body: dict[str, Any] | None = None) -> tuple[bytes, list[tuple[str, str]]]:
    """A handle's JSON and its headers (`Retry-After` while the job is not finished).

    Straight to `wire_json`: this is the poll path, and Flask's jsonify costs several times more."""
    payload = wire_json(body if body is not None else detailed(record))
    return payload, ([] if record.terminal else [("Retry-After", _retry_after(record))])


def _handle_response(record: JobRecord, status: int) -> Response:
    return _view_response(JobView(record), status)


def _view_response(view: JobView, status: int) -> Response:
    payload, headers = view_body(view)
    return Response(payload, status=status, mimetype="application/json", headers=headers)


@bp.post("/jobs")
def submit() -> Response:
    payload, headers = submit_body(_service(), g.principal, request.get_data(cache=True),
                                   request.headers.get("Idempotency-Key"))
    return Response(payload, status=202, mimetype="application/json", headers=headers)


def submit_body(service: JobService, principal: Principal, raw: bytes,
                idempotency_key: str | None) -> tuple[bytes, list[tuple[str, str]]]:
    """Submit from a request body; the 202 answer's JSON and headers (the WSGI fast path calls this too)."""
    body = json_object(raw)
    operation = body.get("operation")
    if not isinstance(operation, str) or not operation:
        raise BadRequest("`operation` must name a registered operation.")
    unknown = set(body) - {"operation", "params", RUN_AT, DELAY_MS, PRIORITY, "webhook"}
    if unknown:
        raise BadRequest(f"Unknown fields: {sorted(unknown)}.")
    timing = from_wire(body)
    webhook = webhooks.checked(body.get("webhook"), service.settings)  # refused before anything is done
    record, outcome = service.submit(principal, operation, body.get("params"), idempotency_key=idempotency_key,
                                     run_at_ms=timing.run_at_ms, delay_ms=timing.delay_ms, priority=timing.priority)
    if webhook is not None:
        webhooks.subscribe(service.store, record, webhook, outcome)
    payload, headers = handle_body(record, handle(record))
    headers.append(("Location", f"/v1/jobs/{record.id}"))
    if outcome is SubmitOutcome.EXISTING:
        headers.append(("Idempotent-Replayed", "true"))
    return payload, headers


@bp.get("/jobs")
def list_jobs() -> Response:
    limit = page_limit()
    # Every other query field is a filter (`service.filters`); they combine, and an unknown one is a 400.
    flt = parse_filter({k: v for k, v in request.args.items() if k not in ("limit", "cursor")}, g.principal)
    records, cursor = _service().find(g.principal, flt, limit=limit, cursor=request.args.get("cursor") or None)
    return jsonify({"jobs": [handle(r) | {"operation": r.operation} | ({"schedule": r.schedule} if r.schedule else {})
                             | ({"owner": r.owner} if r.owner != g.principal.name else {})
                             for r in records], "nextCursor": cursor})


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    return _view_response(_service().read(g.principal, job_id), 200)


def view_body(view: JobView) -> tuple[bytes, list[tuple[str, str]]]:
    """`handle_body` of the job as the caller sees it (an addressee: `addressed`); the fast path calls this too."""
    return handle_body(view.record, addressed(view.record) if view.limited else None)


@bp.get("/jobs/<job_id>/result")
def get_result(job_id: str) -> Response:
    record = _service().get(g.principal, job_id)
    if record.state is JobState.COMPLETED:
        return jsonify(record.result)
    return _handle_response(record, 409 if record.terminal else 202)


@bp.post("/jobs/<job_id>/cancel")
def cancel(job_id: str) -> Response:
    return _handle_response(_service().cancel(g.principal, job_id), 202)


@bp.post("/jobs/<job_id>/input")
def provide_input(job_id: str) -> Response:
    body = json_body()
    record = _service().provide_input(g.principal, job_id, body.get("inputResponses"))
    return _view_response(_service().questions.seen_by(g.principal, record), 202)


@bp.get("/jobs/<job_id>/events")
def events(job_id: str) -> Response:
    """Server-sent events: one `handle` event per change, until terminal."""
    return event_stream(g.principal, job_id)


def event_stream(principal: Principal, job_id: str) -> Response:
    """A job's changes as server-sent events (the API's stream and the web page's, framed here only).

    A stream lasts at most `sse_max_s` (so a sync worker is never held for a day); the client
    reconnects with `Last-Event-ID` and resumes where it left off, as EventSource does by itself.
    """
    runtime: Runtime = current_app.extensions["tasks_backend"]
    after = request.headers.get("Last-Event-ID") or request.args.get("after") or "0-0"
    if not _is_stream_id(after):
        raise BadRequest("`Last-Event-ID` is not an event id.")
    # Whoever may read the job follows it, each change as the caller may see it (an addressee: `addressed`).
    stream = runtime.streaming().watch_view(principal, job_id, after=after, max_s=runtime.settings.sse_max_s,
                                            block_ms=STREAM_BLOCK_MS)
    first = next(stream)  # who may read it is checked here, before any byte of the stream is sent

    def generate() -> Iterator[str]:
        yield sse.frame(retry_ms=1000)
        for event_id, view in _chain(first, stream):
            body = addressed(view.record) if view.limited else detailed(view.record)
            yield sse.json_frame(body, event="handle", event_id=event_id)

    # Counted as one of the principal's open streams until it ends or the client goes away.
    return sse.response(stream_with_context(runtime.limits().hold(principal, generate())))


def _chain(first: tuple[str, JobView], rest: Iterator[tuple[str, JobView]]) -> Iterator[tuple[str, JobView]]:
    yield first
    yield from rest


_MAX_STREAM_PART = 2**64 - 1


def _is_stream_id(value: str) -> bool:
    """A Redis stream id (`<ms>-<seq>`, each an unsigned 64-bit integer), as XREAD takes it."""
    ms, sep, seq = value.partition("-")
    return (bool(sep) and all(part.isascii() and part.isdigit() and len(part) <= 20 for part in (ms, seq))
            and int(ms) <= _MAX_STREAM_PART and int(seq) <= _MAX_STREAM_PART)


@bp.get("/operations")
def operations() -> Response:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    settings = runtime.settings
    out = []
    for spec in runtime.registry:
        out.append({
            "name": spec.name,
            "description": spec.description,
            "paramsSchema": runtime.registry.json_schema(spec.name),
            "ttlMs": int(1000 * min(spec.ttl_s or settings.default_ttl_s, settings.max_ttl_s)),
            "pollIntervalMs": int(1000 * (spec.poll_interval_s or settings.default_poll_s)),
        })
    return jsonify({"operations": out})

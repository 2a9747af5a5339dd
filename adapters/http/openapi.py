"""`/openapi.json`: the HTTP API, with each operation's params schema from its marshmallow schema."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify

import tasks_backend
from tasks_backend.model.states import WIRE_STATUS
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter
from . import audit, remote_push, webhooks
from .operate import FILTER_PARAMETERS, operate_paths
from .questions import question_paths

bp = Blueprint("openapi", __name__)
ADAPTER = Adapter("openapi", bp, public_paths=frozenset({"/openapi.json"}))
#: The statuses a handle may show, in the state table's order.
WIRE_STATUSES = list(dict.fromkeys(WIRE_STATUS.values()))

_HANDLE = {
    "type": "object",
    "required": ["taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"],
    "properties": {
        "taskId": {"type": "string", "format": "uuid"},
        "status": {"type": "string", "enum": WIRE_STATUSES},
        "statusMessage": {"type": "string"},
        "createdAt": {"type": "string", "format": "date-time"},
        "lastUpdatedAt": {"type": "string", "format": "date-time"},
        "ttlMs": {"type": "integer"},
        "pollIntervalMs": {"type": "integer"},
        "operation": {"type": "string"},
        "progress": {"type": "object"},
        "result": {},
        "error": {"type": "object"},
        "inputRequests": {"type": "object"},
        "parentId": {"type": "string", "format": "uuid",
                     "description": "The job whose `ctx.spawn` started this one (children only)."},
        "priority": {"type": "integer", "minimum": 0, "maximum": 9},
        "runAt": {"type": "string", "format": "date-time"},
        "rerunOf": {"type": "string", "format": "uuid",
                    "description": "The failed or cancelled job this one reruns (reruns only)."},
        "answeredBy": {"type": "object", "description": "Per question key, who answered it (`by`) and when (`at`).",
                       "additionalProperties": {"type": "object", "properties": {
                           "by": {"type": "string"}, "at": {"type": "string", "format": "date-time"}}}},
        "owner": {"type": "string", "description": "Who asked (shown to someone a question is addressed to)."},
    },
}


_SCHEDULE_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
    "params": {"type": "object"},
    "cron": {"type": "string", "description": "Five fields, e.g. `*/5 * * * *`, in `timezone`."},
    "everySeconds": {"type": "integer", "minimum": 1, "maximum": 100_000_000},
    "timezone": {"type": "string", "description": "An IANA time zone name; default UTC."},
    "catchUp": {"enum": ["none", "latest", "all"], "description": "What ticks missed while nothing ran get."},
    "priority": {"type": "integer", "minimum": 0, "maximum": 9},
}
_SCHEDULE = {
    "type": "object",
    "required": ["name", "operation", "params", "timezone", "catchUp", "priority", "paused", "nextRunAt",
                 "lastRunAt", "lastJobId"],
    "properties": {**_SCHEDULE_FIELDS, "operation": {"type": "string"}, "paused": {"type": "boolean"},
                   "nextRunAt": {"type": "string", "format": "date-time"},
                   "lastRunAt": {"type": ["string", "null"], "format": "date-time"},
                   "lastJobId": {"type": ["string", "null"], "format": "uuid"}},
}


def _schedule_paths(operations: list[str]) -> dict[str, Any]:
    name = {"name": "name", "in": "path", "required": True, "schema": _SCHEDULE_FIELDS["name"]}
    body = {"type": "object", "required": ["name", "operation"], "additionalProperties": False,
            "properties": {**_SCHEDULE_FIELDS, "operation": {"enum": operations}},
            "oneOf": [{"required": ["cron"], "not": {"required": ["everySeconds"]}},
                      {"required": ["everySeconds"], "not": {"required": ["cron"]}}]}
    one = {**_answer("200", "The schedule", "Schedule"), **_errors("404")}
    return {
        "/v1/schedules": {
            "post": {"summary": "Define a recurring job", "requestBody": {
                "required": True, "content": {"application/json": {"schema": body}}},
                "responses": {**_answer("201", "Defined", "Schedule"),
                              **_answer("200", "Already defined so", "Schedule"),
                              **_errors("400", "409", "413", "422")}},
            "get": {"summary": "List your schedules, oldest first, a page at a time", "parameters": [
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"},
                 "description": "Opaque: the `nextCursor` of an earlier page; any other value is a 400."}],
                    "responses": {**_answer("200", "A page of your schedules", "ScheduleList"), **_errors("400")}}},
        "/v1/schedules/{name}": {
            "get": {"summary": "A schedule", "parameters": [name], "responses": one},
            "delete": {"summary": "Delete a schedule (the jobs it made stay)", "parameters": [name],
                       "responses": {"204": {"description": "Deleted"}, **_errors("404")}}},
        "/v1/schedules/{name}/pause": {"post": {"summary": "Pause a schedule", "parameters": [name],
                                                "responses": one}},
        "/v1/schedules/{name}/resume": {"post": {"summary": "Resume a schedule from its next tick",
                                                 "parameters": [name], "responses": one}},
    }


def _timing(ttl_ms: int) -> dict[str, Any]:
    """A submit's `runAt` or `delayMs` (not both: a 422) and `priority`; null is the same as leaving one out. A start
    past the job's retention is a 422 too."""
    return {
        "runAt": {"type": ["string", "null"], "format": "date-time",
                  "description": "Not before this time (RFC 3339); not with `delayMs`."},
        "delayMs": {"type": ["integer", "null"], "minimum": 0, "maximum": ttl_ms - 1,
                    "description": "Not before this many ms from now; not with `runAt`."},
        "priority": {"type": ["integer", "null"], "minimum": 0, "maximum": 9, "default": 5,
                     "description": "Among the caller's queued jobs, higher runs first."},
    }


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(status: str, description: str, schema: str | None = "Handle") -> dict[str, Any]:
    media = "application/problem+json" if schema == "Problem" else "application/json"
    body = {"content": {media: {"schema": _ref(schema)}}} if schema else {}
    return {status: {"description": description, **body}}


def _errors(*codes: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for code in ("401", *codes, "503"):
        out.update(_answer(code, "See the problem details.", "Problem"))
    return out


def build_spec(runtime: Runtime) -> dict[str, Any]:
    job_id = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
    submit_variants = []
    for spec in runtime.registry:
        params = runtime.registry.json_schema(spec.name)
        # `params` may be left out only when the operation needs none of them (an absent `params` is `{}`).
        required = ["operation", "params"] if params.get("required") else ["operation"]
        ttl_ms = int(1000 * min(spec.ttl_s or runtime.settings.default_ttl_s, runtime.settings.max_ttl_s))
        submit_variants.append({"type": "object", "required": required, "additionalProperties": False,
                                "properties": {"operation": {"const": spec.name}, "params": params,
                                               **_timing(ttl_ms), "webhook": webhooks.SUBMIT_FIELD}})
    webhook_paths, webhook_events = webhooks.openapi_parts(_errors("400", "422"))
    paths: dict[str, Any] = {
        "/v1/jobs": {
            "post": {"summary": "Submit a job", "parameters": [
                {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "maxLength": 255}}],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": {"oneOf": submit_variants}}}},
                "responses": {**_answer("202", "Accepted; poll the Location"), **_errors("400", "413", "422")}},
            "get": {"summary": "List your jobs (operators and admins: anyone's), newest first; filters combine",
                    "parameters": [*FILTER_PARAMETERS,
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"},
                 "description": "Opaque: the `nextCursor` of an earlier page; any other value is a 400."},
                ],
                "responses": {**_answer("200", "A page of jobs", "JobList"), **_errors("400", "404", "422")}},
        },
        "/v1/jobs/{job_id}": {"get": {"summary": "Poll a job", "parameters": [job_id],
                                      "responses": {**_answer("200", "The job"), **_errors("404")}}},
        "/v1/jobs/{job_id}/result": {"get": {
            "summary": "The result once completed", "parameters": [job_id],
            "responses": {"200": {"description": "The result"}, **_answer("202", "Not finished yet"),
                          **_answer("409", "Failed or cancelled"), **_errors("404")}}},
        "/v1/jobs/{job_id}/cancel": {"post": {"summary": "Cancel a job", "parameters": [job_id],
                                              "responses": {**_answer("202", "Cancelling"),
                                                            **_errors("404", "409")}}},
        "/v1/jobs/{job_id}/input": {"post": {
            "summary": "Answer a job's input requests", "parameters": [job_id],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["inputResponses"],
                "properties": {"inputResponses": {"type": "object", "minProperties": 1}}}}}},
            "responses": {**_answer("202", "Recorded"), **_errors("400", "404", "409", "422")}}},
        "/v1/jobs/{job_id}/events": {"get": {"summary": "Server-sent events of the job's changes",
                                             "parameters": [job_id],
                                             "responses": {"200": {"description": "text/event-stream"},
                                                           **_errors("404")}}},
        **operate_paths(job_id, _answer, _errors),
        **question_paths(job_id, _errors),
        **_schedule_paths([spec.name for spec in runtime.registry]),
        **webhook_paths,
        **audit.PATHS,
        **remote_push.openapi_paths(_errors("404")),
        "/v1/operations": {"get": {"summary": "Registered operations",
                                   "responses": {"200": {"description": "OK"}, **_errors()}}},
        "/healthz": {"get": {"summary": "Redis and broker reachability", "security": [],
                             "responses": {"200": {"description": "OK"}, "503": {"description": "Down"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics",
                             "responses": {"200": {"description": "OK"}, **_errors()}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "tasks-backend", "version": tasks_backend.__version__},
        "security": [{"bearer": []}],
        "paths": paths,
        "webhooks": webhook_events,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Handle": _HANDLE,
                "JobList": {"type": "object", "properties": {"jobs": {"type": "array", "items": _ref("Handle")},
                                                             "nextCursor": {"type": ["string", "null"]}}},
                "Schedule": _SCHEDULE,
                "ScheduleList": {"type": "object", "required": ["schedules"],
                                 "properties": {"schedules": {"type": "array", "items": _ref("Schedule")},
                                                "nextCursor": {"type": ["string", "null"]}}},
                "AuditEntry": audit.ENTRY_SCHEMA,
                "Problem": {"type": "object", "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                                                             "status": {"type": "integer"},
                                                             "detail": {"type": "string"}}},
            },
        },
    }


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(build_spec(current_app.extensions["tasks_backend"]))

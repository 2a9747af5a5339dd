"""Webhooks for plain-HTTP callers: `"webhook"` on `POST /v1/jobs`, the events it is sent (signed as the
Standard Webhooks specification says), and `/v1/webhook-secret`, where a caller reads or rotates its secret.

A webhook is a push subscription of its own format (`FORMAT`), kept and delivered like A2A's: the same
guard, owner fairness, order and retries (`tasks_backend.push`). Each POST is a JSON event,
`{"type": "job.<event>", "timestamp": <the change's time>, "data": <the job's handle, as GET /v1/jobs/{id}>}`,
signed with the owner's secret (`tasks_backend.push.secrets`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from tasks_backend.config import Settings
from tasks_backend.errors import BadRequest, InvalidParams
from tasks_backend.model.domain import JobRecord, SubmitOutcome, rfc3339
from tasks_backend.model.states import WIRE_STATUS
from tasks_backend.model.wire import detailed
from tasks_backend.push.secrets import DEFAULT_GRACE_S, MAX_GRACE_S, SecretState, WebhookSecrets, signature
from tasks_backend.push.subscriptions import PushStore, TargetRefused, resolve_target
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.jobs import RedisStore

from .. import body as json_body
from ..protocol import Adapter

#: The name webhooks are stored under (their format, for the delivery loop).
FORMAT = "webhook"
#: The one webhook a job has (a retried submit replaces nothing).
CONFIG_ID = "webhook"
#: Event names a caller may ask for; a change of a job that is not finished, nor waiting for input, is `progress`.
EVENTS = ("completed", "failed", "cancelled", "input_required", "progress")
DEFAULT_EVENTS = ("completed", "failed", "cancelled", "input_required")
MAX_URL_LENGTH = 2048
_URL_CHARS = re.compile(r"[\x21-\x7e]+")

bp = Blueprint("webhooks", __name__, url_prefix="/v1")


def event_name(record: JobRecord) -> str:
    status = WIRE_STATUS[record.state]
    return "progress" if status == "working" else status


def _refused(field: str, problem: str) -> InvalidParams:
    return InvalidParams(f"`{field}`: {problem}", extra={"errors": {field: [problem]}})


def checked(value: Any, settings: Settings) -> dict[str, Any] | None:
    """The `webhook` of a submit as stored (`url`, `events`), or a 422 naming the field; None when absent.

    The target guard runs here, before anything is done, as it does again on every delivery."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _refused("webhook", "must be an object with `url` and optional `events`.")
    unknown = set(value) - {"url", "events"}
    if unknown:
        raise _refused("webhook", f"unknown fields {', '.join(sorted(unknown))}; a webhook has `url` and `events`.")
    url = value.get("url")
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH or not _URL_CHARS.fullmatch(url):
        raise _refused("webhook.url", f"must be an http or https URL of at most {MAX_URL_LENGTH} ASCII "
                                      "characters without spaces.")
    events = value.get("events", list(DEFAULT_EVENTS))
    names = ", ".join(EVENTS)
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise _refused("webhook.events", f"must be a non-empty list of event names among {names}.")
    unknown_events = sorted(set(events) - set(EVENTS))
    if unknown_events:
        raise _refused("webhook.events", f"unknown events {', '.join(unknown_events)}; the events are {names}.")
    # Last: it asks DNS.
    try:
        resolve_target(url, settings.push_allow_private)
    except TargetRefused as exc:
        raise _refused("webhook.url", exc.detail) from exc
    return {"id": CONFIG_ID, "url": url, "events": [e for e in EVENTS if e in events]}


def subscribe(store: RedisStore, record: JobRecord, config: dict[str, Any], outcome: SubmitOutcome) -> None:
    """Store a submitted job's webhook, delivered from the job's first change; its owner's secret is made now
    if there is none (and kept alive as long as this job). A retried submit that finds its job's webhook
    stored leaves it, so nothing is delivered twice because of the retry."""
    push = PushStore(store)
    WebhookSecrets(store).current(record.owner)
    if outcome is SubmitOutcome.EXISTING and push.get(record.id, CONFIG_ID) is not None:
        return
    push.put(record, config, after="0-0", format=FORMAT)


class WebhookFormat:
    """Standard Webhooks deliveries: one signed JSON event per change the subscription asked for."""

    def bodies(self, record: JobRecord, meta: Mapping[str, str]) -> list[dict[str, Any]]:
        return [{"type": f"job.{event_name(record)}", "timestamp": rfc3339(record.updated_ms),
                 "data": detailed(record)}]

    def headers(self, subscription: Mapping[str, Any]) -> dict[str, str]:
        return {}

    def posts(self, subscription: Mapping[str, Any], record: JobRecord, meta: Mapping[str, str], *,
              message_id: str, store: RedisStore) -> list[tuple[bytes, dict[str, str]]]:
        if event_name(record) not in subscription.get("events", DEFAULT_EVENTS):
            return []
        data = json.dumps(self.bodies(record, meta)[0], separators=(",", ":")).encode()
        msg_id = "msg_" + hashlib.sha256(message_id.encode()).hexdigest()[:32]
        timestamp = int(time.time())
        signed = " ".join(signature(secret, msg_id, timestamp, data)
                          for secret in WebhookSecrets(store).signing(record.owner))
        return [(data, {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": signed})]


# -- /v1/webhook-secret ----------------------------------------------------------------------------
def _secrets() -> WebhookSecrets:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return WebhookSecrets(runtime.store)


def _answer(state: SecretState) -> Response:
    out: dict[str, Any] = {"secret": state.current}
    if state.previous and state.previous_until_ms is not None:
        out["previousValidUntil"] = rfc3339(state.previous_until_ms)
    response = jsonify(out)
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/webhook-secret")
def get_secret() -> Response:
    """The caller's own signing secret, made now if it has none."""
    return _answer(_secrets().current(g.principal.name))


@bp.post("/webhook-secret")
def rotate_secret() -> Response:
    """A new secret for the caller; the replaced one also signs for `graceSeconds` (default a day)."""
    raw = request.get_data(cache=True)
    options: Any = {}
    if raw:
        try:
            options = json_body.loads(raw)
        except (json_body.Unreadable, json_body.LoneSurrogate) as exc:
            raise BadRequest(str(exc)) from exc
    if not isinstance(options, dict) or set(options) - {"graceSeconds"}:
        raise BadRequest("The body, if any, must be a JSON object with only `graceSeconds`.")
    grace = options.get("graceSeconds", DEFAULT_GRACE_S)
    # JSON Schema's integer: 60.0 is one.
    whole = isinstance(grace, int) or (isinstance(grace, float) and grace.is_integer())
    if isinstance(grace, bool) or not whole or not 0 <= grace <= MAX_GRACE_S:
        raise _refused("graceSeconds", f"must be an integer from 0 to {MAX_GRACE_S}.")
    return _answer(_secrets().rotate(g.principal.name, int(grace)))


# -- its description in /openapi.json -------------------------------------------------------------------------
#: The `webhook` field of a submit.
SUBMIT_FIELD: dict[str, Any] = {
    "type": ["object", "null"], "required": ["url"], "additionalProperties": False,
    "description": "POST the job's changes here, signed as Standard Webhooks says (see `webhooks`).",
    "properties": {"url": {"type": "string", "format": "uri", "pattern": "^https?://", "maxLength": MAX_URL_LENGTH},
                   "events": {"type": "array", "minItems": 1, "items": {"enum": list(EVENTS)},
                              "default": list(DEFAULT_EVENTS)}}}
_SECRET = {"type": "object", "required": ["secret"], "properties": {
    "secret": {"type": "string", "pattern": "^whsec_"},
    "previousValidUntil": {"type": "string", "format": "date-time",
                           "description": "Until then each delivery is signed with the replaced secret too."}}}
_EVENT = {"type": "object", "required": ["type", "timestamp", "data"], "properties": {
    "type": {"enum": [f"job.{e}" for e in EVENTS]},
    "timestamp": {"type": "string", "format": "date-time", "description": "When the job changed."},
    "data": {"$ref": "#/components/schemas/Handle"}}}
_SIGNED = [{"name": name, "in": "header", "required": True, "schema": {"type": "string"}, "description": text}
           for name, text in (("webhook-id", "The same on every attempt at one change."),
                              ("webhook-timestamp", "Unix seconds of this attempt."),
                              ("webhook-signature", "`v1,<base64 HMAC-SHA256>`, space-separated during a rotation."))]


def openapi_parts(problem: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, webhooks) for `/openapi.json`; `problem`: the document's error answers."""
    answer = {"200": {"description": "Your signing secret", "content": {"application/json": {"schema": _SECRET}}}}
    rotate_body = {"type": "object", "additionalProperties": False, "properties": {
        "graceSeconds": {"type": "integer", "minimum": 0, "maximum": MAX_GRACE_S, "default": DEFAULT_GRACE_S}}}
    paths = {"/v1/webhook-secret": {
        "get": {"summary": "Your webhook signing secret (made on first use)", "responses": {**answer, **problem}},
        "post": {"summary": "Rotate your webhook signing secret",
                 "requestBody": {"required": False, "content": {"application/json": {"schema": rotate_body}}},
                 "responses": {**answer, **problem}}}}
    hooks = {"jobEvent": {"post": {"summary": "A change of a job submitted with a `webhook`", "parameters": _SIGNED,
                                   "requestBody": {"content": {"application/json": {"schema": _EVENT}}},
                                   "responses": {"2XX": {"description": "Received; anything else is retried"}}}}}
    return paths, hooks


ADAPTER = Adapter(FORMAT, bp, push_format=WebhookFormat())

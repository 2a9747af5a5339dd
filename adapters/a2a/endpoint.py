"""A2A 1.0 over the job service: the agent card and JSON-RPC at `/a2a`. Translation only.

Every registered operation is a skill. A message names its operation with a data part
`{"operation": ..., "params": {...}}`; a message to an existing task answers its open input requests
with a data part `{"inputResponses": {...}}`. Wire forms are in `wire`; semantics in the service.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from tasks_backend import __version__
from tasks_backend.access.auth import Principal
from tasks_backend.model.wire import wire_json
from tasks_backend.service.runtime import Runtime

from .. import jsonrpc
from ..jsonrpc import RpcError
from ..protocol import Adapter
from . import wire
from .codes import CODES, VERSION_NOT_SUPPORTED, a2a_error
from .methods import METHODS, A2AScope
from .push import A2APushFormat, Contexts

bp = Blueprint("a2a", __name__)

AGENT_CARD_PATH = "/.well-known/agent-card.json"
RPC_PATH = "/a2a"
PROTOCOL_VERSION = "1.0"

ADAPTER = Adapter("a2a", bp, rpc_paths=frozenset({RPC_PATH}), codes=CODES,
                  public_paths=frozenset({AGENT_CARD_PATH}), push_format=A2APushFormat())


# -- agent card ----------------------------------------------------------------------------
@bp.get(AGENT_CARD_PATH)
def agent_card() -> Response:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    base = runtime.settings.public_url.rstrip("/")  # never the request's Host header
    skills = []
    for spec in runtime.registry:
        schema = runtime.registry.json_schema(spec.name)
        skills.append({
            "id": spec.name, "name": spec.name,
            "description": f"{_sentence(spec.description or spec.name)} Send a data part "
                           f'{{"operation": "{spec.name}", "params": {{...}}}}; params schema: '
                           f'{json.dumps(schema, separators=(",", ":"))}',
            "tags": ["job", spec.name.split(".", 1)[0]],
            "examples": [json.dumps({"operation": spec.name, "params": wire.example(schema)})],
            "inputModes": ["application/json"], "outputModes": ["application/json"],
        })
    card = {
        "name": "tasks-backend",
        "description": "Runs long jobs for the caller: each skill is an operation that becomes a task.",
        "supportedInterfaces": [{"url": base + RPC_PATH, "protocolBinding": "JSONRPC",
                                 "protocolVersion": PROTOCOL_VERSION}],
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": True, "extendedAgentCard": False},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    }
    return jsonify(card)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


# -- JSON-RPC --------------------------------------------------------------------------------
@bp.post(RPC_PATH)
def rpc() -> Response:
    version = request.headers.get("A2A-Version") or request.args.get("A2A-Version") or ""
    answer = handle_post(request.get_data(cache=True), version, g.principal, current_app.extensions["tasks_backend"])
    assert answer is not None
    return answer if isinstance(answer, Response) else reply(answer)


def handle_post(raw: bytes, version: str, principal: Principal, runtime: Runtime,
                only: Callable[[Any], bool] | None = None) -> dict[str, Any] | Response | None:
    """The JSON-RPC reply to one POSTed message (a Response for a stream); Flask-free, so the WSGI fast path
    answers the hot calls with it. `version` is the request's A2A-Version. With `only`, a message it does not
    accept (or that is not JSON) is left alone (None): nothing has been done yet."""
    request_id: jsonrpc.Id = None
    try:
        body = jsonrpc.decode(raw)
    except RpcError as exc:
        if only is not None:
            return None
        return a2a_error(exc.request_id, exc)
    if only is not None and not only(body):
        return None
    try:
        # An invalid request still answers with its id when the id itself was readable (JSON-RPC 2.0 §5).
        request_id = jsonrpc.readable_id(body)
        req = jsonrpc.request_from(body)
        _check_version(version)
        method = METHODS.get(req.method)
        if method is None:
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {req.method}")
        call = A2AScope(principal, runtime.service, runtime.push(), runtime, Contexts(runtime.store))
        result = method(call, req.params, request_id)
    except Exception as exc:
        if isinstance(exc, RpcError) and exc.request_id is not None:
            request_id = exc.request_id
        return a2a_error(request_id, exc)
    if isinstance(result, Response):
        return result
    return jsonrpc.success(request_id, result)


def payload(body: dict[str, Any]) -> bytes:
    """A reply's bytes, the same on both paths."""
    return wire_json(body)


def reply(body: dict[str, Any]) -> Response:
    # JSON-RPC errors travel with HTTP 200; the SDK client treats any other status as transport failure.
    return Response(payload(body), mimetype="application/json")


def _check_version(raw: str) -> None:
    # [spec] §3.6: an absent version means 0.3, which this server does not speak.
    major, _, rest = raw.strip().partition(".")
    if major != "1" or rest.split(".", 1)[0] != "0":
        raise RpcError(VERSION_NOT_SUPPORTED, f"A2A version {raw or '0.3'!r} is not supported; "
                       f"send `A2A-Version: {PROTOCOL_VERSION}`.")


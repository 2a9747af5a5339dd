"""Each adapter owns its protocol: its codes (one table per adapter, covering every error of the core), and
its place in the app, found from its module alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import adapters
from adapters import jsonrpc, problems, protocol
from adapters.a2a import codes as a2a
from adapters.app import create_app
from adapters.mcp import shared as mcp_shared
from tasks_backend import errors
from tasks_backend.service.runtime import Runtime

EVERY_ERROR = errors.error_classes()


@pytest.mark.parametrize("table", [problems.HTTP_STATUS, mcp_shared.CODES, a2a.CODES], ids=["http", "mcp", "a2a"])
def test_every_error_has_a_code_in_every_protocol(table: jsonrpc.Codes) -> None:
    for cls in EVERY_ERROR:
        assert errors.most_specific(table, cls()) is not None, cls


def test_the_codes_each_protocol_answers_with() -> None:
    assert problems.status_for(errors.JobNotCancelable()) == 409
    assert problems.status_for(errors.UnknownOperation()) == 422
    assert problems.status_for(ValueError()) == 500
    assert errors.most_specific(mcp_shared.CODES, errors.JobNotFound()) == jsonrpc.INVALID_PARAMS
    assert errors.most_specific(a2a.CODES, errors.JobNotFound()) == a2a.TASK_NOT_FOUND
    assert errors.most_specific(a2a.CODES, errors.NotWaitingForInput()) == a2a.UNSUPPORTED_OPERATION
    assert errors.most_specific(a2a.CODES, errors.JobNotCancelable()) == a2a.TASK_NOT_CANCELABLE


def test_the_app_serves_every_adapter_module() -> None:
    names = {a.name for a in protocol.registered()}
    assert names == {"http", "mcp", "a2a", "observability", "openapi", "operate", "schedules", "ui", "audit",
                     "webhook", "questions", "remote_push"}
    assert protocol.rpc_codes() == {"/mcp": mcp_shared.CODES, "/a2a": a2a.CODES}
    # `/v1/remote-push` is known by the token a job gave the remote agent, not by a bearer token.
    assert protocol.public_paths() == {"/healthz", "/readyz", "/openapi.json", "/.well-known/agent-card.json",
                                       "/v1/remote-push"}


ECHO = '''
from flask import Blueprint, jsonify

from adapters import jsonrpc
from adapters.protocol import Adapter

bp = Blueprint("echo", __name__)


@bp.get("/echo/card")
def card():
    return jsonify({"card": True})


@bp.post("/echo/rpc")
def rpc():
    return jsonify(jsonrpc.success(1, {"echo": True}))


ADAPTER = Adapter("echo", bp, rpc_paths=frozenset({"/echo/rpc"}), codes={**jsonrpc.CODES},
                  public_paths=frozenset({"/echo/card"}))
'''


def _forget_adapters() -> None:
    for cached in (protocol.registered, protocol.public_paths, protocol.rpc_codes, protocol.session_paths):
        cached.cache_clear()


def test_a_new_protocol_is_a_new_module_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         runtime: Runtime) -> None:
    (tmp_path / "zz_echo.py").write_text(ECHO)
    monkeypatch.setattr(adapters, "__path__", [*adapters.__path__, str(tmp_path)])
    _forget_adapters()
    try:
        client = create_app(runtime=runtime).test_client()
        assert client.get("/echo/card").get_json() == {"card": True}  # its public path needs no token
        refused = client.post("/echo/rpc", json={})  # its JSON-RPC endpoint is refused in JSON-RPC
        assert refused.status_code == 401 and refused.get_json()["error"]["code"] == -32001
        answered = client.post("/echo/rpc", json={}, headers={"Authorization": "Bearer alice-token"})
        assert answered.get_json()["result"] == {"echo": True}
    finally:
        monkeypatch.undo()
        sys.modules.pop("adapters.zz_echo", None)
        _forget_adapters()
    assert "echo" not in {a.name for a in protocol.registered()}

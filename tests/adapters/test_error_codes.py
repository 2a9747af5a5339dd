"""Each adapter owns its protocol's codes: one table per adapter, covering every error of the core."""

from __future__ import annotations

import pytest

from adapters import a2a, jsonrpc, mcp_tools, problems, protocol
from tasks_backend import errors

EVERY_ERROR = errors.error_classes()


@pytest.mark.parametrize("table", [problems.HTTP_STATUS, mcp_tools.CODES, a2a.CODES], ids=["http", "mcp", "a2a"])
def test_every_error_has_a_code_in_every_protocol(table: jsonrpc.Codes) -> None:
    for cls in EVERY_ERROR:
        assert errors.most_specific(table, cls()) is not None, cls


def test_the_codes_each_protocol_answers_with() -> None:
    assert problems.status_for(errors.JobNotCancelable()) == 409
    assert problems.status_for(errors.UnknownOperation()) == 422
    assert problems.status_for(ValueError()) == 500
    assert errors.most_specific(mcp_tools.CODES, errors.JobNotFound()) == jsonrpc.INVALID_PARAMS
    assert errors.most_specific(a2a.CODES, errors.JobNotFound()) == a2a.TASK_NOT_FOUND
    assert errors.most_specific(a2a.CODES, errors.NotWaitingForInput()) == a2a.UNSUPPORTED_OPERATION
    assert errors.most_specific(a2a.CODES, errors.JobNotCancelable()) == a2a.TASK_NOT_CANCELABLE


def test_the_app_serves_every_adapter_module() -> None:
    names = {a.name for a in protocol.registered()}
    assert names == {"http", "mcp", "a2a", "observability", "openapi", "ui"}
    assert protocol.rpc_codes() == {"/mcp": mcp_tools.CODES, "/a2a": a2a.CODES}
    assert protocol.public_paths() == {"/healthz", "/readyz", "/openapi.json", "/.well-known/agent-card.json"}

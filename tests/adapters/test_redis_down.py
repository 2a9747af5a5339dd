"""Redis unreachable: every protocol answers "try again later" quickly (503 / an error object), never a 500."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.app import create_app
from tasks_backend.devtools.embedded import free_port
from tests.conftest import ALICE, make_settings

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


@pytest.fixture(scope="module")
def stalled_port() -> Iterator[int]:
    """A port that accepts connections and never answers: a Redis that hangs, not one that is gone."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for sock in [*held, server]:
        sock.close()


@pytest.fixture(scope="module", params=["refused", "stalled"])
def down(request: pytest.FixtureRequest) -> Any:
    """The app pointed at a port where no Redis listens, or where one hangs."""
    port = free_port() if request.param == "refused" else request.getfixturevalue("stalled_port")
    return create_app(make_settings(f"redis://127.0.0.1:{port}", redis_socket_timeout_s=0.5)).test_client()


#: A job no one made (fixed: parallel test runs must collect the same test ids).
MISSING = "e9d4b7a2-61c3-4f85-8e0d-3a5c1b7f2d69"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/jobs", {"operation": "test.noop", "params": {}}),
    ("GET", f"/v1/jobs/{MISSING}", None),
    ("GET", f"/v1/jobs/{MISSING}/result", None),
    ("POST", f"/v1/jobs/{MISSING}/cancel", None),
    ("GET", "/v1/jobs", None),
])
def test_http_answers_503_with_retry_after(down: Any, method: str, path: str, body: Any) -> None:
    started = time.monotonic()
    response = down.open(path, method=method, json=body, headers=ALICE)
    assert response.status_code == 503 and response.headers["Retry-After"]
    assert response.mimetype == "application/problem+json"
    assert time.monotonic() - started < 5


def test_mcp_answers_an_error_not_a_500(down: Any) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test.noop", "arguments": {}, "_meta": MODERN}}
    response = down.post("/mcp", json=call, headers={**ALICE, "MCP-Protocol-Version": "2026-07-28",
                                                     "Mcp-Method": "tools/call", "Mcp-Name": "test.noop"})
    assert response.status_code == 503 and response.headers["Retry-After"]
    assert response.get_json()["error"]["code"] == -32603


def test_a2a_answers_an_error_not_a_500(down: Any) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": str(uuid.uuid4())}}
    response = down.post("/a2a", json=call, headers={**ALICE, "A2A-Version": "1.0"})
    assert response.status_code < 500
    assert response.get_json()["error"]["code"] == -32603


def test_health_says_redis_is_down(down: Any) -> None:
    assert down.get("/healthz").status_code == 503
    assert "redis" in down.get("/readyz").get_json()["failing"]

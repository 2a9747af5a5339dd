"""Raw JSON-RPC helpers for the MCP tests (the client scripts beside this file use real clients)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS = "io.modelcontextprotocol/tasks"
IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"


def modern_meta(tasks: bool = True) -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {}}


class Modern:
    """A 2026-07-28 caller: every request carries its version and capabilities in `_meta`."""

    def __init__(self, http: httpx.Client, token: str, tasks: bool = True) -> None:
        self.http, self.token, self.tasks, self.next_id = http, token, tasks, 0

    def post(self, method: str, params: dict[str, Any] | None = None, *, meta: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method,
                "params": {**(params or {}), "_meta": {**modern_meta(self.tasks), **(meta or {})}}}
        return self.http.post("/mcp", json=body, headers={
            "Authorization": f"Bearer {self.token}", "MCP-Protocol-Version": MODERN, "Mcp-Method": method,
            "Accept": "application/json, text/event-stream", **(headers or {})})

    def result(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        response = self.post(method, params, **kw)
        assert response.status_code == 200, response.text
        body = response.json()
        assert "result" in body, body
        return body["result"]

    def error(self, method: str, params: dict[str, Any] | None = None, *, status: int = 400,
              **kw: Any) -> dict[str, Any]:
        response = self.post(method, params, **kw)
        assert response.status_code == status, response.text
        body = response.json()
        assert "error" in body, body
        return body["error"]


class Legacy:
    """A 2025-11-25 caller: `initialize`, then the session id and version header on every request."""

    def __init__(self, http: httpx.Client, token: str) -> None:
        self.http, self.token, self.next_id = http, token, 0
        self.session: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.token}", "Accept": "application/json, text/event-stream"}
        if self.session:
            out |= {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": LEGACY}
        return out

    def initialize(self, version: str = LEGACY) -> dict[str, Any]:
        response = self.post("initialize", {"protocolVersion": version, "capabilities": {"elicitation": {}},
                                            "clientInfo": {"name": "raw", "version": "0"}})
        assert response.status_code == 200, response.text
        self.session = response.headers["Mcp-Session-Id"]
        self.http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        return response.json()["result"]

    def post(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        return self.http.post("/mcp", json=body, headers=self.headers)

    def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.post(method, params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert "result" in body, body
        return body["result"]

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.post(method, params)
        assert response.status_code == 200, response.text  # 2025 clients read errors only from a 200
        body = response.json()
        assert "error" in body, body
        return body["error"]


def sse_messages(response: httpx.Response) -> Iterator[tuple[str | None, dict[str, Any] | None]]:
    """(event id, JSON-RPC message or None for an empty event) for each event of a streamed response."""
    event_id: str | None = None
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data or event_id:
                text = "\n".join(data)
                yield event_id, (json.loads(text) if text else None)
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def await_result(http: httpx.Client, caller: Legacy, task_id: str, request_id: int,
                 answer: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Wait on `tasks/result` over SSE as `caller`, answering each `elicitation/create` asked on the stream with
    `answer`: (the requests asked, the final reply)."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tasks/result", "params": {"taskId": task_id}}
    asked: list[dict[str, Any]] = []
    with http.stream("POST", "/mcp", json=body, headers=caller.headers, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream"), response.read()
        for _, message in sse_messages(response):
            if message is not None and message.get("method") == "elicitation/create":
                asked.append(message)
                reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                assert http.post("/mcp", json=reply, headers=caller.headers).status_code == 202
            elif message is not None and ("result" in message or "error" in message):
                return asked, message
    return asked, None

"""Property-based fuzz of `/mcp` and `/a2a` over real HTTP: JSON-RPC envelopes that are nearly right (known
and made-up methods, random params, odd ids, both MCP revisions' headers), random JSON and random bytes.
Every answer is below 500, and every answer with a body is one well-formed JSON-RPC response.

Deterministic (`derandomize`) and bounded, so CI sees the same cases every run."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapters.mcp.clients.rpc import LEGACY, MODERN, modern_meta

MCP_METHODS = ["initialize", "server/discover", "tools/list", "tools/call", "tasks/get", "tasks/update",
               "tasks/cancel", "tasks/list", "tasks/result", "subscriptions/listen", "ping",
               "notifications/initialized", "resources/read", "prompts/get"]
A2A_METHODS = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
               "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
               "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard"]
KEYS = ["name", "arguments", "taskId", "id", "message", "parts", "data", "operation", "params", "contextId",
        "configuration", "returnImmediately", "pageToken", "pageSize", "cursor", "inputResponses", "_meta",
        "protocolVersion", "capabilities", "url", "metadata", "historyLength", "status"]
OPERATIONS = ["test.noop", "demo.fail", "demo.export", "no.such", ""]

SETTINGS = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
           | st.text(max_size=12) | st.sampled_from(OPERATIONS) | st.just("\ud800") | st.uuids().map(str))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=5),
                           max_leaves=20)
ids = st.integers(-2**63, 2**63) | st.text(max_size=8) | st.none() | st.booleans() | st.floats(allow_nan=False)


def envelopes(methods: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    params = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5)
    return st.fixed_dictionaries(
        {"jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0"]),
         "method": st.sampled_from(methods) | st.text(max_size=10)},
        optional={"id": ids, "params": params | json_values}).map(_with_meta_sometimes)


def _with_meta_sometimes(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("params")
    if isinstance(params, dict) and "_meta" in params and not isinstance(params["_meta"], dict):
        params["_meta"] = modern_meta()  # half the time a valid 2026 envelope, so the methods are reached
    return body


bodies = (envelopes(MCP_METHODS + A2A_METHODS).map(lambda b: json.dumps(b).encode())
          | json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=64))
mcp_headers = st.sampled_from([
    {"MCP-Protocol-Version": MODERN},
    {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": "fuzz-session"},
    {},
    {"MCP-Protocol-Version": "1999-01-01"},
])
a2a_headers = st.sampled_from([{"A2A-Version": "1.0"}, {}, {"A2A-Version": "0.3"}])


def check_answer(response: httpx.Response) -> None:
    assert response.status_code < 500, response.read()[:500]
    content_type = response.headers.get("Content-Type", "")
    if response.status_code == 202 and not response.read():
        assert "text/html" not in content_type
        return
    if content_type.startswith("text/event-stream"):
        frame = next(line for line in response.iter_lines() if line.startswith("data:"))
        message = json.loads(frame[5:])
    else:
        assert content_type.startswith("application/json"), (response.status_code, content_type)
        message = json.loads(response.read())
    assert message["jsonrpc"] == "2.0" and "id" in message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        assert isinstance(message["error"]["code"], int) and isinstance(message["error"]["message"], str)


def post(http: httpx.Client, path: str, raw: bytes, headers: dict[str, str]) -> None:
    request_headers = {"Authorization": "Bearer alice-token", "Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream", **headers}
    with http.stream("POST", path, content=raw, headers=request_headers) as response:
        check_answer(response)


@pytest.mark.timeout(240)
def test_mcp_answers_every_body_with_well_formed_json_rpc(http: httpx.Client) -> None:
    @SETTINGS
    @given(raw=bodies, headers=mcp_headers)
    def probe(raw: bytes, headers: dict[str, str]) -> None:
        post(http, "/mcp", raw, headers)

    probe()


@pytest.mark.timeout(240)
def test_a2a_answers_every_body_with_well_formed_json_rpc(http: httpx.Client) -> None:
    @SETTINGS
    @given(raw=bodies, headers=a2a_headers)
    def probe(raw: bytes, headers: dict[str, str]) -> None:
        post(http, "/a2a", raw, headers)

    probe()

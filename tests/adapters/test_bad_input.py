"""A caller's mistake is a 4xx problem or the right JSON-RPC error, never a 500, and nothing is created first.

Each case is sent over real HTTP as raw bytes: `"\\ud800"` is a lone UTF-16 surrogate that JSON allows and
no UTF-8 encoder (Redis's client, the answer's) can write."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import pytest

from tests.adapters.mcp.clients.rpc import IDEMPOTENCY_META, MODERN, Legacy, modern_meta
from tests.conftest import bearer

LONE = "\ud800"
DEEP = b"[" * 1000 + b"]" * 1000
A2A = {"A2A-Version": "1.0"}
MCP = {"MCP-Protocol-Version": MODERN, "Accept": "application/json, text/event-stream"}


def post(http: httpx.Client, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # ensure_ascii: "\ud800" as an escape
    return http.post(path, content=raw, headers={"Content-Type": "application/json", **headers})


def a2a_send(message: dict[str, Any], **params: Any) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
               "parts": [{"data": {"operation": "test.noop", "params": {}}}], **message}
    return {"jsonrpc": "2.0", "id": 7, "method": "SendMessage",
            "params": {"message": message, "configuration": {"returnImmediately": True}, **params}}


def a2a_tasks(http: httpx.Client, token: str) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    return len(post(http, "/a2a", body, {**bearer(token), **A2A}).json()["result"]["tasks"])


def http_jobs(http: httpx.Client, token: str) -> int:
    return len(http.get("/v1/jobs", headers=bearer(token)).json()["jobs"])


@pytest.fixture
def caller(users: Any) -> str:
    return str(users.new()[1])


# -- JSON nested 1,000 deep ---------------------------------------------------------------------
#: A job no one made (fixed: parallel test runs must collect the same test ids).
MISSING = "c3a81e56-0f4b-4d27-9b1a-6e2d8f5c7a94"


@pytest.mark.parametrize("path", ["/v1/jobs", f"/v1/jobs/{MISSING}/input"])
def test_deep_json_on_http_is_a_400_problem(http: httpx.Client, path: str) -> None:
    response = post(http, path, b'{"operation": "test.noop", "params": {"a": ' + DEEP + b"}}", bearer("alice-token"))
    assert response.status_code == 400 and response.headers["Content-Type"] == "application/problem+json"
    assert "nested" in response.json()["detail"]


@pytest.mark.parametrize(("path", "headers"), [("/mcp", MCP), ("/a2a", A2A)])
def test_deep_json_on_json_rpc_is_a_parse_error(http: httpx.Client, path: str, headers: dict[str, str]) -> None:
    response = post(http, path, b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": ' + DEEP + b"}}",
                    {**bearer("alice-token"), **headers})
    assert response.status_code in (200, 400) and response.json()["error"]["code"] == -32700


# -- lone surrogates: refused before anything is written ----------------------------------------
def test_a_lone_surrogate_in_params_is_400_and_no_job(http: httpx.Client, caller: str) -> None:
    response = post(http, "/v1/jobs", {"operation": "test.noop", "params": {"note": LONE}}, bearer(caller))
    assert response.status_code == 400 and response.headers["Content-Type"] == "application/problem+json"
    assert http_jobs(http, caller) == 0


def test_a_lone_surrogate_in_an_answer_is_400(http: httpx.Client) -> None:
    response = post(http, f"/v1/jobs/{uuid.uuid4()}/input", {"inputResponses": {"ok": LONE}}, bearer("alice-token"))
    assert response.status_code == 400


def test_a_lone_surrogate_in_an_mcp_idempotency_key_is_invalid_params_and_no_job(http: httpx.Client,
                                                                                 caller: str) -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "test.noop", "arguments": {}, "_meta": {**modern_meta(), IDEMPOTENCY_META: LONE}}}
    response = post(http, "/mcp", body, {**bearer(caller), **MCP})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602 and response.json()["id"] == 3
    assert http_jobs(http, caller) == 0


@pytest.mark.parametrize("message", [{"contextId": LONE}, {"metadata": {"idempotencyKey": LONE}}])
def test_a_lone_surrogate_in_an_a2a_message_is_invalid_params_and_no_job(http: httpx.Client, caller: str,
                                                                         message: dict[str, Any]) -> None:
    response = post(http, "/a2a", a2a_send(message), {**bearer(caller), **A2A})
    assert response.json()["error"]["code"] == -32602 and response.json()["id"] == 7
    assert a2a_tasks(http, caller) == 0  # a retry without a key would otherwise make a second job


def test_a_lone_surrogate_in_a_push_config_id_is_invalid_params_and_no_job(http: httpx.Client, caller: str) -> None:
    config = {"id": LONE, "url": "https://93.184.215.14/hook"}
    response = post(http, "/a2a", a2a_send({}, configuration={"taskPushNotificationConfig": config}),
                    {**bearer(caller), **A2A})
    assert response.json()["error"]["code"] == -32602
    assert a2a_tasks(http, caller) == 0


# -- cursors that decode to nan -----------------------------------------------------------------
NAN_CURSOR = base64.urlsafe_b64encode(f"nan:{uuid.uuid4()}".encode()).decode().rstrip("=")


def test_a_nan_cursor_is_400(http: httpx.Client) -> None:
    response = http.get("/v1/jobs", params={"cursor": NAN_CURSOR}, headers=bearer("alice-token"))
    assert response.status_code == 400 and response.headers["Content-Type"] == "application/problem+json"


def test_a_nan_page_token_is_invalid_params(http: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageToken": NAN_CURSOR}}
    assert post(http, "/a2a", body, {**bearer("alice-token"), **A2A}).json()["error"]["code"] == -32602


# -- Last-Event-ID out of a Redis stream id's range ---------------------------------------------
@pytest.mark.parametrize("last", ["99999999999999999999-0", "0-99999999999999999999", "\uff11-0", "9" * 5000 + "-0"])
def test_an_event_id_out_of_range_is_400_before_the_stream(http: httpx.Client, last: str) -> None:
    job = post(http, "/v1/jobs", {"operation": "test.noop", "params": {}}, bearer("alice-token")).json()
    response = http.get(f"/v1/jobs/{job['taskId']}/events",
                        headers={**bearer("alice-token"), "Last-Event-ID": last.encode()})  # type: ignore[dict-item]
    assert response.status_code == 400 and response.headers["Content-Type"] == "application/problem+json"


# -- chunked bodies over the limit, over real HTTP ----------------------------------------------
@pytest.mark.parametrize("path", ["/v1/jobs", "/mcp", "/a2a"])
def test_a_chunked_body_over_the_limit_is_413(http: httpx.Client, runtime: Any, path: str) -> None:
    pad = b"x" * 65536
    chunks = [b'{"operation": "test.noop", "params": {"pad": "']
    chunks += [pad] * (runtime.settings.max_body_bytes // len(pad) + 1) + [b'"}}']
    response = http.post(path, content=iter(chunks), headers={**bearer("alice-token"), **MCP, **A2A,
                                                               "Content-Type": "application/json"})
    assert response.status_code == 413


# -- MCP transport rules ------------------------------------------------------------------------
def test_mcp_refuses_a_disallowed_origin_with_403_and_a_json_rpc_error(http: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}}
    response = post(http, "/mcp", body, {**bearer("alice-token"), **MCP, "Origin": "http://evil.example.com"})
    assert response.status_code == 403
    assert response.json()["jsonrpc"] == "2.0" and response.json()["id"] is None and response.json()["error"]
    assert post(http, "/mcp", body, {**bearer("alice-token"), **MCP}).status_code == 200  # no Origin: served


def test_mcp_refuses_an_unsupported_protocol_version_header(http: httpx.Client) -> None:
    caller = Legacy(http, "alice-token")
    caller.initialize()
    response = http.post("/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
                         headers={**caller.headers, "MCP-Protocol-Version": "1999-01-01"})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32022
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "x", "version": "0"}}}
    response = http.post("/mcp", json=init, headers={**bearer("alice-token"), "MCP-Protocol-Version": "1999-01-01"})
    assert response.status_code == 400


def test_mcp_202_answers_carry_no_html_content_type(http: httpx.Client) -> None:
    caller = Legacy(http, "alice-token")
    caller.initialize()
    response = http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=caller.headers)
    assert response.status_code == 202 and response.content == b""
    assert "text/html" not in response.headers.get("Content-Type", "")


# -- the agent card names the configured public URL, never the caller's Host ------------------------
def test_the_agent_card_ignores_the_host_header(http: httpx.Client, runtime: Any) -> None:
    card = http.get("/.well-known/agent-card.json", headers={"Host": "evil.example.com"}).json()
    assert card["supportedInterfaces"][0]["url"] == runtime.settings.public_url + "/a2a"
    assert "evil" not in json.dumps(card)


# -- integers are not truncated ---------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "status"), [(2.5, 422), ("5", 422), (True, 422), (2.0, 202), (2, 202)])
def test_an_integer_param_is_never_truncated_or_coerced(http: httpx.Client, steps: Any, status: int) -> None:
    body = {"operation": "demo.sleep", "params": {"seconds": 0, "steps": steps}}
    assert post(http, "/v1/jobs", body, bearer("alice-token")).status_code == status

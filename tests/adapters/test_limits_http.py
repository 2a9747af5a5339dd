"""Limits as JSON-RPC callers see them on /mcp and /a2a (the protocol's error, the retry hint in `data`), and the
A2A blocking send, which waits for a terminal or interrupted state however long that takes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tasks_backend.config import Settings
from tests.adapters.mcp.clients.rpc import LEGACY, MODERN, Legacy, Modern, modern_meta
from tests.conftest import ALICE, Serve, make_settings

A2A_HEADERS = {**ALICE, "A2A-Version": "1.0"}
MODERN_HEADERS = {**ALICE, "MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen",
                  "Accept": "application/json, text/event-stream"}




def a2a(base: str, method: str, params: dict[str, Any], timeout: float = 10) -> httpx.Response:
    return httpx.post(f"{base}/a2a", json={"jsonrpc": "2.0", "id": "r1", "method": method, "params": params},
                      headers=A2A_HEADERS, timeout=timeout)


def order(operation: str, params: dict[str, Any], **configuration: Any) -> dict[str, Any]:
    return {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                        "parts": [{"data": {"operation": operation, "params": params}}]},
            "configuration": configuration}


def assert_rpc_limited(body: dict[str, Any]) -> None:
    assert body["jsonrpc"] == "2.0" and "result" not in body
    assert body["error"]["code"] == -32000
    assert body["error"]["data"]["retryAfterSeconds"] >= 1


def test_rate_limit_on_jsonrpc_endpoints_is_a_jsonrpc_error(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, rate_limit=2, rate_window_s=60))
    with httpx.Client(base_url=base, timeout=10) as http:
        modern = Modern(http, "alice-token")
        assert modern.result("tools/list")  # 1
        assert "result" in a2a(base, "ListTasks", {}).json()  # 2
        for answer in (modern.post("tools/list"), modern.post("tools/call", {"name": "demo.sleep",
                                                                              "arguments": {"seconds": 1}})):
            assert answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1
            assert answer.headers["RateLimit-Policy"] == '"rate";q=2;w=60'
            assert_rpc_limited(answer.json())
            assert answer.json()["id"] is None  # refused before the body was read
        refused = a2a(base, "ListTasks", {})
        assert refused.status_code == 429 and refused.headers["Retry-After"]
        assert_rpc_limited(refused.json())


def test_quotas_inside_jsonrpc_methods_are_jsonrpc_errors(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, max_active_jobs=1))  # no worker: jobs stay queued
    with httpx.Client(base_url=base, timeout=10) as http:
        modern = Modern(http, "alice-token")
        modern.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1}})
        over = modern.post("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1}})
        assert over.status_code == 429 and over.headers["Retry-After"]
        assert_rpc_limited(over.json())
        assert over.json()["id"] == modern.next_id

        legacy = Legacy(http, "alice-token")
        legacy.initialize(LEGACY)
        old = legacy.post("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1}, "task": {"ttl": 60_000}})
        assert old.status_code == 200  # 2025 clients read errors only from a 200
        assert_rpc_limited(old.json())

    answer = a2a(base, "SendMessage", order("demo.sleep", {"seconds": 1}, returnImmediately=True))
    assert answer.status_code == 200  # A2A errors travel with 200
    assert_rpc_limited(answer.json())
    assert answer.json()["id"] == "r1"


def test_stream_quota_is_a_jsonrpc_error_and_creates_no_job(redis_base: str, serve: Serve) -> None:
    settings = make_settings(redis_base, max_streams=1, sse_max_s=30)
    base = serve(settings)
    with httpx.Client(base_url=base, timeout=10) as http:
        modern = Modern(http, "alice-token")
        task_id = modern.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1}})["taskId"]
        listen = {"notifications": {"taskIds": [task_id]}}
        with http.stream("POST", "/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
                                               "params": {**listen, "_meta": modern_meta()}},
                         headers=MODERN_HEADERS) as held:
            assert held.status_code == 200
            over = modern.post("subscriptions/listen", listen)
            assert over.status_code == 429
            assert_rpc_limited(over.json())
            streamed = a2a(base, "SendStreamingMessage", order("demo.sleep", {"seconds": 1}))
            assert_rpc_limited(streamed.json())
            blocking = a2a(base, "SendMessage", order("demo.sleep", {"seconds": 1}))
            assert_rpc_limited(blocking.json())
    jobs = httpx.get(f"{base}/v1/jobs", headers=ALICE).json()["jobs"]
    assert [j["taskId"] for j in jobs] == [task_id]  # refused sends created nothing


@pytest.mark.usefixtures("worker")
def test_a2a_blocking_send_waits_past_the_stream_bound_for_a_terminal_state(settings: Settings,
                                                                             serve: Serve) -> None:
    # The session worker runs the job; this web process bounds its streams at 1 s.
    base = serve(settings.with_(sse_max_s=1.0))
    answer = a2a(base, "SendMessage", order("demo.sleep", {"seconds": 2.5, "steps": 5}), timeout=30)
    task = answer.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task


def test_guessing_tokens_at_the_web_page_counts_against_the_address(redis_base: str, serve: Serve) -> None:
    """The page's sign-in form takes a token too: it meets the same failed-authentication limit as a bearer header."""
    url = serve(make_settings(redis_base, auth_failure_limit=3, auth_failure_window_s=60.0))
    with httpx.Client(base_url=url, timeout=10) as page:

        def sign_in(token: str) -> httpx.Response:
            form = page.get("/ui/signin").text
            csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            return page.post("/ui/signin", data={"token": token, "csrf": csrf, "next": ""})

        assert [sign_in(f"guess-{n}").status_code for n in range(3)] == [401, 401, 401]
        refused = sign_in("alice-token")  # right, but this address has used up its guesses
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
        assert httpx.get(f"{url}/v1/jobs", headers=ALICE).status_code == 429  # and the API says the same

"""MCP 2025-11-25 tasks, as raw JSON-RPC over real HTTP against the served app."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from werkzeug.serving import make_server

from adapters.app import create_app
from tasks_backend.access.auth import Principal
from tasks_backend.service.runtime import build_runtime
from tests.adapters.mcp.clients.rpc import IDEMPOTENCY_META, LEGACY, Legacy, await_result, sse_messages
from tests.conftest import bearer, make_settings, wait_until


@pytest.fixture
def alice(http: httpx.Client, users: Any) -> Legacy:
    caller = Legacy(http, users.new("alice")[1])
    caller.initialize()
    return caller


@pytest.fixture
def bob(http: httpx.Client, users: Any) -> Legacy:
    caller = Legacy(http, users.new("bob")[1])
    caller.initialize()
    return caller


def submit(caller: Legacy, name: str, arguments: dict[str, Any], **task: Any) -> dict[str, Any]:
    created = caller.result("tools/call", {"name": name, "arguments": arguments, "task": task})
    return created["task"]


def settle(caller: Legacy, task_id: str, *statuses: str) -> dict[str, Any]:
    return wait_until(lambda: (t := caller.result("tasks/get", {"taskId": task_id}))["status"] in statuses and t,
                      timeout=60, message=f"task {task_id} to reach {statuses}")


def test_initialize_opens_a_session_with_the_tasks_capability(http: httpx.Client) -> None:
    caller = Legacy(http, "alice-token")
    init = caller.initialize()
    assert init["protocolVersion"] == LEGACY and caller.session
    assert init["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    # An older handshake version is answered with the one we speak, as that negotiation prescribes.
    assert Legacy(http, "alice-token").initialize("2025-06-18")["protocolVersion"] == LEGACY


def test_requests_after_initialize_need_the_session(http: httpx.Client) -> None:
    response = http.post("/mcp", headers={**bearer("alice-token"), "MCP-Protocol-Version": LEGACY},
                         json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32600


def test_tools_require_task_augmentation(alice: Legacy) -> None:
    tools = {t["name"]: t for t in alice.result("tools/list")["tools"]}
    assert tools["demo.refund"]["execution"] == {"taskSupport": "required"}
    assert alice.error("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0}})["code"] == -32601
    assert alice.error("tools/call", {"name": "nope", "arguments": {}, "task": {}})["code"] == -32602
    assert alice.error("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0},
                                      "task": {"ttl": -5}})["code"] == -32602


@pytest.mark.usefixtures("worker")
def test_task_lifecycle_get_result_list(alice: Legacy, bob: Legacy, http: httpx.Client) -> None:
    created = submit(alice, "demo.sleep", {"seconds": 0.1, "steps": 1}, ttl=120_000)
    assert created["ttl"] == 120_000 and created["status"] == "working" and "pollInterval" in created
    assert "ttlMs" not in created
    done = settle(alice, created["taskId"], "completed")
    assert "result" not in done
    result = alice.result("tasks/result", {"taskId": created["taskId"]})
    assert result["structuredContent"] == {"slept": 0.1} and result["isError"] is False
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": created["taskId"]}
    assert http.get(f"/v1/jobs/{created['taskId']}", headers=bearer(alice.token)).json()["status"] == "completed"

    others = [submit(alice, "demo.sleep", {"seconds": 0})["taskId"] for _ in range(2)]
    submit(bob, "demo.sleep", {"seconds": 0})
    listed: list[str] = []
    cursor = None
    while True:
        page = alice.result("tasks/list", {"cursor": cursor} if cursor else {})
        listed += [t["taskId"] for t in page["tasks"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert sorted(listed) == sorted([created["taskId"], *others])
    assert alice.error("tasks/list", {"cursor": "garbage!"})["code"] == -32602


@pytest.mark.usefixtures("worker")
def test_failed_job_result_is_an_error_result(alice: Legacy) -> None:
    created = submit(alice, "demo.fail", {"message": "went wrong"})
    assert settle(alice, created["taskId"], "failed")["statusMessage"] == "went wrong"
    result = alice.result("tasks/result", {"taskId": created["taskId"]})
    assert result["isError"] is True and result["content"][0]["text"] == "went wrong"


@pytest.mark.usefixtures("worker")
def test_cancel_returns_the_task_and_refuses_terminal_ones(alice: Legacy) -> None:
    created = submit(alice, "demo.sleep", {"seconds": 120, "steps": 1200})
    settle(alice, created["taskId"], "working")
    cancelled = alice.result("tasks/cancel", {"taskId": created["taskId"]})
    # "returns the Task, now cancelled" (tasks/cancel, 2025-11-25), without waiting for the worker.
    assert cancelled["taskId"] == created["taskId"] and cancelled["status"] == "cancelled"
    assert alice.error("tasks/cancel", {"taskId": created["taskId"]})["code"] == -32602
    result = alice.result("tasks/result", {"taskId": created["taskId"]})
    assert result["isError"] is True


@pytest.mark.usefixtures("worker")
def test_another_owners_task_reads_like_a_missing_one(alice: Legacy, bob: Legacy) -> None:
    created = submit(alice, "demo.sleep", {"seconds": 0})
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        theirs = bob.error(method, {"taskId": created["taskId"]})
        missing = bob.error(method, {"taskId": str(uuid.uuid4())})
        assert theirs == missing and theirs["code"] == -32602, method
        assert bob.error(method, {"taskId": 12})["code"] == -32602


@pytest.mark.usefixtures("worker")
def test_idempotency_key_in_meta(alice: Legacy) -> None:
    key = f"k-{uuid.uuid4()}"
    params = {"name": "demo.sleep", "arguments": {"seconds": 0}, "task": {}, "_meta": {IDEMPOTENCY_META: key}}
    first = alice.result("tools/call", params)["task"]["taskId"]
    assert alice.result("tools/call", params)["task"]["taskId"] == first
    changed = {**params, "arguments": {"seconds": 2}}
    assert alice.error("tools/call", changed)["code"] == -32602


@pytest.mark.usefixtures("worker")
def test_input_through_elicitation_on_the_result_stream(alice: Legacy, http: httpx.Client) -> None:
    created = submit(alice, "demo.refund", {"order_id": "C-3", "amount": 9.5})
    settle(alice, created["taskId"], "input_required")
    asked, final = await_result(http, alice, created["taskId"], 77, {"action": "accept", "content": {"approved": True}})
    assert asked
    for message in asked:
        params = message["params"]
        assert params["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": created["taskId"]}
        assert params["requestedSchema"]["required"] == ["approved"]
    assert final is not None and final["id"] == 77
    assert final["result"]["structuredContent"]["status"] == "approved"


@pytest.mark.usefixtures("worker")
def test_answers_posted_as_responses(alice: Legacy, bob: Legacy, http: httpx.Client) -> None:
    created = submit(alice, "demo.refund", {"order_id": "D-4", "amount": 1})
    settle(alice, created["taskId"], "input_required")

    def answer(caller: Legacy, content: dict[str, Any]) -> httpx.Response:
        return http.post("/mcp", headers=caller.headers, json={
            "jsonrpc": "2.0", "id": f"tasks-backend/input/{created['taskId']}/approval",
            "result": {"action": "accept", "content": content}})

    refused = answer(alice, {"approved": "yes"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32602
    assert answer(bob, {"approved": True}).status_code == 202  # not his task: ignored, and nothing changes
    assert alice.result("tasks/get", {"taskId": created["taskId"]})["status"] == "input_required"
    assert answer(alice, {"approved": False}).status_code == 202
    assert settle(alice, created["taskId"], "completed")
    assert answer(alice, {"approved": True}).status_code == 202  # a stale answer is ignored
    result = alice.result("tasks/result", {"taskId": created["taskId"]})
    assert result["structuredContent"]["status"] == "rejected"
    unrelated = {"jsonrpc": "2.0", "id": "someone-else/1", "result": {}}
    assert http.post("/mcp", json=unrelated, headers=alice.headers).status_code == 202


@pytest.fixture
def short_streams(redis_base: str) -> Iterator[tuple[str, Any]]:
    """A second app whose result streams end after a second, and with no worker: its jobs stay queued."""
    runtime = build_runtime(make_settings(redis_base, sse_max_s=1.0))
    server = make_server("127.0.0.1", 0, create_app(runtime=runtime), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", runtime
    finally:
        server.shutdown()


def test_result_stream_resumes_with_last_event_id(short_streams: tuple[str, Any]) -> None:
    url, runtime = short_streams
    with httpx.Client(base_url=url, timeout=30) as http:
        caller = Legacy(http, "alice-token")
        caller.initialize()
        created = submit(caller, "demo.sleep", {"seconds": 0})
        body = {"jsonrpc": "2.0", "id": "r-1", "method": "tasks/result", "params": {"taskId": created["taskId"]}}
        with http.stream("POST", "/mcp", json=body, headers=caller.headers) as response:
            events = list(sse_messages(response))
        assert all(message is None for _, message in events)  # only resumable markers: the job is still queued
        last_id = events[-1][0]
        assert last_id
        runtime.service.cancel(Principal("alice"), created["taskId"])
        with http.stream("GET", "/mcp", headers={**caller.headers, "Last-Event-ID": last_id}) as response:
            final = [m for _, m in sse_messages(response) if m is not None]
        assert final[-1]["id"] == "r-1" and final[-1]["result"]["isError"] is True
        # Bob cannot resume Alice's stream: he gets the not-found error, never her task.
        with http.stream("GET", "/mcp", headers={**bearer("bob-token"), "Last-Event-ID": last_id}) as response:
            denied = [m for _, m in sse_messages(response) if m is not None]
        assert denied[-1]["error"]["code"] == -32602
        assert http.get("/mcp", headers=caller.headers).status_code == 405

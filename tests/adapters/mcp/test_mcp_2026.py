"""MCP 2026-07-28 with the tasks extension, as raw JSON-RPC over real HTTP against the served app."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.adapters.mcp.clients.rpc import IDEMPOTENCY_META, MODERN, Modern, sse_messages
from tests.conftest import bearer, wait_until

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture
def alice(http: httpx.Client, users: Any) -> Modern:
    return Modern(http, users.new("alice")[1])


@pytest.fixture
def bob(http: httpx.Client, users: Any) -> Modern:
    return Modern(http, users.new("bob")[1])


def settle(caller: Modern, task_id: str, *statuses: str) -> dict[str, Any]:
    return wait_until(lambda: (t := caller.result("tasks/get", {"taskId": task_id}))["status"] in statuses and t,
                      timeout=60, message=f"task {task_id} to reach {statuses}")


def test_discover_advertises_the_extension_and_cache_fields(alice: Modern) -> None:
    found = alice.result("server/discover")
    assert found["resultType"] == "complete"
    assert MODERN in found["supportedVersions"]
    assert found["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert isinstance(found["ttlMs"], int) and found["cacheScope"] in ("private", "public")
    assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tasks-backend"


def test_tools_list_publishes_each_operation_schema(alice: Modern) -> None:
    listed = alice.result("tools/list")
    assert listed["resultType"] == "complete" and "ttlMs" in listed and "cacheScope" in listed
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["demo.sleep"]["inputSchema"]["required"] == ["seconds"]
    assert "execution" not in tools["demo.sleep"]  # the 2026 schema has no taskSupport


def test_call_returns_flat_handle_shared_with_http(alice: Modern, http: httpx.Client) -> None:
    created = alice.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0.1, "steps": 1}},
                           headers={"Mcp-Name": "demo.sleep"})
    assert created["resultType"] == "task" and created["status"] == "working"
    assert {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= set(created)
    done = settle(alice, created["taskId"], "completed")
    assert done["resultType"] == "complete"
    assert done["result"]["structuredContent"] == {"slept": 0.1} and done["result"]["isError"] is False
    over_http = http.get(f"/v1/jobs/{created['taskId']}", headers=bearer(alice.token)).json()
    assert over_http["taskId"] == created["taskId"] and over_http["result"] == {"slept": 0.1}


def test_call_without_the_extension_is_refused(http: httpx.Client, users: Any) -> None:
    plain = Modern(http, users.new()[1], tasks=False)
    error = plain.error("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0}})
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"] == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    assert plain.error("tasks/get", {"taskId": str(uuid.uuid4())})["code"] == -32021


def test_bad_arguments_and_unknown_tools_are_invalid_params(alice: Modern) -> None:
    assert alice.error("tools/call", {"name": "nope", "arguments": {}})["code"] == -32602
    error = alice.error("tools/call", {"name": "demo.sleep", "arguments": {"seconds": "soon"}})
    assert error["code"] == -32602 and "seconds" in error["data"]["errors"]
    assert alice.error("tools/call", {"name": "demo.sleep", "arguments": [1]})["code"] == -32602


def test_failed_job_is_failed_with_error(alice: Modern) -> None:
    created = alice.result("tools/call", {"name": "demo.fail", "arguments": {"message": "no luck"}})
    failed = settle(alice, created["taskId"], "failed")
    assert failed["error"]["code"] == -32603 and failed["error"]["message"] == "no luck"
    assert failed["statusMessage"] and "result" not in failed


def test_input_requests_answered_with_update(alice: Modern) -> None:
    created = alice.result("tools/call", {"name": "demo.refund", "arguments": {"order_id": "X", "amount": 2}})
    parked = settle(alice, created["taskId"], "input_required")
    request = parked["inputRequests"]["approval"]
    assert request["method"] == "elicitation/create" and request["params"]["requestedSchema"]["type"] == "object"
    bad = alice.error("tasks/update", {"taskId": created["taskId"],
                                       "inputResponses": {"approval": {"action": "accept", "content": {}}}})
    assert bad["code"] == -32602 and bad["data"]["errors"]["approval"]
    ack = alice.result("tasks/update", {"taskId": created["taskId"], "inputResponses": {
        "approval": {"action": "accept", "content": {"approved": False}}, "unknown-key": {"action": "cancel"}}})
    assert ack["resultType"] == "complete"
    done = settle(alice, created["taskId"], "completed")
    assert done["result"]["structuredContent"]["status"] == "rejected"
    # A repeated answer to a task that no longer waits is acknowledged and ignored.
    assert alice.result("tasks/update", {"taskId": created["taskId"], "inputResponses": {"approval": {}}}) == {
        "resultType": "complete", "_meta": ack["_meta"]}


def test_a_question_with_nullable_fields_is_answered_with_update(alice: Modern) -> None:
    """A wrong answer to a nullable field is invalid params (it was an internal error); null is an answer."""
    created = alice.result("tools/call", {"name": "test.ask_nullable", "arguments": {}})
    settle(alice, created["taskId"], "input_required")
    bad = alice.error("tasks/update", {"taskId": created["taskId"], "inputResponses": {
        "note": {"action": "accept", "content": {"note": ["a list"], "copies": 1}}}})
    assert bad["code"] == -32602 and bad["data"]["errors"] == {"note": ["note: must be string or null"]}
    alice.result("tasks/update", {"taskId": created["taskId"], "inputResponses": {
        "note": {"action": "accept", "content": {"note": "thanks", "copies": None}}}})
    done = settle(alice, created["taskId"], "completed")
    assert done["result"]["structuredContent"] == {"note": "thanks", "copies": None}


def test_cancel_acknowledges_even_when_terminal(alice: Modern) -> None:
    created = alice.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 120, "steps": 1200}})
    settle(alice, created["taskId"], "working")
    assert alice.result("tasks/cancel", {"taskId": created["taskId"]})["resultType"] == "complete"
    # Cancelled by the time the acknowledgement arrives, running or not.
    assert alice.result("tasks/get", {"taskId": created["taskId"]})["status"] == "cancelled"
    assert alice.result("tasks/cancel", {"taskId": created["taskId"]})["resultType"] == "complete"


def test_another_owners_task_reads_like_a_missing_one(alice: Modern, bob: Modern) -> None:
    created = alice.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0}})
    for method, extra in (("tasks/get", {}), ("tasks/cancel", {}), ("tasks/update", {"inputResponses": {"a": 1}})):
        theirs = bob.error(method, {"taskId": created["taskId"], **extra})
        missing = bob.error(method, {"taskId": str(uuid.uuid4()), **extra})
        garbage = bob.error(method, {"taskId": "not-a-task", **extra})
        assert theirs == missing == garbage and theirs["code"] == -32602, method
    assert alice.result("tasks/get", {"taskId": created["taskId"]})["taskId"] == created["taskId"]


def test_idempotency_key_in_meta(alice: Modern, bob: Modern, http: httpx.Client) -> None:
    key = f"k-{uuid.uuid4()}"
    call = {"name": "demo.sleep", "arguments": {"seconds": 0}}
    first = alice.result("tools/call", call, meta={IDEMPOTENCY_META: key})
    again = alice.result("tools/call", call, meta={IDEMPOTENCY_META: key})
    assert again["taskId"] == first["taskId"]
    assert bob.result("tools/call", call, meta={IDEMPOTENCY_META: key})["taskId"] != first["taskId"]
    conflict = alice.error("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1}},
                           meta={IDEMPOTENCY_META: key})
    assert conflict["code"] == -32602
    assert alice.error("tools/call", call, meta={IDEMPOTENCY_META: 7})["code"] == -32602
    assert alice.error("tools/call", call, meta={IDEMPOTENCY_META: ""})["code"] == -32602
    # The same key over HTTP, for the same request and owner, is the same job.
    over_http = http.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0}},
                          headers={**bearer(alice.token), "Idempotency-Key": key})
    assert over_http.json()["taskId"] == first["taskId"]


def test_removed_and_unknown_methods_are_404(alice: Modern) -> None:
    for method in ("tasks/result", "tasks/list", "resources/list", "nope"):
        assert alice.error(method, {"taskId": str(uuid.uuid4())}, status=404)["code"] == -32601


def test_initialize_for_the_stateless_version_names_supported_versions(http: httpx.Client) -> None:
    response = http.post("/mcp", headers=bearer("alice-token"), json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022 and MODERN in error["data"]["supported"] and error["data"]["requested"] == MODERN


@pytest.mark.parametrize("headers", [{"Mcp-Method": "tools/list"}, {"Mcp-Name": "someone-else"},
                                     {"MCP-Protocol-Version": "2025-11-25"}])
def test_headers_that_contradict_the_body(alice: Modern, headers: dict[str, str]) -> None:
    task_id = str(uuid.uuid4())
    assert alice.error("tasks/get", {"taskId": task_id}, headers=headers)["code"] == -32020


def test_meta_is_required(http: httpx.Client) -> None:
    def send(params: dict[str, Any]) -> httpx.Response:
        return http.post("/mcp", headers=bearer("alice-token"),
                         json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})

    assert send({}).json()["error"]["code"] == -32602 and send({}).status_code == 400
    no_caps = send({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})
    assert no_caps.status_code == 400 and no_caps.json()["error"]["code"] == -32602
    future = send({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                             "io.modelcontextprotocol/clientCapabilities": {}}})
    assert future.status_code == 400 and future.json()["error"]["code"] == -32022
    assert send({"_meta": "x"}).json()["error"]["code"] == -32602


@pytest.mark.parametrize(("raw", "code"), [
    (b"{not json", -32700),
    (b"[]", -32600),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600),
    (b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}', -32602),
    (b"\xff\xfe", -32700),
])
def test_malformed_envelopes(http: httpx.Client, raw: bytes, code: int) -> None:
    response = http.post("/mcp", content=raw, headers={**bearer("alice-token"), "Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code and response.json()["id"] is None


def test_auth_and_size_are_http_errors(http: httpx.Client, settings: Any) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    for headers in ({}, bearer("wrong"), {"Authorization": "Basic abc"}):
        response = http.post("/mcp", json=body, headers=headers)
        assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    huge = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"a" * settings.max_body_bytes + b'"}}'
    response = http.post("/mcp", content=huge, headers=bearer("alice-token"))
    assert response.status_code == 413


def test_notifications_are_accepted_without_a_reply(http: httpx.Client) -> None:
    response = http.post("/mcp", headers=bearer("alice-token"),
                         json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    assert response.status_code == 202 and response.content == b""


def test_subscriptions_listen_streams_task_notifications(alice: Modern, bob: Modern, http: httpx.Client) -> None:
    mine = alice.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0.3, "steps": 3}})["taskId"]
    theirs = bob.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 0}})["taskId"]
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [mine, theirs, str(uuid.uuid4())]},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {
                                     "extensions": {"io.modelcontextprotocol/tasks": {}}}}}}
    headers = {**bearer(alice.token), "Accept": "application/json, text/event-stream"}
    with http.stream("POST", "/mcp", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        messages = [m for _, m in sse_messages(response) if m is not None]
    ack, *updates, end = messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [mine]}
    assert all(u["method"] == "notifications/tasks" and u["params"]["taskId"] == mine for u in updates)
    assert updates[-1]["params"]["status"] == "completed"
    assert updates[-1]["params"]["result"]["structuredContent"] == {"slept": 0.3}
    assert all(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1" for m in [ack, *updates])
    assert end["id"] == "listen-1" and end["result"]["resultType"] == "complete"


def test_listen_requires_the_extension_and_task_ids(http: httpx.Client, alice: Modern) -> None:
    plain = Modern(http, alice.token, tasks=False)
    assert plain.error("subscriptions/listen", {"notifications": {"taskIds": []}})["code"] == -32021
    assert alice.error("subscriptions/listen", {"notifications": {"taskIds": "x"}})["code"] == -32602

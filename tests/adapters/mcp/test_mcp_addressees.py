"""A question addressed to another principal, over MCP (both revisions, raw JSON-RPC over real HTTP, a real
worker): the addressee reads the task with its question (never its arguments or result) and answers it as the owner
would; anyone else gets exactly the error of a task that does not exist."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.adapters.mcp.clients.rpc import TASKS, Legacy, Modern, await_result, modern_meta, sse_messages
from tests.conftest import bearer, wait_until

pytestmark = pytest.mark.usefixtures("worker")
MISSING = "8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11"
ANSWERED_META = "io.tasks-backend/answeredBy"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
APPROVE = {"approve": {"action": "accept", "content": {"approved": True}}}


def settle(caller: Modern | Legacy, task_id: str, *statuses: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = caller.result("tasks/get", {"taskId": task_id})
        return found if found["status"] in statuses else None

    return wait_until(reached, 30, message=f"task {task_id} to reach {statuses}")  # type: ignore[no-any-return]


def same_error(caller: Modern | Legacy, method: str, task_id: str, **params: Any) -> dict[str, Any]:
    """The error `method` answers for `task_id`, checked to be exactly the one for a task that does not exist."""
    asked, missing = (caller.error(method, {"taskId": i, **params}) for i in (task_id, MISSING))
    assert asked == missing and asked["code"] == -32602, (asked, missing)
    return asked


def test_2026_an_addressee_reads_and_answers_the_task_and_a_stranger_finds_none(http: httpx.Client) -> None:
    alice, bob, carol = (Modern(http, f"{name}-token") for name in ("alice", "bob", "carol"))
    created = alice.result("tools/call", {"name": "test.ask_routed", "arguments": {"to": ["principal:bob"]}})
    task_id = created["taskId"]
    settle(alice, task_id, "input_required")

    seen = bob.result("tasks/get", {"taskId": task_id})
    assert seen["status"] == "input_required" and set(seen["inputRequests"]) == {"approve"}
    question = seen["inputRequests"]["approve"]
    assert question["method"] == "elicitation/create" and question["params"]["message"] == "Approve the refund?"
    assert not {"result", "error", "arguments", "params"} & set(seen)
    # A client that answers in the browser is sent where bob can: "Waiting for me" (the job's page is alice's).
    url_mode = {CAPABILITIES: {"extensions": {TASKS: {}}, "elicitation": {"url": {}}}}
    pointed = bob.result("tasks/get", {"taskId": task_id}, meta=url_mode)["inputRequests"]["approve"]["params"]
    assert pointed["mode"] == "url" and pointed["url"].endswith("/ui/waiting"), pointed
    for method in ("tasks/get", "tasks/update"):
        same_error(carol, method, task_id, **({"inputResponses": APPROVE} if method == "tasks/update" else {}))
    assert alice.result("tasks/get", {"taskId": task_id})["status"] == "input_required"

    assert bob.result("tasks/update", {"taskId": task_id, "inputResponses": APPROVE})["resultType"] == "complete"
    done = settle(alice, task_id, "completed")
    assert done["result"]["structuredContent"] == {"approval": {"approved": True}}
    assert done["_meta"][ANSWERED_META]["approve"]["by"] == "bob"
    after = settle(bob, task_id, "completed")
    assert after["result"]["isError"] is False and "structuredContent" not in after["result"]
    assert "approval" not in json.dumps(after["result"]) and after["_meta"][ANSWERED_META]["approve"]["by"] == "bob"
    same_error(carol, "tasks/get", task_id)

    # Listening: bob's task is acknowledged and announced as bob reads it; carol's is left out like a missing one.
    for caller, accepted in ((bob, [task_id]), (carol, [])):
        body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": [task_id]}, "_meta": modern_meta()}}
        headers = {**bearer(caller.token), "Accept": "application/json, text/event-stream"}
        with http.stream("POST", "/mcp", json=body, headers=headers, timeout=60) as response:
            assert response.status_code == 200
            messages = [m for _, m in sse_messages(response) if m is not None]
        assert messages[0]["params"]["notifications"]["taskIds"] == accepted
        notes = [m["params"] for m in messages if m.get("method") == "notifications/tasks"]
        assert [n["taskId"] for n in notes] == accepted
        assert all("structuredContent" not in n["result"] for n in notes)


def test_2025_an_addressee_reads_and_answers_the_task_and_a_stranger_finds_none(http: httpx.Client) -> None:
    alice, bob, carol = (Legacy(http, f"{name}-token") for name in ("alice", "bob", "carol"))
    for caller in (alice, bob, carol):
        caller.initialize()
    created = alice.result("tools/call", {"name": "test.ask_routed", "arguments": {"to": ["principal:bob"]},
                                          "task": {"ttl": 60000}})
    task_id = created["task"]["taskId"]
    settle(alice, task_id, "input_required")

    seen = bob.result("tasks/get", {"taskId": task_id})
    assert seen["taskId"] == task_id and seen["status"] == "input_required" and "ttl" in seen
    for method in ("tasks/get", "tasks/result"):
        same_error(carol, method, task_id)
    # Carol's answer to the question is ignored, as an answer for a task that does not exist is.
    stray = {"jsonrpc": "2.0", "id": f"tasks-backend/input/{task_id}/approve",
             "result": {"action": "accept", "content": {"approved": False}}}
    assert http.post("/mcp", json=stray, headers=carol.headers).status_code == 202
    assert alice.result("tasks/get", {"taskId": task_id})["status"] == "input_required"

    # Bob waits on tasks/result, is asked on that stream, answers, and is told only how the task ended.
    asked, final = await_result(http, bob, task_id, 41, {"action": "accept", "content": {"approved": True}})
    [question] = asked
    assert question["params"]["message"] == "Approve the refund?"
    assert question["params"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert final is not None and final["id"] == 41, final
    assert final["result"]["isError"] is False and "structuredContent" not in final["result"]
    assert "approval" not in json.dumps(final["result"])

    assert alice.result("tasks/result", {"taskId": task_id})["structuredContent"] == {"approval": {"approved": True}}
    assert settle(alice, task_id, "completed")["_meta"][ANSWERED_META]["approve"]["by"] == "bob"
    late = bob.result("tasks/result", {"taskId": task_id})
    assert late["isError"] is False and "structuredContent" not in late
    same_error(carol, "tasks/result", task_id)

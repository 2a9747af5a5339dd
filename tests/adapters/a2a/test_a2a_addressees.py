"""A question addressed to another principal, over A2A 1.0 (JSON-RPC over real HTTP, a real worker): the addressee
reads the task in input_required with its question in the status message (never its params or artifacts), follows it
and answers it as the owner would; anyone else gets exactly the error of a task that does not exist."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.adapters.a2a.test_a2a import rpc
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")
MISSING = "8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11"


def message(parts: dict[str, Any], task_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": parts}]}
    return out | ({"taskId": task_id} if task_id else {})


def answer(task_id: str) -> dict[str, Any]:
    return {"message": message({"inputResponses": {"approve": {"approved": True}}}, task_id)}


def result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200 and "result" in response.json(), response.text
    return response.json()["result"]  # type: ignore[no-any-return]


def settle(http: httpx.Client, task_id: str, state: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        task = result(rpc(http, "GetTask", {"id": task_id}))
        return task if task["status"]["state"] == state else None

    return wait_until(reached, 30, message=f"task {task_id} to reach {state}")  # type: ignore[no-any-return]


def subscribed(http: httpx.Client, task_id: str, token: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages a SubscribeToTask stream sends (or its one error reply)."""
    body = {"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": task_id}}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    with http.stream("POST", "/a2a", json=body, headers=headers, timeout=30) as response:
        if not response.headers["Content-Type"].startswith("text/event-stream"):
            return [json.loads(response.read())]
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def same_error(http: httpx.Client, method: str, params: Any, task_id: str) -> dict[str, Any]:
    """Carol's error for `method` on `task_id`, checked to be exactly the one for a task that does not exist."""
    asked, missing = (rpc(http, method, params(i), token="carol-token").json() for i in (task_id, MISSING))
    assert asked == missing and asked["error"]["code"] == -32001, (asked, missing)
    return asked


def test_an_addressee_reads_follows_and_answers_the_task_and_a_stranger_finds_none(http: httpx.Client) -> None:
    order = {"operation": "test.ask_routed", "params": {"to": ["principal:bob"]}}
    sent = result(rpc(http, "SendMessage", {"message": message(order), "configuration": {"returnImmediately": True}}))
    task_id = sent["task"]["id"]
    settle(http, task_id, "TASK_STATE_INPUT_REQUIRED")

    seen = result(rpc(http, "GetTask", {"id": task_id}, token="bob-token"))
    assert seen["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and "artifacts" not in seen
    [asked] = [p["data"]["inputRequests"] for p in seen["status"]["message"]["parts"] if "data" in p]
    assert set(asked) == {"approve"} and asked["approve"]["params"]["message"] == "Approve the refund?"
    assert seen["metadata"]["owner"] == "alice" and seen["metadata"]["operation"] == "test.ask_routed"
    assert "params" not in json.dumps(seen["metadata"])
    [streamed] = subscribed(http, task_id, "bob-token")  # the stream closes on input_required
    assert streamed["result"]["task"]["status"] == seen["status"] and "artifacts" not in streamed["result"]["task"]

    same_error(http, "GetTask", lambda i: {"id": i}, task_id)
    same_error(http, "SendMessage", answer, task_id)
    [carol_stream], [missing_stream] = (subscribed(http, i, "carol-token") for i in (task_id, MISSING))
    assert carol_stream == missing_stream and carol_stream["error"]["code"] == -32001
    assert settle(http, task_id, "TASK_STATE_INPUT_REQUIRED")

    # Bob answers with a blocking send: it returns once the task is done, without its artifacts.
    done = result(rpc(http, "SendMessage", answer(task_id), token="bob-token"))["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED" and "artifacts" not in done
    assert done["metadata"]["answeredBy"]["approve"]["by"] == "bob"
    owned = settle(http, task_id, "TASK_STATE_COMPLETED")
    assert owned["artifacts"][0]["parts"] == [{"data": {"approval": {"approved": True}}}]
    assert owned["metadata"]["answeredBy"]["approve"]["by"] == "bob"
    after = result(rpc(http, "GetTask", {"id": task_id}, token="bob-token"))
    assert after["status"]["state"] == "TASK_STATE_COMPLETED" and "artifacts" not in after
    same_error(http, "GetTask", lambda i: {"id": i}, task_id)

"""Two JavaScript SDKs nobody here wrote drive the demo jobs end to end over real HTTP, with a real worker.

The TypeScript MCP SDK (1.32.2, the 2025-11-25 tasks API) and @a2a-js/sdk (1.3.0, A2A 1.0 JSON-RPC),
pinned in tests/adapters/js/package-lock.json: complete, cancel, answer input, and another owner's
task reads as not found. Each script prints one JSON line per step; the assertions read them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import bearer
from tests.support.node import package, steps

pytestmark = pytest.mark.usefixtures("worker")


def test_typescript_mcp_sdk_runs_the_demo_jobs(worker: Any, live_url: str, users: Any, http: httpx.Client) -> None:
    package("@modelcontextprotocol/sdk")
    _, token = users.new("ts-mcp")
    _, other = users.new("ts-mcp-other")
    out = steps("mcp_client.mjs", f"{live_url}/mcp", token, other)
    assert out["initialize"]["version"] == "2025-11-25" and out["initialize"]["tasks"]["requests"]
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= set(out["tools"]["names"])
    assert set(out["tools"]["support"].values()) == {"required"}
    complete = out["complete"]
    assert complete["seen"][0] == "taskCreated" and complete["seen"][-1] == "result"
    assert complete["data"] == {"slept": 0.2} and complete["is_error"] is False
    assert out["failed"]["is_error"] is True and out["failed"]["text"] == "boom"
    assert out["cancel"]["final"] == "cancelled"
    refund = out["input"]
    assert refund["asked"] == ["Approve a refund of 2.25 for order T-3?"]
    assert refund["data"]["status"] == "approved" and refund["seen"][-1] == "result"
    # Another owner's task answers exactly as a missing one does: -32602 (DESIGN §5).
    assert out["ownership"] == {"get": -32602, "cancel": -32602, "result": -32602, "listed": []}
    created = [out[step]["task_id"] for step in ("complete", "cancel", "input")]
    assert set(created) <= set(out["list"]["task_ids"])
    job = http.get(f"/v1/jobs/{refund['task_id']}", headers=bearer(token)).json()
    assert job["status"] == "completed" and job["result"]["status"] == "approved"


def test_a2a_js_sdk_runs_the_demo_jobs(worker: Any, live_url: str, users: Any, http: httpx.Client) -> None:
    package("@a2a-js/sdk")
    _, token = users.new("js-a2a")
    _, other = users.new("js-a2a-other")
    out = steps("a2a_client.mjs", live_url, token, other)
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= set(out["card"]["skills"])
    assert out["complete"] == {**out["complete"], "state": "TASK_STATE_COMPLETED", "data": {"slept": 0.2}}
    stream = out["stream"]
    # The artifact comes as its own update, or inside the first task when the job was done before the
    # stream opened (a busy machine); either way exactly once, and the stream ends completed.
    assert stream["events"][0] == "task"
    assert stream["events"].count("artifactUpdate") + stream["events"].count("taskArtifact") == 1
    assert stream["final"] == "TASK_STATE_COMPLETED"
    cancel = out["cancel"]
    assert cancel["final"] == "TASK_STATE_CANCELED" and cancel["again"] == "TaskNotCancelableError"
    refund = out["input"]
    assert refund["parked"] == "TASK_STATE_INPUT_REQUIRED" and refund["keys"] == ["approval"]
    assert refund["state"] == "TASK_STATE_COMPLETED" and refund["data"]["status"] == "approved"
    assert out["ownership"] == {"get": "TaskNotFoundError", "cancel": "TaskNotFoundError", "listed": []}
    listed = out["list"]
    assert listed["ids"] == [refund["task_id"], cancel["task_id"]]
    assert listed["size"] == 2 and listed["total"] == 4 and listed["next"]
    job = http.get(f"/v1/jobs/{cancel['task_id']}", headers=bearer(token)).json()
    assert job["status"] == "cancelled"

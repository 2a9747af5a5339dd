"""A child job names its parent in every protocol's handle: HTTP `parentId`, MCP (both revisions) the task's
`_meta["io.tasks-backend/parentId"]`, A2A the task's `metadata.parentId`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adapters.a2a.test_a2a import rpc
from tests.adapters.mcp.clients.rpc import Legacy, Modern
from tests.conftest import ALICE, wait_until

pytestmark = pytest.mark.usefixtures("worker")
PARENT_META = "io.tasks-backend/parentId"


def test_every_protocol_shows_a_childs_parent(http: httpx.Client, tmp_path: Path) -> None:
    parent = http.post("/v1/jobs", json={"operation": "test.parent", "params": {
        "ledger": str(tmp_path / "ledger"), "children": 1}}, headers=ALICE).json()["taskId"]
    done: dict[str, Any] = wait_until(
        lambda: (j := http.get(f"/v1/jobs/{parent}", headers=ALICE).json())["status"] == "completed" and j, 20)
    child = done["result"]["children"][0]
    assert http.get(f"/v1/jobs/{child}", headers=ALICE).json()["parentId"] == parent
    modern = Modern(http, "alice-token").result("tasks/get", {"taskId": child})
    assert modern["_meta"][PARENT_META] == parent and "parentId" not in modern
    legacy = Legacy(http, "alice-token")
    legacy.initialize()
    task = legacy.result("tasks/get", {"taskId": child})
    assert task["_meta"][PARENT_META] == parent and "parentId" not in task
    listed = legacy.result("tasks/list")["tasks"]
    assert next(t for t in listed if t["taskId"] == child)["_meta"][PARENT_META] == parent
    a2a = rpc(http, "GetTask", {"id": child}).json()["result"]
    assert a2a["metadata"]["parentId"] == parent
    assert "parentId" not in rpc(http, "GetTask", {"id": parent}).json()["result"]["metadata"]

"""A rerun names the job it reruns in every protocol's handle: HTTP `rerunOf`, MCP (both revisions) the task's
`_meta["io.tasks-backend/rerunOf"]`, A2A the task's `metadata.rerunOf`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.adapters.a2a.test_a2a import rpc
from tests.adapters.mcp.clients.rpc import Legacy, Modern
from tests.conftest import ALICE, wait_until

pytestmark = pytest.mark.usefixtures("worker")
RERUN_META = "io.tasks-backend/rerunOf"


def test_every_protocol_shows_what_a_rerun_reruns(http: httpx.Client, tmp_path: Path) -> None:
    original = http.post("/v1/jobs", json={"operation": "test.fails_until", "params": {
        "ledger": str(tmp_path / "ledger"), "switch": str(tmp_path / "switch")}}, headers=ALICE).json()["taskId"]
    wait_until(lambda: http.get(f"/v1/jobs/{original}", headers=ALICE).json()["status"] == "failed", 20)
    rerun = http.post(f"/v1/jobs/{original}/rerun", headers=ALICE).json()["taskId"]
    assert http.get(f"/v1/jobs/{rerun}", headers=ALICE).json()["rerunOf"] == original
    modern = Modern(http, "alice-token").result("tasks/get", {"taskId": rerun})
    assert modern["_meta"][RERUN_META] == original and "rerunOf" not in modern
    legacy = Legacy(http, "alice-token")
    legacy.initialize()
    task = legacy.result("tasks/get", {"taskId": rerun})
    assert task["_meta"][RERUN_META] == original and "rerunOf" not in task
    assert rpc(http, "GetTask", {"id": rerun}).json()["result"]["metadata"]["rerunOf"] == original
    assert "rerunOf" not in rpc(http, "GetTask", {"id": original}).json()["result"]["metadata"]

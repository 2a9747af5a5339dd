"""The real MCP clients against the served app, each in its own environment (`make mcp-clients`).

Each client script prints one JSON line per step; the assertions here read those lines, and check over
plain HTTP that the tasks the clients created are the same jobs for the same owner.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import bearer

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).resolve().parent / "clients"

pytestmark = pytest.mark.usefixtures("worker")


def run_client(venv: str, script: str, url: str, token: str) -> dict[str, dict[str, Any]]:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{venv} is missing: run `make mcp-clients` (make test builds it)")
    done = subprocess.run([str(python), str(SCRIPTS / script), f"{url}/mcp", token],
                          capture_output=True, text=True, timeout=300, cwd=SCRIPTS)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {step.pop("step"): step for step in steps}


def test_fastmcp_client_over_the_2026_extension(live_url: str, users: Any, http: httpx.Client) -> None:
    _, token = users.new("fastmcp")
    out = run_client(".venv-mcp26", "client_2026.py", live_url, token)
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= set(out["tools"]["names"])
    assert out["transparent"] == {"data": {"slept": 0.2}, "is_error": False}
    assert out["task"]["status"] == "completed" and out["task"]["data"]["rows"] == 3
    assert out["cancel"]["status"] == "cancelled"
    assert out["input"]["parked"] == "input_required" and out["input"]["keys"] == ["approval"]
    assert out["input"]["asked"] == ["Approve a refund of 12.50 for order A-1?"]
    assert out["input"]["data"]["status"] == "approved"
    assert out["failed"] == {"raised": True, "message": "boom"}
    assert out["idempotent"]["first"] == out["idempotent"]["second"]
    for step, status in (("task", "completed"), ("cancel", "cancelled"), ("input", "completed")):
        job = http.get(f"/v1/jobs/{out[step]['task_id']}", headers=bearer(token)).json()
        assert job["status"] == status, step


def test_mcp_sdk_client_over_2025_11_25(live_url: str, users: Any, http: httpx.Client) -> None:
    _, token = users.new("mcp25")
    out = run_client(".venv-mcp25", "client_2025.py", live_url, token)
    assert out["initialize"]["version"] == "2025-11-25" and out["initialize"]["tasks"]["requests"]
    assert set(out["tools"]["support"].values()) == {"required"}
    complete = out["complete"]
    assert complete["statuses"][-1] == "completed" and complete["data"] == {"slept": 0.2}
    assert complete["ttl"] == 60000 and complete["is_error"] is False
    assert complete["meta"]["io.modelcontextprotocol/related-task"] == {"taskId": complete["task_id"]}
    assert out["failed"] == {"statuses": out["failed"]["statuses"], "is_error": True, "text": "boom"}
    assert out["failed"]["statuses"][-1] == "failed"
    assert out["cancel"]["final"] == "cancelled"
    assert out["input"]["statuses"][-1] == "input_required" and out["input"]["data"]["status"] == "approved"
    assert out["input"]["asked"][0]["message"] == "Approve a refund of 3.00 for order B-2?"
    assert out["idempotent"]["first"] == out["idempotent"]["second"]
    created = {complete["task_id"], out["cancel"]["task_id"], out["input"]["task_id"], out["idempotent"]["first"]}
    assert created <= set(out["list"]["task_ids"])
    job = http.get(f"/v1/jobs/{out['input']['task_id']}", headers=bearer(token)).json()
    assert job["status"] == "completed" and job["result"]["status"] == "approved"

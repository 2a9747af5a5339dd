"""Every JSON answer has one form, errors included: compact, on one line, ending with a newline (a shell prompt
after `curl` then starts on a line of its own). Over real HTTP, through the entrance, every adapter and Flask."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.adapters.mcp.clients.rpc import Modern
from tests.conftest import ALICE, wait_until

pytestmark = pytest.mark.usefixtures("worker")


def assert_one_compact_line(response: httpx.Response) -> Any:
    body = response.content
    assert body.endswith(b"\n") and body.count(b"\n") == 1, (response.request.url, body)
    value = json.loads(body)
    assert body == json.dumps(value, separators=(",", ":")).encode() + b"\n", (response.request.url, body)
    return value


def test_answers_and_errors_alike_are_compact_lines(http: httpx.Client) -> None:
    submitted = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}}, headers=ALICE)
    job_id = assert_one_compact_line(submitted)["taskId"]
    wait_until(lambda: http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "completed",
               message="the job to finish")
    answers = [
        http.get(f"/v1/jobs/{job_id}", headers=ALICE),  # the handle (the poll path)
        http.get(f"/v1/jobs/{job_id}/result", headers=ALICE),  # a result (Flask)
        http.get("/v1/jobs?limit=1", headers=ALICE),
        http.get("/v1/operations", headers=ALICE),
        http.get("/healthz"),
        http.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE),  # 409: a problem from the service
        http.get("/v1/jobs/00000000-0000-4000-8000-000000000000", headers=ALICE),  # 404
        http.post("/v1/jobs", json={"operation": "demo.sleep", "params": {}}, headers=ALICE),  # 422 with errors
        http.get("/v1/jobs"),  # 401 from the entrance
        http.post("/v1/nowhere", headers=ALICE),  # 404 from Flask's routing
        http.post("/mcp", content=b"{", headers=ALICE),  # JSON-RPC parse error
        http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),  # JSON-RPC, refused at the door
        http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": job_id}},
                  headers={**ALICE, "A2A-Version": "1.0"}),
    ]
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 200, 409, 404, 422, 401, 404, 400, 401, 200]
    for response in answers:
        assert_one_compact_line(response)
    assert_one_compact_line(Modern(http, "alice-token").post("tools/list"))

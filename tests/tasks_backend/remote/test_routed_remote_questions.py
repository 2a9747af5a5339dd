"""A remote task's question routed as `ctx.ask(..., to=, deadline=, on_timeout=)` routes its own: this project as
its own remote over MCP and A2A, with worker processes over real HTTP. Bob, asked, finds it in `GET /v1/questions`
and answers it; the answer reaches the remote task and alice's job completes; carol sees neither job nor question.
A deadline with a default answer sends that answer to the remote; one with "fail" fails the job and cancels the
remote task."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tests.conftest import BOB, CAROL, wait_until
from tests.tasks_backend.remote.conftest import RemoteDeployment

REFUND = {"order_id": "A-1", "amount": 5}
REMOTES = [
    ("test.remote_tool", "/mcp", {"tool": "demo.refund", "arguments": REFUND}),
    ("test.remote_message", "/a2a", {"message": {"operation": "demo.refund", "params": REFUND}}),
]


@pytest.mark.parametrize("operation,url_path,params", REMOTES)
def test_a_remote_question_to_bob_is_answered_by_bob(deployment: RemoteDeployment, operation: str, url_path: str,
                                                     params: dict[str, Any]) -> None:
    deployment.worker("w")
    job = deployment.submit(operation, {"url": deployment.url + url_path, "to": ["principal:bob"], **params})
    wait_until(lambda: deployment.state(job) is JobState.INPUT_REQUIRED, 30, interval=0.1,
               message="the remote question to reach the job")
    listed = deployment.http.get("/v1/questions", headers=BOB).json()
    [asked] = [q for q in listed["questions"] if q["jobId"] == job]
    assert asked["key"] == "remote:0/approval" and asked["to"] == ["principal:bob"] and asked["askedBy"] == "alice"
    assert "A-1" in asked["message"]
    carol_sees = deployment.http.get(f"/v1/jobs/{job}", headers=CAROL)
    carol_answers = deployment.http.post(f"/v1/jobs/{job}/input", headers=CAROL,
                                         json={"inputResponses": {asked["key"]: {"approved": False}}})
    assert (carol_sees.status_code, carol_answers.status_code) == (404, 404)
    answer = deployment.http.post(f"/v1/jobs/{job}/input", headers=BOB,
                                  json={"inputResponses": {asked["key"]: {"approved": True}}})
    assert answer.status_code in (200, 202), answer.text
    done = deployment.finished(job, timeout=40)
    assert done["status"] == "completed", done
    assert done["result"]["remote"]["status"] == "approved" and done["result"]["remote"]["orderId"] == "A-1"
    assert done["answeredBy"]["remote:0/approval"]["by"] == "bob"


@pytest.mark.parametrize("operation,url_path,params", REMOTES)
def test_a_remote_question_past_its_deadline_sends_the_default_or_fails(
        deployment: RemoteDeployment, operation: str, url_path: str, params: dict[str, Any]) -> None:
    deployment.worker("w")
    deployment.sweeper()
    url = deployment.url + url_path
    default = deployment.submit(operation, {"url": url, "to": ["principal:bob"], "deadline_s": 1,
                                            "on_timeout": {"approved": False, "reason": "nobody answered"}, **params})
    failing = deployment.submit(operation, {"url": url, "deadline_s": 1, "on_timeout": "fail", **params})
    result = deployment.finished(default, timeout=40)["result"]["remote"]
    assert result == {"status": "rejected", "orderId": "A-1", "reason": "nobody answered"}
    failed = deployment.finished(failing, timeout=40)
    assert failed["status"] == "failed" and failed["error"]["type"] == "QuestionTimedOut", failed
    # The failed job's remote task, still asking, is cancelled; the other one ended with the default answer.
    wait_until(lambda: sorted(j["status"] for j in deployment.remote_jobs()) == ["cancelled", "completed"], 20,
               interval=0.1, message="the failed job's remote task to be cancelled")

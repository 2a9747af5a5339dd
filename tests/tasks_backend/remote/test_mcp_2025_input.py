"""A 2025-11-25 MCP task that asks for input, with worker processes over real HTTP: this project as its own remote,
behind a proxy that hides `server/discover` (so the client speaks 2025-11-25 to it). The task's question, read from
its `tasks/result` stream, is asked in the job (here of bob) and the answer reaches the remote task as the response
to its `elicitation/create`; a server whose stream sends no question fails the job instead of keeping it waiting."""

from __future__ import annotations

from tasks_backend.model.domain import JobState
from tests.conftest import BOB, wait_until
from tests.support.remote_peers import Proxy
from tests.tasks_backend.remote.conftest import RemoteDeployment

REFUND = {"tool": "demo.refund", "arguments": {"order_id": "A-1", "amount": 5}}


def test_a_2025_task_asking_for_input_is_asked_in_the_job_and_answered(deployment: RemoteDeployment) -> None:
    proxy = Proxy(deployment.url, hide=frozenset({"server/discover"}))
    try:
        deployment.worker("w")
        job = deployment.submit("test.remote_tool", {"url": proxy.url + "/mcp", "to": ["principal:bob"], **REFUND})
        wait_until(lambda: deployment.state(job) is JobState.INPUT_REQUIRED, 30, interval=0.1,
                   message="the remote question to reach the job")
        [asked] = [q for q in deployment.http.get("/v1/questions", headers=BOB).json()["questions"]
                   if q["jobId"] == job]
        [remote] = deployment.remote_jobs()
        assert asked["key"] == f"remote:0/tasks-backend/input/{remote['taskId']}/approval"
        assert "A-1" in asked["message"] and asked["requestedSchema"]["required"] == ["approved"]
        answer = deployment.http.post(f"/v1/jobs/{job}/input", headers=BOB,
                                      json={"inputResponses": {asked["key"]: {"approved": True}}})
        assert answer.status_code in (200, 202), answer.text
        done = deployment.finished(job, timeout=40)
        assert done["status"] == "completed", done
        assert done["result"]["remote"]["status"] == "approved"
        assert deployment.remote_jobs()[0]["answeredBy"]["approval"]["by"] == "bob"
    finally:
        proxy.close()


def test_a_2025_task_whose_stream_sends_no_question_fails_the_job(deployment: RemoteDeployment) -> None:
    proxy = Proxy(deployment.url, hide=frozenset({"server/discover"}), mute=frozenset({"tasks/result"}))
    try:
        deployment.worker("w")
        job = deployment.submit("test.remote_tool", {"url": proxy.url + "/mcp", **REFUND})
        failed = deployment.finished(job, timeout=40)
        assert failed["status"] == "failed" and failed["error"]["type"] == "RemoteTaskFailed", failed
        assert "sent no elicitation/create request" in failed["error"]["message"]
        # The job's failure cancels the remote task it no longer waits on.
        wait_until(lambda: deployment.remote_jobs()[0]["status"] == "cancelled", 15, interval=0.1,
                   message="the remote task to be cancelled")
    finally:
        proxy.close()

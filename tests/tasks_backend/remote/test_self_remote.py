"""This project as its own remote, over real HTTP with real worker processes: a job runs a tool over MCP and sends
a message over A2A to the same deployment (as bob), holding no worker slot while the remote job runs; a remote
failure raises `RemoteTaskFailed`; cancelling the job cancels the remote one; a remote question is asked of the
job's owner and the answer reaches the remote; the remote task is made once across a SIGKILL of the worker that
created it, between the create and its record."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tests.conftest import wait_until
from tests.support.remote_peers import Proxy
from tests.tasks_backend.remote.conftest import RemoteDeployment


def test_a_tool_over_mcp_and_a_message_over_a2a_come_back_as_results(deployment: RemoteDeployment) -> None:
    deployment.worker("w", concurrency=1)
    tool = deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "demo.sleep",
                                                  "arguments": {"seconds": 1, "steps": 2}})
    sent = deployment.submit("test.remote_message", {"url": deployment.url + "/a2a", "message": {
        "operation": "demo.sleep", "params": {"seconds": 1, "steps": 2}}})
    # One worker slot: both local jobs park while their remote jobs (bob's) run on it.
    assert deployment.finished(tool)["result"] == {"remote": {"slept": 1.0}}
    assert deployment.finished(sent)["result"] == {"remote": {"slept": 1.0}}
    remote = deployment.remote_jobs()
    assert sorted(j["status"] for j in remote) == ["completed", "completed"]
    steps = deployment.runtime.store.open_remotes(tool)
    assert steps == []  # the end is recorded: a replay would neither poll nor create


@pytest.mark.parametrize("operation,url_path,params", [
    ("test.remote_tool", "/mcp", {"tool": "demo.fail", "arguments": {"message": "no stock"}}),
    ("test.remote_message", "/a2a", {"message": {"operation": "demo.fail", "params": {"message": "no stock"}}}),
])
def test_a_remote_failure_raises_remote_task_failed(deployment: RemoteDeployment, operation: str, url_path: str,
                                                    params: dict[str, Any]) -> None:
    deployment.worker("w")
    failed = deployment.submit(operation, {"url": deployment.url + url_path, **params})
    caught = deployment.submit(operation, {"url": deployment.url + url_path, "catch": True, **params})
    job = deployment.finished(failed)
    assert job["status"] == "failed"
    assert job["error"]["type"] == "RemoteTaskFailed" and "no stock" in job["error"]["message"]
    assert deployment.finished(caught)["result"]["failed"] == "failed"


def test_an_unknown_tool_is_a_rejected_remote_task(deployment: RemoteDeployment) -> None:
    deployment.worker("w")
    job = deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "no.such", "catch": True})
    assert deployment.finished(job)["result"]["failed"] == "rejected"


@pytest.mark.parametrize("operation,url_path,params", [
    ("test.remote_tool", "/mcp", {"tool": "demo.sleep", "arguments": {"seconds": 120, "steps": 120}}),
    ("test.remote_message", "/a2a", {"message": {"operation": "demo.sleep", "params": {"seconds": 120, "steps": 120}}}),
])
def test_cancelling_the_job_cancels_the_remote_task(deployment: RemoteDeployment, operation: str, url_path: str,
                                                    params: dict[str, Any]) -> None:
    deployment.worker("w")
    job = deployment.submit(operation, {"url": deployment.url + url_path, **params})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.1, message="the job to park")
    [remote] = deployment.remote_jobs()
    assert deployment.http.post(f"/v1/jobs/{job}/cancel").status_code in (200, 202)
    wait_until(lambda: deployment.remote_jobs()[0]["status"] == "cancelled", 15, interval=0.1,
               message="the remote job to be cancelled")
    assert deployment.remote_jobs()[0]["taskId"] == remote["taskId"]


@pytest.mark.parametrize("operation,url_path,params", [
    ("test.remote_tool", "/mcp", {"tool": "demo.refund", "arguments": {"order_id": "A-1", "amount": 5}}),
    ("test.remote_message", "/a2a", {"message": {"operation": "demo.refund", "params": {"order_id": "A-1",
                                                                                      "amount": 5}}}),
])
def test_a_remote_question_is_asked_of_the_owner_and_the_answer_sent_back(
        deployment: RemoteDeployment, operation: str, url_path: str, params: dict[str, Any]) -> None:
    deployment.worker("w")
    job = deployment.submit(operation, {"url": deployment.url + url_path, **params})
    wait_until(lambda: deployment.state(job) is JobState.INPUT_REQUIRED, 30, interval=0.1,
               message="the remote question to reach the job")
    shown = deployment.job(job)
    [key] = shown["inputRequests"]
    assert key == "remote:0/approval"
    assert "A-1" in shown["inputRequests"][key]["params"]["message"]
    answer = deployment.http.post(f"/v1/jobs/{job}/input", json={"inputResponses": {key: {"approved": True}}})
    assert answer.status_code in (200, 202), answer.text
    result = deployment.finished(job, timeout=40)["result"]["remote"]
    assert result["status"] == "approved" and result["orderId"] == "A-1"


@pytest.mark.parametrize("operation,url_path,params", [
    ("test.remote_tool", "/mcp", {"tool": "demo.sleep", "arguments": {"seconds": 1, "steps": 2}}),
    ("test.remote_message", "/a2a", {"message": {"operation": "demo.sleep", "params": {"seconds": 1, "steps": 2}}}),
])
def test_the_remote_task_is_made_once_across_a_sigkill_between_create_and_record(
        deployment: RemoteDeployment, operation: str, url_path: str, params: dict[str, Any]) -> None:
    proxy = Proxy(deployment.url)
    try:
        first = deployment.worker("first", concurrency=1)
        deployment.sweeper()
        # The create reaches the remote; the worker that sent it dies before the answer (and its record).
        proxy.on_create = first.kill_group
        job = deployment.submit(operation, {"url": proxy.url + url_path, **params})
        wait_until(lambda: not first.alive(), 20, interval=0.05, message="the first worker to die")
        assert proxy.creates == 1
        deployment.worker("second", concurrency=1)
        done = deployment.finished(job, timeout=60)
        assert done["status"] == "completed" and done["result"] == {"remote": {"slept": 1.0}}
        assert proxy.creates == 2  # sent again on the replay, with the same key ...
        assert len(deployment.remote_jobs()) == 1  # ... which the remote deduplicated: one remote task
    finally:
        proxy.close()


def test_ten_jobs_waiting_on_remotes_hold_none_of_two_worker_slots(deployment: RemoteDeployment) -> None:
    deployment.worker("w", concurrency=2)
    # The remote jobs (bob's) are sleepers that park too: twenty waiting jobs, none of them on a slot.
    waiting = [deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "test.sleeper",
                                                      "arguments": {"seconds": 10}}) for _ in range(10)]
    wait_until(lambda: all(deployment.state(j) is JobState.SUSPENDED for j in waiting), 30, interval=0.1,
               message="every local job to park")
    others = [deployment.submit("test.noop", {}) for _ in range(6)]
    wait_until(lambda: all(deployment.state(j) is JobState.COMPLETED for j in others), 15, interval=0.1,
               message="the other jobs to run on the slots the waiting ones gave back")
    assert all(deployment.state(j) is JobState.SUSPENDED for j in waiting)
    for j in waiting:
        assert deployment.finished(j, timeout=60)["status"] == "completed"
    assert len(deployment.remote_jobs()) == 10


def test_a_job_waiting_on_a_remote_survives_a_sigkill_of_its_worker(deployment: RemoteDeployment) -> None:
    first = deployment.worker("first", concurrency=2)
    deployment.sweeper()
    job = deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "demo.sleep",
                                                 "arguments": {"seconds": 3, "steps": 3}})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.05, message="the job to park")
    first.kill_group()  # the remote job (bob's) that ran there is lost too, and run again by the next worker
    deployment.worker("second", concurrency=2)
    done = deployment.finished(job, timeout=60)
    assert done["status"] == "completed" and done["result"] == {"remote": {"slept": 3.0}}
    assert len(deployment.remote_jobs()) == 1

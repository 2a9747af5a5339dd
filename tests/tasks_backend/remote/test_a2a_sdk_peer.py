"""Against a real a2a-sdk 1.3.0 agent with its database task store (SQLite), in a process of its own: a message's
task comes back as the result, a failure raises `RemoteTaskFailed`, cancel reaches the agent, a question in plain
text is asked of the owner and the answer reaches the agent across a restart of the agent, and the at-most-twice
window of an agent that does not deduplicate by messageId."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tasks_backend.devtools.embedded import free_port
from tasks_backend.model.domain import JobState
from tests.conftest import Serve, wait_until
from tests.support.procs import ROOT, Proc, wait_for_http
from tests.support.remote_peers import Proxy
from tests.tasks_backend.remote.conftest import RemoteDeployment, remote_settings

pytest.importorskip("a2a.server.tasks.database_task_store")
pytest.importorskip("aiosqlite")


class Agent:
    """The a2a-sdk agent process; `restart` stops it and starts it again on the same port and database."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, free_port()
        self.url = f"http://127.0.0.1:{self.port}/a2a"
        self.ledger = tmp / "agent-ledger"
        self.ledger.touch()
        self.proc = self._start()

    def _start(self) -> Proc:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        proc = Proc([sys.executable, "-m", "tests.support.a2a_peer", str(self.port), str(self.tmp / "agent.db"),
                     str(self.ledger)], env, self.tmp / "agent.log")
        wait_for_http(f"http://127.0.0.1:{self.port}/.well-known/agent-card.json", proc.popen, proc.log_path, 30,
                      "the a2a-sdk agent to start")
        return proc

    def restart(self) -> None:
        self.proc.stop()
        self.proc = self._start()

    def tasks_made(self) -> int:
        return len(self.ledger.read_text().splitlines())

    def state_of(self, task_id: str) -> str:
        reply = httpx.post(self.url, headers={"A2A-Version": "1.0"}, timeout=5, json={
            "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}).json()
        return str(reply["result"]["status"]["state"])


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path)
    yield a
    a.proc.stop()


def test_a_message_to_the_agent_comes_back_as_the_result(deployment: RemoteDeployment, agent: Agent) -> None:
    deployment.worker("w", concurrency=1)
    done = deployment.submit("test.remote_message", {"url": agent.url, "message": "work 1"})
    failed = deployment.submit("test.remote_message", {"url": agent.url, "message": "fail no stock"})
    assert deployment.finished(done)["result"] == {"remote": "done 1"}
    job = deployment.finished(failed)
    assert job["status"] == "failed" and job["error"]["type"] == "RemoteTaskFailed"
    assert "no stock" in job["error"]["message"]
    assert agent.tasks_made() == 2


def test_cancelling_the_job_cancels_the_agents_task(deployment: RemoteDeployment, agent: Agent) -> None:
    deployment.worker("w")
    job = deployment.submit("test.remote_message", {"url": agent.url, "message": "work 120"})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.1, message="the job to park")
    [(_, ref)] = deployment.runtime.store.open_remotes(job)
    assert deployment.http.post(f"/v1/jobs/{job}/cancel").status_code in (200, 202)
    wait_until(lambda: agent.state_of(ref["taskId"]) == "TASK_STATE_CANCELED", 15, interval=0.1,
               message="the agent's task to be cancelled")


def test_the_agents_question_is_answered_across_a_restart_of_the_agent(deployment: RemoteDeployment,
                                                                       agent: Agent) -> None:
    deployment.worker("w")
    job = deployment.submit("test.remote_message", {"url": agent.url, "message": "ask"})
    wait_until(lambda: deployment.state(job) is JobState.INPUT_REQUIRED, 30, interval=0.1,
               message="the agent's question to reach the job")
    shown = deployment.job(job)
    assert shown["inputRequests"]["remote:0/reply"]["params"]["message"] == "Which colour?"
    agent.restart()  # the task lives in the agent's database, not in its process
    answer = deployment.http.post(f"/v1/jobs/{job}/input", json={"inputResponses": {"remote:0/reply": {
        "reply": "red"}}})
    assert answer.status_code in (200, 202), answer.text
    assert deployment.finished(job, timeout=30)["result"] == {"remote": "got red"}
    assert agent.tasks_made() == 1


def test_an_agent_that_does_not_deduplicate_gets_the_create_at_most_twice(deployment: RemoteDeployment,
                                                                           agent: Agent) -> None:
    proxy = Proxy(f"http://127.0.0.1:{agent.port}")
    try:
        first = deployment.worker("first", concurrency=1)
        deployment.sweeper()
        proxy.on_create = first.kill_group  # the worker dies after the agent made the task, before its record
        job = deployment.submit("test.remote_message", {"url": proxy.url + "/a2a", "message": "work 1"})
        wait_until(lambda: not first.alive(), 20, interval=0.05, message="the first worker to die")
        deployment.worker("second", concurrency=1)
        assert deployment.finished(job, timeout=60)["result"] == {"remote": "done 1"}
        # Same messageId both times, but a2a-sdk does not deduplicate by it: the window's second task.
        assert agent.tasks_made() == 2 and proxy.creates == 2
    finally:
        proxy.close()


def test_the_agents_push_notification_wakes_the_job_before_any_poll(redis_base: str, tmp_path: Path, serve: Serve,
                                                                     agent: Agent) -> None:
    # Polling once a minute: the job comes back within seconds only if the agent's push woke it.
    d = RemoteDeployment(remote_settings(redis_base, remote_poll_s=60.0), tmp_path, serve)
    try:
        d.worker("w", TASKS_BACKEND_REMOTE_PUSH_URL=d.url + "/v1/remote-push", TASKS_BACKEND_REMOTE_POLL_INTERVAL="60")
        job = d.submit("test.remote_message", {"url": agent.url, "message": "work 2"})
        wait_until(lambda: d.state(job) is JobState.SUSPENDED, 20, interval=0.1, message="the job to park")
        assert d.finished(job, timeout=20)["result"] == {"remote": "done 2"}
        # A token not made here is refused like a missing job, and wakes nothing.
        forged = httpx.post(d.url + "/v1/remote-push", headers={"X-A2A-Notification-Token": f"{job}.{'0' * 64}"})
        assert forged.status_code == 404
    finally:
        d.close()


def test_the_agents_task_is_made_once_across_a_sigkill_of_the_worker_while_the_job_waits(
        deployment: RemoteDeployment, agent: Agent) -> None:
    first = deployment.worker("first")
    deployment.sweeper()
    job = deployment.submit("test.remote_message", {"url": agent.url, "message": "work 4"})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.05, message="the job to park")
    first.kill_group()
    deployment.worker("second")
    assert deployment.finished(job, timeout=60)["result"] == {"remote": "done 4"}
    assert agent.tasks_made() == 1

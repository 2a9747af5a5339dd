"""A job waiting on a 2026-07-28 MCP task resumes when its server notifies the task's end (`subscriptions/listen`),
not at the next poll: this project as its own remote, whose task asks to be polled every 30 s, over real HTTP with
worker processes. A server that does not notify task changes is polled (the FastMCP peer's tests)."""

from __future__ import annotations

import time

from tasks_backend.model.domain import JobState
from tests.conftest import wait_until
from tests.tasks_backend.remote.conftest import RemoteDeployment


def test_a_job_resumes_when_the_remote_notifies_the_end_not_at_the_next_poll(deployment: RemoteDeployment) -> None:
    deployment.worker("w", concurrency=2)
    job = deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "test.slow_poll",
                                                 "arguments": {"seconds": 3}})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.05, message="the job to park")
    [remote] = deployment.remote_jobs()
    assert remote["pollIntervalMs"] == 30_000
    wait_until(lambda: deployment.remote_jobs()[0]["status"] == "completed", 20, interval=0.05,
               message="the remote task to end")
    ended = time.monotonic()
    done = deployment.finished(job, timeout=10)
    assert done["status"] == "completed" and done["result"] == {"remote": {"slept": 3.0}}
    assert time.monotonic() - ended < 5  # far sooner than the 30 s poll the remote asked for

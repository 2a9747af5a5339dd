"""One cancel, the same in every protocol: a running demo.sleep is `cancelled` in the answer to the cancel
itself (HTTP, MCP 2025-11-25 and 2026-07-28, A2A 1.0), and nothing of that job is recorded after it.

demo.sleep reports progress after every slice, so its worker keeps trying to write after the cancel until
it reaches its next cancellation point; the fence makes every one of those writes a no-op. The record
and the event feed read right after the answer are compared with what they are once the worker let go.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime
from tests.adapters.a2a.test_a2a import rpc as a2a_rpc
from tests.adapters.mcp.clients.rpc import Legacy, Modern
from tests.conftest import bearer, wait_until

pytestmark = pytest.mark.usefixtures("worker")

#: Long enough never to finish on its own; a progress report every 0.1 s until it is stopped.
SLEEP = {"seconds": 120, "steps": 1200}

Start = Callable[[httpx.Client, str], str]
#: Cancels and returns the status the answer shows, in our wire vocabulary.
Cancel = Callable[[httpx.Client, str, str], str]


def http_start(http: httpx.Client, token: str) -> str:
    answer = http.post("/v1/jobs", json={"operation": "demo.sleep", "params": SLEEP}, headers=bearer(token))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["taskId"])


def http_cancel(http: httpx.Client, token: str, job_id: str) -> str:
    # DESIGN §7: `POST /v1/jobs/{id}/cancel` answers the handle, now `cancelled`.
    answer = http.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(token))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["status"])


def legacy_start(http: httpx.Client, token: str) -> str:
    caller = Legacy(http, token)
    caller.initialize()
    created = caller.result("tools/call", {"name": "demo.sleep", "arguments": SLEEP, "task": {}})
    return str(created["task"]["taskId"])


def legacy_cancel(http: httpx.Client, token: str, job_id: str) -> str:
    # MCP 2025-11-25 tasks/cancel "returns the Task, now cancelled".
    caller = Legacy(http, token)
    caller.initialize()
    return str(caller.result("tasks/cancel", {"taskId": job_id})["status"])


def modern_start(http: httpx.Client, token: str) -> str:
    return str(Modern(http, token).result("tools/call", {"name": "demo.sleep", "arguments": SLEEP})["taskId"])


def modern_cancel(http: httpx.Client, token: str, job_id: str) -> str:
    # The 2026-07-28 tasks extension acknowledges a cancel (`resultType: complete`); the task it names is
    # cancelled by then, which the test reads from the record right after this answer.
    ack = Modern(http, token).result("tasks/cancel", {"taskId": job_id})
    assert ack["resultType"] == "complete", ack
    return "cancelled"


def a2a_start(http: httpx.Client, token: str) -> str:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
               "parts": [{"data": {"operation": "demo.sleep", "params": SLEEP}}]}
    sent = a2a_rpc(http, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}},
                   token=token).json()
    return str(sent["result"]["task"]["id"])


def a2a_cancel(http: httpx.Client, token: str, job_id: str) -> str:
    # [spec] §3.1.5 CancelTask returns "the task with its cancellation status".
    task = a2a_rpc(http, "CancelTask", {"id": job_id}, token=token).json()["result"]
    assert task["id"] == job_id, task
    return {"TASK_STATE_CANCELED": "cancelled"}.get(task["status"]["state"], task["status"]["state"])


def cancelled_runs(runtime: Runtime) -> int:
    """demo.sleep runs the workers counted as cancelled (the sum of the duration buckets)."""
    figures = runtime.store.redis.hgetall(runtime.store.keys.stats("jobs"))
    return sum(int(v) for k, v in figures.items() if k.startswith("demo.sleep|cancelled|le"))


@pytest.mark.parametrize(("start", "cancel"), [(http_start, http_cancel), (legacy_start, legacy_cancel),
                                               (modern_start, modern_cancel), (a2a_start, a2a_cancel)],
                         ids=["http", "mcp-2025", "mcp-2026", "a2a"])
def test_cancelling_a_running_sleep_answers_cancelled_and_records_nothing_after(
        http: httpx.Client, users: Any, runtime: Runtime, start: Start, cancel: Cancel) -> None:
    _, token = users.new("canceller")
    job_id = start(http, token)
    wait_until(lambda: (r := runtime.store.get(job_id)) is not None and r.state is JobState.RUNNING
               and (r.progress or 0) >= 2, 30, message="the sleep to run and report progress")
    counted = cancelled_runs(runtime)

    assert cancel(http, token, job_id) == "cancelled"
    record = runtime.store.get(job_id)
    feed = runtime.store.events(job_id, "0-0", 0)
    assert record is not None and record.state is JobState.CANCELLED and record.terminal
    assert feed[-1].state is JobState.CANCELLED

    # The worker stops at its next slice, lets go of the job and counts the run as cancelled.
    wait_until(lambda: runtime.store.redis.zscore(runtime.store.keys.sweep(), job_id) is None, 20,
               message="the worker to let go of the job")
    wait_until(lambda: cancelled_runs(runtime) > counted, 20, message="the worker to count the cancelled run")
    assert runtime.store.get(job_id) == record  # not a progress report, not a result
    assert runtime.store.events(job_id, "0-0", 0) == feed  # nothing appended after the answer

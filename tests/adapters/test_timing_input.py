"""`runAt`, `delayMs` and `priority` in every protocol: accepted where the contract puts them, and a bad value is a
422 naming the field (HTTP) or the JSON-RPC invalid-params error (MCP, both revisions, and A2A), with no job made."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import httpx
import pytest

from tasks_backend.client import Client
from tests.adapters.mcp.clients.rpc import Legacy, Modern
from tests.conftest import bearer

A2A = {"A2A-Version": "1.0"}
META = "io.tasks-backend/"


def rfc3339(seconds_from_now: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds_from_now)).isoformat().replace("+00:00", "Z")


#: (fields, the field the error names). test.noop keeps its jobs 600 s.
BAD: list[tuple[dict[str, Any], str]] = [
    ({"runAt": rfc3339(60), "delayMs": 1000}, "delayMs"),
    ({"runAt": "tomorrow"}, "runAt"),
    ({"runAt": "2026-01-01T00:00:00"}, "runAt"),
    ({"runAt": 1767225600000}, "runAt"),
    # ISO 8601 forms that RFC 3339 does not have: basic format, week and ordinal dates, no seconds, an hour offset.
    ({"runAt": "20260101T000000Z"}, "runAt"),
    ({"runAt": "2026-W01-4T00:00:00Z"}, "runAt"),
    ({"runAt": "2026-001T00:00:00Z"}, "runAt"),
    ({"runAt": "2026-01-01T00:00Z"}, "runAt"),
    ({"runAt": "2026-01-01T00:00:00+01"}, "runAt"),
    ({"runAt": " 2026-01-01T00:00:00Z"}, "runAt"),
    ({"runAt": rfc3339(86400)}, "runAt"),
    ({"delayMs": -1}, "delayMs"),
    ({"delayMs": "10"}, "delayMs"),
    ({"delayMs": 1.5}, "delayMs"),
    ({"delayMs": 700_000}, "delayMs"),
    ({"priority": 10}, "priority"),
    ({"priority": -1}, "priority"),
    ({"priority": "5"}, "priority"),
    ({"priority": 2.5}, "priority"),
    ({"priority": True}, "priority"),
]


@pytest.fixture
def caller(users: Any) -> str:
    return str(users.new()[1])


def jobs_of(http: httpx.Client, token: str) -> int:
    return len(http.get("/v1/jobs", headers=bearer(token)).json()["jobs"])


@pytest.mark.parametrize(("fields", "name"), BAD)
def test_a_bad_time_or_priority_is_a_422_naming_the_field(http: httpx.Client, caller: str, fields: dict[str, Any],
                                                          name: str) -> None:
    response = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}, **fields}, headers=bearer(caller))
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    body = response.json()
    assert f"`{name}`" in body["detail"] and name in body["errors"]
    assert jobs_of(http, caller) == 0


@pytest.mark.parametrize(("fields", "name"), BAD[::2])
def test_a_bad_time_or_priority_over_mcp_is_invalid_params(http: httpx.Client, caller: str, fields: dict[str, Any],
                                                           name: str) -> None:
    meta = {META + k: v for k, v in fields.items()}
    error = Modern(http, caller).error("tools/call", {"name": "test.noop", "arguments": {}}, meta=meta)
    assert error["code"] == -32602 and name in error["message"]
    legacy = Legacy(http, caller)
    legacy.initialize()
    error = legacy.error("tools/call", {"name": "test.noop", "arguments": {}, "task": {}, "_meta": meta})
    assert error["code"] == -32602 and name in error["message"]
    assert jobs_of(http, caller) == 0


def a2a_send(metadata: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "metadata": metadata,
               "parts": [{"data": {"operation": "test.noop", "params": {}}}]}
    return {"jsonrpc": "2.0", "id": 7, "method": "SendMessage",
            "params": {"message": message, "configuration": {"returnImmediately": True}}}


@pytest.mark.parametrize(("fields", "name"), BAD[1::2])
def test_a_bad_time_or_priority_over_a2a_is_invalid_params(http: httpx.Client, caller: str, fields: dict[str, Any],
                                                           name: str) -> None:
    response = http.post("/a2a", content=json.dumps(a2a_send(fields)),
                         headers={**bearer(caller), **A2A, "Content-Type": "application/json"})
    error = response.json()["error"]
    assert error["code"] == -32602 and name in error["message"]
    assert jobs_of(http, caller) == 0


def test_every_protocol_takes_a_delay_and_a_priority(http: httpx.Client, live_url: str, caller: str) -> None:
    handle = Modern(http, caller).result("tools/call", {"name": "test.noop", "arguments": {}},
                                         meta={META + "delayMs": 60_000, META + "priority": 8})
    assert handle["priority"] == 8 and "runAt" in handle and "Waiting to start at" in handle["statusMessage"]
    response = http.post("/a2a", content=json.dumps(a2a_send({"runAt": rfc3339(60), "priority": 2})),
                         headers={**bearer(caller), **A2A, "Content-Type": "application/json"})
    task_id = response.json()["result"]["task"]["id"]
    shown = http.get(f"/v1/jobs/{task_id}", headers=bearer(caller)).json()
    assert shown["priority"] == 2 and shown["status"] == "working" and "runAt" in shown
    with Client(live_url, token=caller) as client:
        job = client.submit("test.noop", delay=dt.timedelta(seconds=60), priority=0)
        assert job.priority == 0 and job.run_at is not None and job.status == "working"
        timed = client.submit("test.noop", run_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1))
        assert timed.priority == 5 and timed.run_at is not None
    for record in http.get("/v1/jobs", headers=bearer(caller)).json()["jobs"]:
        http.post(f"/v1/jobs/{record['taskId']}/cancel", headers=bearer(caller))


def test_an_idempotency_key_reused_with_another_time_or_priority_is_a_conflict(http: httpx.Client,
                                                                              caller: str) -> None:
    """The start time and the priority are part of the request a key stands for: the same key with another of either
    is refused, not answered with the job that starts later or ranks lower; the same request again gets that job."""
    key = {**bearer(caller), "Idempotency-Key": uuid.uuid4().hex}
    first = {"operation": "test.noop", "params": {}, "delayMs": 300_000, "priority": 0}
    made = http.post("/v1/jobs", json=first, headers=key)
    assert made.status_code == 202, made.text
    plain = {"operation": "test.noop", "params": {}}
    for other in ({**first, "priority": 9}, {**plain, "priority": 0}, {**first, "delayMs": 1000},
                  {**plain, "priority": 0, "runAt": rfc3339(300)}):
        refused = http.post("/v1/jobs", json=other, headers=key)
        assert refused.status_code == 422, (other, refused.text)
        assert refused.json()["type"].endswith("idempotency-conflict")
    again = http.post("/v1/jobs", json=first, headers=key)
    assert again.status_code == 202 and again.json()["taskId"] == made.json()["taskId"]
    assert again.headers["Idempotent-Replayed"] == "true"
    # Without a time or priority, or with the default ones, a request hashes as it always did: the same job.
    key = {**bearer(caller), "Idempotency-Key": uuid.uuid4().hex}
    made = http.post("/v1/jobs", json=plain, headers=key)
    same = http.post("/v1/jobs", json={**plain, "priority": 5, "delayMs": 0}, headers=key)
    assert same.status_code == 202 and same.json()["taskId"] == made.json()["taskId"]
    assert http.post("/v1/jobs", json={**plain, "priority": 9}, headers=key).status_code == 422
    for record in http.get("/v1/jobs", headers=bearer(caller)).json()["jobs"]:
        http.post(f"/v1/jobs/{record['taskId']}/cancel", headers=bearer(caller))


def test_a_leap_second_is_a_time(http: httpx.Client, caller: str) -> None:
    """RFC 3339 has a 60th second at a leap second; a past one is a start now."""
    response = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}, "runAt": "2016-12-31T23:59:60Z"},
                         headers=bearer(caller))
    assert response.status_code == 202, response.text
    assert response.json()["runAt"] == "2017-01-01T00:00:00.000Z"
    # A time already past is a start now: nothing says the job waits for it.
    assert "statusMessage" not in response.json() or "Waiting to start" not in response.json()["statusMessage"]

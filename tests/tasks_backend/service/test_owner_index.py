"""The owner index and the idempotency records are keyed by a digest of the owner's name: what they lead to is checked
against each record's own owner before it is returned. A digest collision is simulated by writing another owner's job
into the index (and the idempotency record) Redis keeps for the caller; the calls go over real HTTP."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import httpx
import pytest

from tasks_backend.service.runtime import Runtime
from tests.conftest import Users, bearer


@pytest.fixture
def two(users: Users, live_url: str, runtime: Runtime) -> tuple[dict[str, str], str, str, dict[str, str]]:
    """The caller (who has one job) and another owner's job, written into the caller's index as newest."""
    me, mine_token = users.new("indexed")
    _, theirs_token = users.new("other")
    mine = bearer(mine_token)
    own = submit(live_url, mine)
    theirs = submit(live_url, bearer(theirs_token))
    runtime.store.redis.zadd(runtime.store.keys.owner_index(me), {theirs: time.time() * 1000 + 60_000})
    return mine, own, theirs, {"me": me}


def submit(url: str, headers: dict[str, str], **extra: str) -> str:
    reply = httpx.post(f"{url}/v1/jobs", json={"operation": "test.noop", "params": {}}, headers={**headers, **extra},
                       timeout=10)
    assert reply.status_code in (200, 201, 202), reply.text
    job_id: str = reply.json()["taskId"]
    return job_id


def a2a_list(url: str, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params},
                       headers={**headers, "A2A-Version": "1.0"}, timeout=10)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()["result"]
    return result


def test_every_listing_checks_the_owner_of_each_record(live_url: str, two: Any) -> None:
    mine, own, theirs, _ = two
    for query in ({}, {"status": "working"}, {"status": "completed"}, {"limit": 1}):
        jobs = httpx.get(f"{live_url}/v1/jobs", params=query, headers=mine, timeout=10).json()["jobs"]
        assert theirs not in {j["taskId"] for j in jobs}
    assert [j["taskId"] for j in httpx.get(f"{live_url}/v1/jobs", headers=mine, timeout=10).json()["jobs"]] == [own]
    listed = a2a_list(live_url, mine)
    assert [t["id"] for t in listed["tasks"]] == [own] and listed["totalSize"] == 1
    for status in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"):
        assert theirs not in [t["id"] for t in a2a_list(live_url, mine, status=status)["tasks"]]


def test_an_idempotent_replay_never_hands_out_another_owners_job(live_url: str, runtime: Runtime,
                                                                  two: Any) -> None:
    mine, _, theirs, who = two
    request_hash = hashlib.sha256(json.dumps(["test.noop", {}], sort_keys=True, separators=(",", ":"),
                                             ensure_ascii=False).encode()).hexdigest()[:32]
    key = runtime.store.keys.idempotency(who["me"], "order-7")
    runtime.store.redis.set(key, f"{theirs} {request_hash}", ex=3600)
    reply = httpx.post(f"{live_url}/v1/jobs", json={"operation": "test.noop", "params": {}},
                       headers={**mine, "Idempotency-Key": "order-7"}, timeout=10)
    # The key is taken (by a record the caller cannot have written): refused as a key reused, naming nothing.
    assert reply.status_code == 422 and theirs not in reply.text
    assert runtime.store.redis.get(key) == f"{theirs} {request_hash}"  # and the other owner's record is left alone
